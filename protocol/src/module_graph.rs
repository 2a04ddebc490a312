//! No cycle among the top-level modules of any crate of the workspace
//! (ARCHITECTURE.md, "Code map"; issue #27).
//!
//! The test reads each crate's sources from its root (`lib.rs`, `main.rs`),
//! follows the `mod` declarations that are not `#[cfg(test)]`, and draws an
//! edge "top-level module A uses top-level module B" for every `crate::B`
//! (also inside `use crate::{B, …}`) and every `super::…::B` that climbs to
//! the crate root, in any file of A. Comments, strings and `#[cfg(test)]`
//! items are left out, so tests may reach anywhere. It sits here, beside
//! `crate_graph`, because this crate is under every other: it sees all of
//! them and compiles fastest.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates whose top-level modules must form no cycle, by folder, and
/// their roots.
const CRATES: &[(&str, &str)] = &[
    ("protocol", "lib.rs"),
    ("core", "lib.rs"),
    ("wire", "lib.rs"),
    ("hub", "lib.rs"),
    ("client", "lib.rs"),
    ("shell", "lib.rs"),
    ("claude", "lib.rs"),
    ("service", "lib.rs"),
    ("service", "main.rs"),
    ("editor-shim", "main.rs"),
];

/// `text` with comments, string and char literals blanked (newlines kept).
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (1, 2);
            while j < rest.len() && depth > 0 {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if (rest.starts_with(b"r\"") || rest.starts_with(b"r#") || rest.starts_with(b"br"))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
            && raw_string_len(rest).is_some()
        {
            let n = raw_string_len(rest).unwrap();
            blank(&mut out, &rest[..n]);
            i += n;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let j = (j + 1).min(rest.len());
            blank(&mut out, &rest[..j]);
            i += j;
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{..}', a multi-byte char), not a
            // lifetime ('a).
            let len = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                text[i + 1..]
                    .chars()
                    .next()
                    .map(char::len_utf8)
                    .filter(|&n| rest.get(1 + n) == Some(&b'\''))
                    .map(|n| n + 2)
            };
            let n = len.unwrap_or(1);
            if len.is_some() {
                blank(&mut out, &rest[..n]);
            } else {
                out.push(b'\'');
            }
            i += n;
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("blanking keeps UTF-8")
}

/// The length of a raw string literal at the start of `s` (`r"…"`,
/// `r#"…"#`, `br"…"`).
fn raw_string_len(s: &[u8]) -> Option<usize> {
    let mut j = if s.starts_with(b"br") { 2 } else { 1 };
    let hashes = s[j..].iter().take_while(|&&c| c == b'#').count();
    j += hashes;
    if s.get(j) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let end = s[j + 1..]
        .windows(close.len())
        .position(|w| w == close.as_slice())?;
    Some(j + 1 + end + close.len())
}

/// `code` (already stripped) without the items marked `#[cfg(test)]`.
fn without_tests(code: &str) -> String {
    let mut out = code.to_owned();
    let mut from = 0;
    while let Some(at) = out[from..].find("#[cfg(test)]").map(|p| p + from) {
        let b = out.as_bytes();
        let mut j = at + "#[cfg(test)]".len();
        let mut depth = 0usize;
        // The item ends at the `;` before any brace, or at its brace's match.
        while j < b.len() {
            match b[j] {
                b'{' => depth += 1,
                // A field or an arm: it ends at its list's `,` or `}`.
                b'}' if depth == 0 => break,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        j += 1;
                        break;
                    }
                }
                b';' | b',' if depth == 0 => {
                    j += 1;
                    break;
                }
                _ => {}
            }
            j += 1;
        }
        let blanked: String = out[at..j]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(at..j, &blanked);
        from = at;
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The identifier at the start of `s`, after blanks.
fn ident(s: &str) -> &str {
    let s = s.trim_start();
    let end = s.bytes().position(|c| !is_ident(c)).unwrap_or(s.len());
    &s[..end]
}

/// The `mod NAME;` declarations of `code` (stripped, without tests).
fn declared_modules(code: &str) -> Vec<String> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    for (at, _) in code.match_indices("mod ") {
        if at > 0 && is_ident(b[at - 1]) {
            continue;
        }
        let name = ident(&code[at + 4..]);
        let after = code[at + 4..].trim_start()[name.len()..].trim_start();
        if !name.is_empty() && after.starts_with(';') {
            found.push(name.to_owned());
        }
    }
    found
}

/// The first segment of every path `code` names from the crate root:
/// `crate::B`, `crate::{B, C::…}`, and `super::` repeated `depth` times.
fn root_names(code: &str, depth: usize) -> Vec<String> {
    let b = code.as_bytes();
    let mut names = Vec::new();
    let mut starts: Vec<usize> = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && (is_ident(b[at - 1]) || b[at - 1] == b'$') {
            continue;
        }
        starts.push(at + "crate::".len());
    }
    let supers = "super::".repeat(depth);
    if depth > 0 {
        for (at, _) in code.match_indices(&supers) {
            if at > 0 && (is_ident(b[at - 1]) || b[at - 1] == b':') {
                continue;
            }
            let after = at + supers.len();
            if code[after..].starts_with("super::") {
                continue;
            }
            starts.push(after);
        }
    }
    for start in starts {
        let rest = code[start..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // The group's items, split at its top-level commas.
            let mut depth = 0usize;
            let mut item_start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        names.push(ident(&group[item_start..i]).to_owned());
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.push(ident(&group[item_start..i]).to_owned());
                        item_start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            names.push(ident(rest).to_owned());
        }
    }
    names.retain(|n| !n.is_empty() && n != "self");
    names
}

