//! ARCHITECTURE.md is a map a newcomer follows: every repository path it
//! cites must exist. A path is a backquoted name ending in `.rs` or `/`;
//! it is found from the repository's root, or, inside a crate's section of
//! the code map (`### \`service/\` …`), anywhere under that crate (the map
//! names files within a module's bullet by their short names).

use std::path::{Path, PathBuf};

/// Every file and folder of the repository, as `/`-separated relative
/// paths (folders end in `/`), without build output and installed peers.
fn repository_paths(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("a folder of the repository") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if ["target", ".git", "node_modules", ".peers"].contains(&name.as_ref()) {
            continue;
        }
        let relative = path.strip_prefix(root).expect("under the root");
        let relative = relative.to_string_lossy().replace('\\', "/");
        if path.is_dir() {
            out.push(format!("{relative}/"));
            repository_paths(root, &path, out);
        } else {
            out.push(relative);
        }
    }
}

/// The backquoted names of `line` that are repository paths.
fn cited_paths(line: &str) -> impl Iterator<Item = &str> {
    line.split('`').skip(1).step_by(2).filter(|name| {
        (name.ends_with(".rs") || name.ends_with('/'))
            && !name.starts_with(['$', '~', '/', '.', '<'])
            && !name.contains([' ', '*', '{', '}', '<', '>', ':'])
    })
}

#[test]
fn every_path_architecture_md_cites_exists() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = root.canonicalize().expect("the repository");
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut paths = Vec::new();
    repository_paths(&root, &root, &mut paths);
    let mut section: Option<String> = None;
    let mut missing = Vec::new();
    let mut checked = 0;
    for (n, line) in text.lines().enumerate() {
        if let Some(heading) = line.strip_prefix("### `") {
            section = heading.split('`').next().map(str::to_owned);
        } else if line.starts_with("## ") {
            section = None;
        }
        for cited in cited_paths(line) {
            checked += 1;
            let in_section = |p: &String| {
                section.as_deref().is_none_or(|s| p.starts_with(s))
                    && (p.as_str() == cited || p.ends_with(&format!("/{cited}")))
            };
            if !paths.iter().any(|p| p.as_str() == cited) && !paths.iter().any(in_section) {
                missing.push(format!("line {}: `{cited}`", n + 1));
            }
        }
    }
    assert!(checked > 100, "only {checked} paths read");
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md cites paths that do not exist:\n{}",
        missing.join("\n")
    );
}
