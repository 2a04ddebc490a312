//! A change set's file in the changes view: its hunks as diffs, each with
//! **Undo hunk**, and **Undo file**.

use dioxus::prelude::*;
use moonkale_client::moonkale_protocol::changes::{FileChange, ReviewState};

use crate::feed::Action;

/// The last two components of a `file:` URI's path, for a list.
pub fn short_path(uri: &str) -> String {
    let path = uri.strip_prefix("file://").unwrap_or(uri);
    let parts: Vec<&str> = path.rsplitn(3, '/').collect();
    match parts.as_slice() {
        [name, dir, _] => format!("{dir}/{name}"),
        _ => path.to_owned(),
    }
}

#[component]
pub fn FileHunks(set: u64, file: FileChange) -> Element {
    let actions = use_coroutine_handle::<Action>();
    let uri = file.uri.clone();
    rsx! {
        div { class: "file",
            h3 { "{short_path(file.uri.as_str())}" }
            for hunk in file.hunks.iter().cloned() {
                div { key: "{hunk.index}", class: "hunk",
                    p { class: "where", "lines {hunk.before.start + 1}–{hunk.before.end.max(hunk.before.start + 1)}" }
                    pre { class: "diff",
                        for (n, line) in hunk.removed.lines().enumerate() {
                            div { key: "r{n}", class: "del", "- {line}" }
                        }
                        for (n, line) in hunk.added.lines().enumerate() {
                            div { key: "a{n}", class: "add", "+ {line}" }
                        }
                    }
                    if hunk.state == ReviewState::Pending {
                        button { class: "deny",
                            onclick: { let uri = uri.clone(); move |_| actions.send(Action::Undo { set, uri: Some(uri.clone()), hunk: Some(hunk.index) }) },
                            "Undo hunk"
                        }
                    } else {
                        p { class: "state", if hunk.state == ReviewState::Kept { "kept" } else { "undone" } }
                    }
                }
            }
            button { class: "deny",
                onclick: { let uri = uri.clone(); move |_| actions.send(Action::Undo { set, uri: Some(uri.clone()), hunk: None }) },
                "Undo file"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn short_paths() {
        assert_eq!(super::short_path("file:///w/src/main.rs"), "src/main.rs");
        assert_eq!(super::short_path("file:///a.rs"), "/a.rs");
    }
}
