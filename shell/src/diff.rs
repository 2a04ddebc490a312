//! What an editing tool would change, as diff lines a card shows: `Write`
//! as its new lines, `Edit` as the lines it replaces and the lines it
//! writes, `MultiEdit` as each edit in turn. Pure, so it is tested alone.

use serde_json::Value;

/// The most lines a card shows of one tool's change.
pub const MAX_LINES: usize = 400;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sign {
    Added,
    Removed,
    /// A heading: which file, which edit.
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
            Sign::Context => "ctx",
        }
    }

    pub fn prefix(&self) -> &'static str {
        match self.sign {
            Sign::Added => "+ ",
            Sign::Removed => "- ",
            Sign::Context => "",
        }
    }
}

/// The diff of `Write`, `Edit` or `MultiEdit`; `None` for any other tool.
pub fn tool_diff(tool: &str, input: &Value) -> Option<Vec<DiffLine>> {
    let path = input["file_path"].as_str().unwrap_or_default();
    let mut out = vec![DiffLine {
        sign: Sign::Context,
        text: crate::model::inert(path),
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
            text: crate::model::inert(line),
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
    fn a_huge_write_is_cut_with_a_count() {
        let content = "x\n".repeat(10_000);
        let lines =
            tool_diff("Write", &json!({"file_path": "/w/big", "content": content})).unwrap();
        assert_eq!(lines.len(), MAX_LINES + 1);
        assert!(lines.last().unwrap().text.contains("more lines"));
    }
}
