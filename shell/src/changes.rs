//! A change set's file in the changes view: its hunks as diffs, each with
//! **Undo hunk**, and **Undo file**.

use dioxus::prelude::*;
use moonkale_client::moonkale_protocol::changes::{FileChange, ReviewState};

use crate::feed::Action;
use crate::model::inert;

#[component]
pub fn FileHunks(set: u64, name: String, file: FileChange) -> Element {
    let actions = use_coroutine_handle::<Action>();
    let uri = file.uri.clone();
    rsx! {
        div { class: "file",
            h3 { "{inert(&name)}" }
            for hunk in file.hunks.iter().cloned() {
                div { key: "{hunk.index}", class: "hunk",
                    p { class: "where", "{lines_label(hunk.before.start, hunk.before.end)}" }
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

/// Where a hunk was in the file: "line 3", "lines 3–5", or "after line 3"
/// for lines added between two (the range `start..end` of the old lines,
/// counted from 0).
fn lines_label(start: u32, end: u32) -> String {
    match end.saturating_sub(start) {
        0 if start == 0 => "at the start".to_owned(),
        0 => format!("after line {start}"),
        1 => format!("line {}", start + 1),
        _ => format!("lines {}–{end}", start + 1),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_hunk_says_where_it_was() {
        use super::lines_label;
        assert_eq!(lines_label(0, 1), "line 1");
        assert_eq!(lines_label(2, 5), "lines 3–5");
        assert_eq!(lines_label(3, 3), "after line 3");
        assert_eq!(lines_label(0, 0), "at the start");
    }
}
