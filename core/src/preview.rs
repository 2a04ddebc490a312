//! What a pending `Write`, `Edit` or `MultiEdit` would make of a file, as
//! the lines a person reads before allowing it: [`apply`] runs the tool on
//! the file's text the way Claude Code does (an `Edit`'s text must be
//! found, once unless `replace_all`), [`lines`] shows the difference with
//! a little context. Pure: the service reads the file and answers
//! `moonkale/agent/preview` with these.

use moonkale_protocol::agent::{LineSign, MAX_PREVIEW_LINES, PreviewLine};
use serde::Deserialize;

use crate::diff;

/// Lines of context around each change.
pub const CONTEXT: usize = 3;

/// The input of an editing tool, as the CLI gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileEdit {
    Write { content: String },
    Edit(Replace),
    MultiEdit(Vec<Replace>),
}

/// One replacement of `Edit` or `MultiEdit`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Replace {
    pub old_string: String,
    pub new_string: String,
    #[serde(default)]
    pub replace_all: bool,
}

#[derive(Deserialize)]
struct WriteInput {
    content: String,
}

#[derive(Deserialize)]
struct MultiEditInput {
    edits: Vec<Replace>,
}

impl FileEdit {
    /// The tool's input typed, for the three editing tools; `None` for any
    /// other tool or an input that is not the tool's.
    pub fn parse<'de, D: serde::Deserializer<'de>>(tool: &str, input: D) -> Option<FileEdit> {
        match tool {
            "Write" => WriteInput::deserialize(input)
                .ok()
                .map(|w| FileEdit::Write { content: w.content }),
            "Edit" => Replace::deserialize(input).ok().map(FileEdit::Edit),
            "MultiEdit" => MultiEditInput::deserialize(input)
                .ok()
                .map(|m| FileEdit::MultiEdit(m.edits)),
            _ => None,
        }
    }
}

/// The file's text after the tool, from its text now (`None`: no such
/// file); or why the tool would fail, in one sentence.
pub fn apply(edit: &FileEdit, current: Option<&str>) -> Result<String, String> {
    match edit {
        FileEdit::Write { content } => Ok(content.clone()),
        FileEdit::Edit(one) => replace(current, one),
        FileEdit::MultiEdit(all) => {
            let mut text = current.map(str::to_owned);
            for (i, one) in all.iter().enumerate() {
                let next = replace(text.as_deref(), one)
                    .map_err(|why| format!("edit {} of {}: {why}", i + 1, all.len()))?;
                text = Some(next);
            }
            Ok(text.unwrap_or_default())
        }
    }
}

fn replace(current: Option<&str>, r: &Replace) -> Result<String, String> {
    let Some(text) = current else {
        // An empty `old_string` creates the file.
        return if r.old_string.is_empty() {
            Ok(r.new_string.clone())
        } else {
            Err("the file does not exist".to_owned())
        };
    };
    if r.old_string.is_empty() {
        return if text.is_empty() {
            Ok(r.new_string.clone())
        } else {
            Err("the file exists and is not empty".to_owned())
        };
    }
    match text.matches(&r.old_string).count() {
        0 => Err("the text to replace is not in the file".to_owned()),
        1 => Ok(text.replacen(&r.old_string, &r.new_string, 1)),
        _ if r.replace_all => Ok(text.replace(&r.old_string, &r.new_string)),
        n => Err(format!(
            "the text to replace is in the file {n} times and replace_all is not set"
        )),
    }
}

/// The changed lines of `old` → `new` with [`CONTEXT`] lines around each
/// change, a `Gap` line between changes far apart, at most
/// [`MAX_PREVIEW_LINES`] (then a last `Gap` saying how many more).
pub fn lines(old: &str, new: &str) -> Vec<PreviewLine> {
    let (a, b) = (diff::lines(old), diff::lines(new));
    let hunks = diff::hunks(old, new);
    let strip = |l: &str| l.trim_end_matches(['\n', '\r']).to_owned();
    let number = |i: usize| Some(u32::try_from(i + 1).unwrap_or(u32::MAX));
    let mut out = Vec::new();
    let mut shown_to = 0; // old lines before this one are shown or skipped
    for (i, h) in hunks.iter().enumerate() {
        let from = h.old.start.saturating_sub(CONTEXT).max(shown_to);
        if from > shown_to || (i == 0 && from > 0) {
            out.push(gap(from - shown_to));
        }
        for (n, l) in a.iter().enumerate().take(h.old.start).skip(from) {
            out.push(line(LineSign::Context, strip(l), number(n)));
        }
        for n in h.old.clone() {
            out.push(line(LineSign::Removed, strip(a[n]), number(n)));
        }
        for n in h.new.clone() {
            out.push(line(LineSign::Added, strip(b[n]), number(n)));
        }
        // Context after, up to the next hunk's own context.
        let next = hunks.get(i + 1).map_or(a.len(), |n| n.old.start);
        let to = (h.old.end + CONTEXT).min(next).min(a.len());
        for (n, l) in a.iter().enumerate().take(to).skip(h.old.end) {
            out.push(line(LineSign::Context, strip(l), number(n)));
        }
        shown_to = to;
    }
    if !hunks.is_empty() && shown_to < a.len() {
        out.push(gap(a.len() - shown_to));
    }
    if out.len() > MAX_PREVIEW_LINES {
        let more = out.len() - (MAX_PREVIEW_LINES - 1);
        out.truncate(MAX_PREVIEW_LINES - 1);
        out.push(PreviewLine {
            sign: LineSign::Gap,
            text: format!("{more} more lines not shown"),
            line: None,
        });
    }
    out
}