/// The file of module `name` declared in `dir` (the folder of its parent's
/// children).
fn module_file(dir: &Path, name: &str) -> Option<PathBuf> {
    [
        dir.join(format!("{name}.rs")),
        dir.join(name).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Top-level module → the top-level modules its non-test code names.
fn graph(folder: &str, root: &str) -> BTreeMap<String, BTreeSet<String>> {
    graph_with_files(folder, root)
        .into_iter()
        .map(|(m, uses)| (m, uses.into_keys().collect()))
        .collect()
}

/// Top-level module → each top-level module it names → the files naming it.
fn graph_with_files(
    folder: &str,
    root: &str,
) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(folder)
        .join("src");
    let read =
        |p: &Path| without_tests(&strip(&std::fs::read_to_string(p).expect("a source file")));
    let root_code = read(&src.join(root));
    let top = declared_modules(&root_code);
    assert!(
        !top.is_empty() || root == "main.rs",
        "{folder}/src/{root}: no modules read"
    );
    // Names the root re-exports from a module (`pub use error::{Error, Result};`)
    // stand for that module.
    let mut aliases: BTreeMap<String, String> = BTreeMap::new();
    for (at, _) in root_code.match_indices("use ") {
        let path = root_code[at + 4..].trim_start();
        let module = ident(path);
        if !top.contains(&module.to_owned()) {
            continue;
        }
        let rest = path[module.len()..].trim_start();
        let Some(rest) = rest.strip_prefix("::") else {
            continue;
        };
        let rest = rest.trim_start();
        let items = match rest.strip_prefix('{') {
            Some(group) => group[..group.find('}').unwrap_or(0)].split(',').collect(),
            None => vec![rest.split(';').next().unwrap_or("")],
        };
        for item in items {
            // `x as y` names y; `a::b` names b.
            let item = item.trim();
            let name = item
                .rsplit(" as ")
                .next()
                .unwrap_or(item)
                .rsplit("::")
                .next()
                .unwrap_or(item);
            let name = ident(name);
            if !name.is_empty() && !top.contains(&name.to_owned()) {
                aliases.insert(name.to_owned(), module.to_owned());
            }
        }
    }
    let mut edges: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for module in &top {
        let uses = edges.entry(module.clone()).or_default();
        let Some(file) = module_file(&src, module) else {
            continue;
        };
        // (file, its module depth, the folder of its children)
        let mut queue = vec![(file, 1usize, src.join(module))];
        while let Some((file, depth, dir)) = queue.pop() {
            let code = read(&file);
            for name in root_names(&code, depth) {
                let target = aliases.get(&name).cloned().unwrap_or(name);
                if top.contains(&target) && &target != module {
                    let shown = file
                        .strip_prefix(&src)
                        .unwrap_or(&file)
                        .display()
                        .to_string();
                    uses.entry(target).or_default().insert(shown);
                }
            }
            for child in declared_modules(&code) {
                if let Some(f) = module_file(&dir, &child) {
                    queue.push((f, depth + 1, dir.join(&child)));
                }
            }
        }
    }
    edges
}

/// A cycle of `edges`, if there is one, as the modules along it.
fn cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, edges, done, path) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|n| visit(n, edges, &mut done, &mut Vec::new()))
}

#[test]
#[ignore = "prints the graph"]
fn print() {
    for (folder, root) in CRATES {
        for (m, uses) in graph_with_files(folder, root) {
            for (t, files) in uses {
                eprintln!("{folder}/{root}: {m} -> {t}  {files:?}");
            }
        }
    }
}

#[test]
fn the_reader_sees_paths_from_the_root_and_skips_tests() {
    let code = without_tests(&strip(
        "use crate::{a::X, b, c::{d, e}};\n// crate::f\nlet s = \"crate::g\";\nlet c = '{';\n\
         fn h<'a>() { super::i::j(); super::super::k(); $crate::l }\n\
         #[cfg(test)]\nmod tests { use crate::m; fn n() { let _ = \"}\"; } }\n\
         #[cfg(test)]\nmod script;\nmod live;\nuse crate::o as p;\n",
    ));
    assert_eq!(root_names(&code, 1), ["a", "b", "c", "o", "i"]);
    assert_eq!(root_names(&code, 2), ["a", "b", "c", "o", "k"]);
    assert_eq!(declared_modules(&code), ["live"]);
    let mut edges = BTreeMap::new();
    edges.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    edges.insert("b".to_owned(), BTreeSet::from(["c".to_owned()]));
    assert_eq!(cycle(&edges), None);
    edges.insert("c".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert_eq!(cycle(&edges).unwrap(), ["a", "b", "c", "a"]);
}

/// Every crate's top-level modules form layers: no module reaches,
/// through others, back to itself.
#[test]
fn no_cycle_among_the_top_level_modules_of_any_crate() {
    let mut found = Vec::new();
    for (folder, root) in CRATES {
        let edges = graph(folder, root);
        if let Some(cycle) = cycle(&edges) {
            // Each step's edge with the files that make it, so the message
            // says where to cut.
            let files = graph_with_files(folder, root);
            let steps: Vec<String> = cycle
                .windows(2)
                .map(|w| {
                    let by: Vec<_> = files[&w[0]][&w[1]].iter().cloned().collect();
                    format!("  {} → {} ({})", w[0], w[1], by.join(", "))
                })
                .collect();
            found.push(format!(
                "{folder}/src/{root}: {}\n{}",
                cycle.join(" → "),
                steps.join("\n")
            ));
        }
    }
    assert!(
        found.is_empty(),
        "cycles among top-level modules:\n{}",
        found.join("\n")
    );
}
