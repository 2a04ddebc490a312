//! Checks of the hub's own sources: what reaches it is typed before its
//! handlers see it, so its production code names no method and no command
//! (`moonkale.*`, a [`moonkale_protocol::Command`]) by a string.

use std::path::Path;

/// Every `.rs` file under `dir`, but the tests'.
fn production_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("the hub's sources") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            if path.file_name() != Some("tests".as_ref()) {
                production_files(&path, out);
            }
        } else if path.extension() == Some("rs".as_ref()) {
            out.push(path);
        }
    }
}

/// A string literal that looks like a JSON-RPC method (`a/b`, `$/x`).
fn method_literal(line: &str) -> Option<&str> {
    line.split('"').skip(1).step_by(2).find(|s| {
        let mut parts = s.split('/');
        let head = parts.next().unwrap_or_default();
        let rest: Vec<&str> = parts.collect();
        !rest.is_empty()
            && (head == "$" || (!head.is_empty() && head.chars().all(|c| c.is_ascii_alphabetic())))
            && rest
                .iter()
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric()))
    })
}

/// A string literal that names one of our commands (`"moonkale.x…"`):
/// commands are [`moonkale_protocol::Command`] variants.
fn command_literal(line: &str) -> Option<&str> {
    line.split('"')
        .skip(1)
        .step_by(2)
        .find(|s| s.starts_with("moonkale."))
}

#[test]
fn the_hub_names_no_method_or_command_by_a_string() {
    let mut files = Vec::new();
    production_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 10, "read {} files", files.len());
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a source file");
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let after_cfg_test = n > 0 && lines[n - 1].trim() == "#[cfg(test)]";
            if after_cfg_test && line.trim_start().starts_with("mod ") {
                break; // a file's test module comes last
            }
            if after_cfg_test {
                continue; // one test-only statement
            }
            let code = line.split("//").next().unwrap_or_default();
            if let Some(literal) = method_literal(code).or_else(|| command_literal(code)) {
                found.push(format!("{}:{}: {literal}", file.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "method or command names as strings:\n{}",
        found.join("\n")
    );
    assert_eq!(
        method_literal(r#"if m == "textDocument/didOpen" {"#),
        Some("textDocument/didOpen")
    );
    assert_eq!(method_literal(r#"x.starts_with("$/")"#), None);
    assert_eq!(method_literal(r#"format!("{a}/{b}")"#), None);
    assert_eq!(
        command_literal(r#"Some("moonkale.keepHunk") => {"#),
        Some("moonkale.keepHunk")
    );
    assert_eq!(
        command_literal(r#""moonkale.selection wants [path]","#),
        Some("moonkale.selection wants [path]")
    );
    assert_eq!(command_literal(r#"format!("{command} wants [x]")"#), None);
    assert_eq!(command_literal(r#"root.join(".moonkale/proposals")"#), None);
}