fn line(sign: LineSign, text: String, line: Option<u32>) -> PreviewLine {
    PreviewLine { sign, text, line }
}

fn gap(lines: usize) -> PreviewLine {
    let text = if lines == 1 {
        "1 unchanged line".to_owned()
    } else {
        format!("{lines} unchanged lines")
    };
    line(LineSign::Gap, text, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edit(old: &str, new: &str, all: bool) -> FileEdit {
        FileEdit::Edit(Replace {
            old_string: old.into(),
            new_string: new.into(),
            replace_all: all,
        })
    }

    fn show(lines: &[PreviewLine]) -> String {
        lines
            .iter()
            .map(|l| {
                let sign = match l.sign {
                    LineSign::Context => ' ',
                    LineSign::Added => '+',
                    LineSign::Removed => '-',
                    LineSign::Gap => '~',
                };
                let n = l.line.map_or(String::new(), |n| n.to_string());
                format!("{sign}{n:>3} {}\n", l.text)
            })
            .collect()
    }

    #[test]
    fn tools_apply_as_the_cli_applies_them() {
        let text = "a\nb\na\n";
        assert_eq!(
            apply(&edit("b", "B", false), Some(text)),
            Ok("a\nB\na\n".into())
        );
        assert_eq!(
            apply(&edit("a", "A", false), Some(text)),
            Err("the text to replace is in the file 2 times and replace_all is not set".into())
        );
        assert_eq!(
            apply(&edit("a", "A", true), Some(text)),
            Ok("A\nb\nA\n".into())
        );
        assert_eq!(
            apply(&edit("zz", "A", false), Some(text)),
            Err("the text to replace is not in the file".into())
        );
        assert_eq!(apply(&edit("", "new\n", false), None), Ok("new\n".into()));
        assert!(apply(&edit("x", "y", false), None).is_err());
        let multi = FileEdit::MultiEdit(vec![
            Replace {
                old_string: "a\nb".into(),
                new_string: "x".into(),
                replace_all: false,
            },
            Replace {
                old_string: "zz".into(),
                new_string: "y".into(),
                replace_all: false,
            },
        ]);
        assert_eq!(
            apply(&multi, Some(text)),
            Err("edit 2 of 2: the text to replace is not in the file".into())
        );
        let write = FileEdit::Write {
            content: "w\n".into(),
        };
        assert_eq!(apply(&write, Some(text)), Ok("w\n".into()));
    }

    #[test]
    fn inputs_parse_by_tool() {
        let input = serde_json::json!({"file_path": "/w/a", "old_string": "a", "new_string": "b"});
        assert_eq!(FileEdit::parse("Edit", &input), Some(edit("a", "b", false)));
        assert_eq!(FileEdit::parse("Write", &input), None);
        assert_eq!(FileEdit::parse("Bash", &input), None);
        let multi = serde_json::json!({"edits": [{"old_string": "a", "new_string": "b", "replace_all": true}]});
        assert!(
            matches!(FileEdit::parse("MultiEdit", &multi), Some(FileEdit::MultiEdit(e)) if e[0].replace_all)
        );
    }

    #[test]
    fn changes_show_with_three_lines_of_context_and_gaps() {
        let old: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        let new = old.replace("line 5\n", "FIVE\n").replace("line 16\n", "");
        expect_test::expect![[r#"
            ~    1 unchanged line
               2 line 2
               3 line 3
               4 line 4
            -  5 line 5
            +  5 FIVE
               6 line 6
               7 line 7
               8 line 8
            ~    4 unchanged lines
              13 line 13
              14 line 14
              15 line 15
            - 16 line 16
              17 line 17
              18 line 18
              19 line 19
            ~    1 unchanged line
        "#]]
        .assert_eq(&show(&lines(&old, &new)));
        // A new file: every line added.
        expect_test::expect![[r#"
            +  1 a
            +  2 b
        "#]]
        .assert_eq(&show(&lines("", "a\nb\n")));
        // Changes close together share their context.
        expect_test::expect![[r#"
            -  1 a
            +  1 A
               2 b
            -  3 c
            +  3 C
               4 d
        "#]]
        .assert_eq(&show(&lines("a\nb\nc\nd\n", "A\nb\nC\nd\n")));
    }

    #[test]
    fn a_huge_change_is_cut_with_a_count() {
        let new: String = (0..1000).map(|i| format!("{i}\n")).collect();
        let shown = lines("", &new);
        assert_eq!(shown.len(), MAX_PREVIEW_LINES);
        assert_eq!(shown.last().unwrap().text, "601 more lines not shown");
    }
}
