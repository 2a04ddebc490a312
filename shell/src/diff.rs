//! What an editing tool would change, as diff lines a card shows: from
//! the service's preview against the file on disk ([`preview_diff`]) when
//! it has one, else from the tool's input alone ([`tool_diff`]): `Write` as
//! its new lines, `Edit` as the lines it replaces and the lines it writes,
//! `MultiEdit` as each edit in turn. Pure, so it is tested alone.

use moonkale_client::moonkale_protocol::agent::{LineSign, PreviewResult};
use serde_json::Value;

/// The most lines a card shows of one tool's change.
pub const MAX_LINES: usize = 400;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sign {
    Added,
    Removed,
    /// An unchanged line around a change.
    Same,
    /// A heading: which file, how many lines left out.
    Context,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffLine {
    pub sign: Sign,
    pub text: String,
}

impl DiffLine {
    pub fn class(&self) -> &'static str {
        match self.sign {
            Sign::Added => "add",
            Sign::Removed => "del",
            Sign::Same => "same",
            Sign::Context => "ctx",
        }
    }

    pub fn prefix(&self) -> &'static str {
        match self.sign {
            Sign::Added => "+ ",
            Sign::Removed => "- ",
            Sign::Same => "  ",
            Sign::Context => "",
        }
    }
}

/// The service's preview of an editing tool as diff lines: the file (and
/// whether the tool creates it), then its changed lines in context; `None`
/// when the service could not apply the tool to the file (the card then
/// shows the input and says why).
pub fn preview_diff(preview: &PreviewResult) -> Option<Vec<DiffLine>> {
    if preview.problem.is_some() {
        return None;
    }
    let created = if preview.creates { " (new file)" } else { "" };
    let mut out = vec![DiffLine {
        sign: Sign::Context,
        text: crate::text::inert(&format!("{}{created}", preview.path)),
    }];
    if preview.lines.is_empty() {
        out.push(DiffLine {
            sign: Sign::Context,
            text: "no change to the file".to_owned(),
        });
    }
    out.extend(preview.lines.iter().map(|l| DiffLine {
        sign: match l.sign {
            LineSign::Added => Sign::Added,
            LineSign::Removed => Sign::Removed,
            LineSign::Context => Sign::Same,
            LineSign::Gap => Sign::Context,
        },
        text: match l.sign {
            LineSign::Gap => format!("⋯ {}", crate::text::inert(&l.text)),
            _ => crate::text::inert(&l.text),
        },
    }));
    Some(out)
}

/// The diff of `Write`, `Edit` or `MultiEdit`; `None` for any other tool.
pub fn tool_diff(tool: &str, input: &Value) -> Option<Vec<DiffLine>> {
    let path = input["file_path"].as_str().unwrap_or_default();
    let mut out = vec![DiffLine {
        sign: Sign::Context,
        text: crate::text::inert(path),
    }];
    match tool {
        "Write" => lines(&mut out, Sign::Added, input["content"].as_str()?),
        "Edit" => edit(&mut out, input),
        "MultiEdit" => {
            for e in input["edits"].as_array()? {
                edit(&mut out, e);
            }
        }
        _ => return None,
    }
    if out.len() > MAX_LINES {
        let more = out.len() - MAX_LINES;
        out.truncate(MAX_LINES);
        out.push(DiffLine {
            sign: Sign::Context,
            text: format!("… {more} more lines"),
        });
    }
    Some(out)
}

fn edit(out: &mut Vec<DiffLine>, e: &Value) {
    lines(
        out,
        Sign::Removed,
        e["old_string"].as_str().unwrap_or_default(),
    );
    lines(
        out,
        Sign::Added,
        e["new_string"].as_str().unwrap_or_default(),
    );
}

fn lines(out: &mut Vec<DiffLine>, sign: Sign, text: &str) {
    for line in text.lines().take(MAX_LINES + 1) {
        out.push(DiffLine {
            sign: sign.clone(),
            text: crate::text::inert(line),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(lines: &[DiffLine]) -> String {
        lines
            .iter()
            .map(|l| format!("{}{}\n", l.prefix(), l.text))
            .collect()
    }

    #[test]
    fn edits_as_removed_and_added_lines() {
        let write = tool_diff(
            "Write",
            &json!({"file_path": "/w/a.py", "content": "x = 1\ny = 2\n"}),
        );
        assert_eq!(render(&write.unwrap()), "/w/a.py\n+ x = 1\n+ y = 2\n");
        let edit = tool_diff(
            "Edit",
            &json!({"file_path": "/w/a.py", "old_string": "x = 1", "new_string": "x = 3"}),
        );
        assert_eq!(render(&edit.unwrap()), "/w/a.py\n- x = 1\n+ x = 3\n");
        let multi = tool_diff(
            "MultiEdit",
            &json!({"file_path": "/w/a.py", "edits": [
                {"old_string": "a", "new_string": "b"},
                {"old_string": "c", "new_string": "d"}]}),
        );
        assert_eq!(render(&multi.unwrap()), "/w/a.py\n- a\n+ b\n- c\n+ d\n");
        assert_eq!(tool_diff("Bash", &json!({"command": "ls"})), None);
    }

    #[test]
    fn a_preview_shows_the_file_in_context_or_says_nothing() {
        use moonkale_client::moonkale_protocol::agent::PreviewLine;
        let line = |sign, text: &str| PreviewLine {
            sign,
            text: text.into(),
            line: Some(1),
        };
        let mut preview = PreviewResult {
            approval: "s/1".into(),
            path: "/w/a.py".into(),
            creates: false,
            lines: vec![
                line(LineSign::Gap, "4 unchanged lines"),
                line(LineSign::Context, "x = 0"),
                line(LineSign::Removed, "x = 1"),
                line(LineSign::Added, "x = 2\u{1b}[2J"),
            ],
            problem: None,
        };
        assert_eq!(
            render(&preview_diff(&preview).unwrap()),
            "/w/a.py\n⋯ 4 unchanged lines\n  x = 0\n- x = 1\n+ x = 2␛[2J\n"
        );
        preview.problem = Some("the text to replace is not in the file".into());
        assert_eq!(preview_diff(&preview), None);
    }

    #[test]
    fn a_huge_write_is_cut_with_a_count() {
        let content = "x\n".repeat(10_000);
        let lines =
            tool_diff("Write", &json!({"file_path": "/w/big", "content": content})).unwrap();
        assert_eq!(lines.len(), MAX_LINES + 1);
        assert!(lines.last().unwrap().text.contains("more lines"));
    }
}
