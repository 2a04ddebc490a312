//! Claude's own records of the files it changed: the `tool_use_result` of
//! Edit, MultiEdit and Write (on the stream-json `user` messages of a
//! hosted session, and as `toolUseResult` in the CLI's transcript), turned
//! into the text before and after.
//!
//! Edit and MultiEdit record `originalFile` and a `structuredPatch` (the
//! hunks of jsdiff's `structuredPatch`: 1-based starts, lines prefixed with
//! ` `, `-`, `+`, and `\` for "no newline at end of file"); the text after
//! is the patch applied to the original. Write records the new `content`.
//! A patch whose context does not match its original is refused, never
//! half-applied: a record is the CLI's word, not ours to repair. For a
//! large file the CLI leaves the patch out (`contentNotInModelContext`):
//! then the edit the record names (old and new string, replace all) is
//! made on `originalFile`, as the CLI made it; without `originalFile` (the
//! transcript's copy) the record is refused.

use std::path::PathBuf;

use serde_json::Value;

use crate::{Error, Result};

/// One file Claude changed, as its record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileEdit {
    /// As the CLI wrote it (absolute); not yet confined to anything.
    pub path: PathBuf,
    /// `None`: the file did not exist.
    pub before: Option<String>,
    pub after: String,
}

/// The edit a tool result records: `None` when it is not an edit's result
/// (a Read, a Bash, a denial's text), `Some(Err)` when it claims to be one
/// but does not add up.
pub fn edit_from_tool_result(result: &Value) -> Option<Result<FileEdit>> {
    let path = result.get("filePath")?.as_str()?;
    let original = match result.get("originalFile") {
        Some(Value::String(s)) => Some(s.as_str()),
        Some(Value::Null) | None => None,
        Some(_) => return Some(Err(bad("originalFile is not a string"))),
    };
    let write = matches!(result["type"].as_str(), Some("create" | "update"));
    let after = if write {
        let Some(content) = result["content"].as_str() else {
            return Some(Err(bad("a Write result without content")));
        };
        Ok(content.to_owned())
    } else {
        let hunks = result.get("structuredPatch")?.as_array()?;
        match (original, edit_strings(result)) {
            // A large file's record carries no patch
            // (`contentNotInModelContext`): the edit it names says what
            // changed.
            (Some(original), Some(edits)) if hunks.is_empty() => apply_edits(original, &edits),
            // Nor, in a transcript, the file: nothing to go by.
            (None, Some(_)) if hunks.is_empty() => Err(bad(
                "the record leaves out both the file and the patch (a large file)",
            )),
            _ => apply_structured_patch(original.unwrap_or_default(), hunks),
        }
    };
    Some(after.map(|after| FileEdit {
        path: PathBuf::from(path),
        before: original.map(str::to_owned),
        after,
    }))
}

/// One replacement an Edit or MultiEdit record names.
struct Replace<'a> {
    old: &'a str,
    new: &'a str,
    all: bool,
}

/// The replacements an Edit (`oldString`, `newString`, `replaceAll`) or a
/// MultiEdit (`edits`: `old_string`, `new_string`, `replace_all`) record
/// names; `None` if it names none.
fn edit_strings(result: &Value) -> Option<Vec<Replace<'_>>> {
    fn one<'a>(v: &'a Value, old: &str, new: &str, all: &str) -> Option<Replace<'a>> {
        Some(Replace {
            old: v.get(old)?.as_str()?,
            new: v.get(new)?.as_str()?,
            all: v.get(all).and_then(Value::as_bool).unwrap_or(false),
        })
    }
    if let Some(edit) = one(result, "oldString", "newString", "replaceAll") {
        return Some(vec![edit]);
    }
    result
        .get("edits")?
        .as_array()?
        .iter()
        .map(|e| one(e, "old_string", "new_string", "replace_all"))
        .collect()
}

/// `original` with `edits` made in order, as the CLI makes them; an edit
/// whose text is not there is refused.
fn apply_edits(original: &str, edits: &[Replace<'_>]) -> Result<String> {
    let mut text = original.to_owned();
    for e in edits {
        if e.old.is_empty() || !text.contains(e.old) {
            return Err(bad("an edit's old text is not in the file"));
        }
        text = if e.all {
            text.replace(e.old, e.new)
        } else {
            text.replacen(e.old, e.new, 1)
        };
    }
    Ok(text)
}

fn bad(why: impl Into<String>) -> Error {
    Error::BadEditRecord(why.into())
}

/// `original` with `hunks` applied, in order. Each hunk's `-` and ` ` lines
/// must match the original where the hunk says it starts.
pub fn apply_structured_patch(original: &str, hunks: &[Value]) -> Result<String> {
    let eol = if original.contains("\r\n") {
        "\r\n"
    } else {
        "\n"
    };
    let old: Vec<&str> = original.split_inclusive('\n').collect();
    let ends_unterminated = !original.is_empty() && !original.ends_with('\n');
    let mut out = String::with_capacity(original.len());
    // Index of the next original line not yet copied.
    let mut next = 0usize;
    // How many more lines the new text has than the old, so far.
    let mut delta: i64 = 0;
    for (n, hunk) in hunks.iter().enumerate() {
        let field = |key: &str| {
            hunk[key]
                .as_u64()
                .ok_or_else(|| bad(format!("hunk {n}: {key} is not a number")))
        };
        let (old_start, old_lines, new_start) =
            (field("oldStart")?, field("oldLines")?, field("newStart")?);
        let Some(lines) = hunk["lines"].as_array() else {
            return Err(bad(format!("hunk {n}: lines is not a list")));
        };
        // Where the hunk starts in the original, 0-based. A hunk that
        // removes nothing has no old line to name, so its place follows
        // from its new start.
        let start = if old_lines > 0 {
            old_start.saturating_sub(1) as i64
        } else {
            new_start.saturating_sub(1) as i64 - delta
        };
        let start = usize::try_from(start)
            .ok()
            .filter(|s| *s >= next && *s <= old.len())
            .ok_or_else(|| bad(format!("hunk {n} starts outside the file or overlaps")))?;
        old[next..start].iter().for_each(|l| out.push_str(l));
        next = start;
        let mut added = 0i64;
        let mut removed = 0i64;
        let mut last_new_line: Option<usize> = None;
        for (i, line) in lines.iter().enumerate() {
            let Some(line) = line.as_str() else {
                return Err(bad(format!("hunk {n}: a line is not a string")));
            };
            let (mark, text) = line.split_at(line.chars().next().map_or(0, char::len_utf8));
            let unterminated = lines
                .get(i + 1)
                .and_then(Value::as_str)
                .is_some_and(|l| l.starts_with('\\'));
            match mark {
                " " | "-" => {
                    let Some(have) = old.get(next) else {
                        return Err(bad(format!("hunk {n} runs past the end of the file")));
                    };
                    if strip_eol(have) != strip_eol(text) {
                        return Err(bad(format!(
                            "hunk {n}: line {} of the original does not match",
                            next + 1
                        )));
                    }
                    if mark == " " {
                        out.push_str(have);
                        last_new_line = Some(out.len());
                    } else {
                        removed += 1;
                    }
                    next += 1;
                }
                "+" => {
                    out.push_str(strip_eol(text));
                    if !unterminated {
                        out.push_str(eol);
                    }
                    last_new_line = Some(out.len());
                    added += 1;
                }
                "\\" => {}
                _ => return Err(bad(format!("hunk {n}: a line without a mark"))),
            }
        }
        // A patch without `\` marks that replaced the original's last,
        // unterminated line leaves the new last line unterminated too.
        let has_marks = lines
            .iter()
            .any(|l| l.as_str().is_some_and(|l| l.starts_with('\\')));
        if !has_marks
            && ends_unterminated
            && next == old.len()
            && last_new_line == Some(out.len())
            && added > 0
            && out.ends_with(eol)
        {
            out.truncate(out.len() - eol.len());
        }
        delta += added - removed;
    }
    old[next..].iter().for_each(|l| out.push_str(l));
    Ok(out)
}

fn strip_eol(line: &str) -> &str {
    let line = line.strip_suffix('\n').unwrap_or(line);
    line.strip_suffix('\r').unwrap_or(line)
}

/// What one line of the CLI's transcript means for change sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TranscriptEntry {
    /// The user prompted: a new turn. `turn` is the prompt's `promptId`
    /// (or its `uuid`).
    Prompt {
        session: String,
        turn: String,
        text: String,
    },
    /// A tool changed a file.
    Edit { session: String, edit: FileEdit },
    /// An edit record that did not add up (the reason).
    BadEdit { session: String, why: String },
    /// Claude's answer ended its turn (`stop_reason: end_turn`).
    TurnEnded { session: String },
    /// Anything else.
    Other,
}

/// Reads one transcript line. Prompts are `user` messages whose content is
/// a string (tool results are lists), outside side chains and not the
/// CLI's own meta messages; edits are `user` lines with `toolUseResult`;
/// a main-chain `assistant` message that stopped with `end_turn` ends the
/// turn.
pub fn parse_transcript_line(line: &str) -> TranscriptEntry {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return TranscriptEntry::Other;
    };
    let Some(session) = v["sessionId"].as_str().map(str::to_owned) else {
        return TranscriptEntry::Other;
    };
    if v["type"] == "assistant"
        && v["isSidechain"] != true
        && v["message"]["stop_reason"] == "end_turn"
    {
        return TranscriptEntry::TurnEnded { session };
    }
    if v["type"] != "user" {
        return TranscriptEntry::Other;
    }
    if let Some(result) = v.get("toolUseResult") {
        return match edit_from_tool_result(result) {
            Some(Ok(edit)) => TranscriptEntry::Edit { session, edit },
            Some(Err(e)) => TranscriptEntry::BadEdit {
                session,
                why: e.to_string(),
            },
            None => TranscriptEntry::Other,
        };
    }
    let meta = v["isMeta"] == true || v["isSidechain"] == true || v["isCompactSummary"] == true;
    match (v["message"]["content"].as_str(), meta) {
        (Some(text), false) => {
            let turn = v["promptId"].as_str().or(v["uuid"].as_str());
            match turn {
                Some(turn) => TranscriptEntry::Prompt {
                    session,
                    turn: turn.to_owned(),
                    text: text.to_owned(),
                },
                None => TranscriptEntry::Other,
            }
        }
        _ => TranscriptEntry::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};
    use serde_json::json;

    fn check(original: &str, hunks: Value, expect: Expect) {
        let got = match apply_structured_patch(original, hunks.as_array().unwrap()) {
            Ok(text) => format!("{text:?}"),
            Err(e) => format!("error: {e}"),
        };
        expect.assert_eq(&got);
    }

    fn hunk(
        old_start: u64,
        old_lines: u64,
        new_start: u64,
        new_lines: u64,
        lines: &[&str],
    ) -> Value {
        json!({"oldStart": old_start, "oldLines": old_lines, "newStart": new_start,
               "newLines": new_lines, "lines": lines})
    }

    #[test]
    fn patches_apply_like_the_cli_wrote_them() {
        // The recorded Edit (b-edit-acceptEdits).
        check(
            "hello world\nsecond line\n",
            json!([hunk(
                1,
                2,
                1,
                2,
                &["-hello world", "+hello EDITED", " second line"]
            )]),
            expect![[r#""hello EDITED\nsecond line\n""#]],
        );
        // Two hunks (MultiEdit, or two places of one Edit with replaceAll).
        let text: String = (1..=12).map(|i| format!("l{i}\n")).collect();
        check(
            &text,
            json!([
                hunk(1, 2, 1, 3, &["-l1", "+one", "+uno", " l2"]),
                hunk(10, 3, 11, 2, &[" l10", "-l11", " l12"]),
            ]),
            expect![[r#""one\nuno\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\nl12\n""#]],
        );
        // Into an empty file, and a pure insertion with no context.
        check(
            "",
            json!([hunk(1, 0, 1, 1, &["+new"])]),
            expect![[r#""new\n""#]],
        );
        check(
            "a\nb\n",
            json!([hunk(1, 0, 2, 1, &["+between"])]),
            expect![[r#""a\nbetween\nb\n""#]],
        );
        // No newline at the end: with jsdiff's marks, and without them.
        check(
            "a\nb",
            json!([hunk(
                2,
                1,
                2,
                1,
                &[
                    "-b",
                    "\\ No newline at end of file",
                    "+c",
                    "\\ No newline at end of file"
                ]
            )]),
            expect![[r#""a\nc""#]],
        );
        check(
            "a\nb",
            json!([hunk(1, 2, 1, 2, &[" a", "-b", "+c"])]),
            expect![[r#""a\nc""#]],
        );
        // CRLF files keep their line ends.
        check(
            "a\r\nb\r\n",
            json!([hunk(1, 2, 1, 2, &["-a", "+x", " b"])]),
            expect![[r#""x\r\nb\r\n""#]],
        );
        // Nothing to do.
        check("same\n", json!([]), expect![[r#""same\n""#]]);
    }

    #[test]
    fn patches_that_do_not_match_are_refused() {
        check(
            "hello world\n",
            json!([hunk(1, 1, 1, 1, &["-goodbye", "+x"])]),
            expect![[
                r#"error: Claude's edit record does not add up: hunk 0: line 1 of the original does not match"#
            ]],
        );
        check(
            "a\n",
            json!([hunk(5, 1, 5, 1, &["-a", "+x"])]),
            expect![[
                r#"error: Claude's edit record does not add up: hunk 0 starts outside the file or overlaps"#
            ]],
        );
        check(
            "a\n",
            json!([hunk(1, 2, 1, 2, &["-a", "-b"])]),
            expect![[
                r#"error: Claude's edit record does not add up: hunk 0 runs past the end of the file"#
            ]],
        );
        check(
            "a\nb\n",
            json!([hunk(2, 1, 2, 1, &["-b"]), hunk(1, 1, 1, 1, &["-a"])]),
            expect![[
                r#"error: Claude's edit record does not add up: hunk 1 starts outside the file or overlaps"#
            ]],
        );
        check(
            "a\n",
            json!([{"oldStart": "1"}]),
            expect![[
                r#"error: Claude's edit record does not add up: hunk 0: oldStart is not a number"#
            ]],
        );
        check(
            "a\n",
            json!([hunk(1, 1, 1, 1, &["?a"])]),
            expect![[
                r#"error: Claude's edit record does not add up: hunk 0: a line without a mark"#
            ]],
        );
    }

    #[test]
    fn recorded_tool_results() {
        let edit = json!({"filePath":"/srv/demo/ws/b-shared/hello.txt","oldString":"hello world",
            "newString":"hello EDITED","originalFile":"hello world\nsecond line\n",
            "structuredPatch":[{"oldStart":1,"oldLines":2,"newStart":1,"newLines":2,
            "lines":["-hello world","+hello EDITED"," second line"]}],"userModified":false,"replaceAll":false});
        let write = json!({"type":"create","filePath":"/srv/demo/ws/b-shared/new-acceptEdits.txt",
            "content":"written by fake\n","structuredPatch":[],"originalFile":null,"userModified":false});
        let update = json!({"type":"update","filePath":"/w/a","content":"new\n","structuredPatch":[],
            "originalFile":"old\n"});
        let read = json!({"type":"text","file":{"filePath":"/w/a","content":"x"}});
        // A large file: no patch, the file only on stdout (not in the
        // transcript).
        let large = json!({"filePath":"/w/big","oldString":"old_","newString":"new_","replaceAll":true,
            "originalFile":"old_a\nold_b\nkeep\n","structuredPatch":[],"contentNotInModelContext":true});
        let large_in_transcript = json!({"filePath":"/w/big","oldString":"old_","newString":"new_",
            "replaceAll":true,"originalFile":null,"structuredPatch":[],"contentNotInModelContext":true});
        let multi = json!({"filePath":"/w/m","originalFile":"a b a\n","structuredPatch":[],
            "edits":[{"old_string":"a","new_string":"A","replace_all":false},{"old_string":"b","new_string":"B"}]});
        let missing = json!({"filePath":"/w/m","originalFile":"abc\n","structuredPatch":[],
            "oldString":"zzz","newString":"y"});
        let got: Vec<String> = [
            edit,
            write,
            update,
            read,
            json!("denied"),
            json!({"filePath": "/w/a", "type": "create"}),
            large,
            large_in_transcript,
            multi,
            missing,
        ]
        .iter()
        .map(|r| {
            format!(
                "{:?}",
                edit_from_tool_result(r).map(|r| r.map_err(|e| e.to_string()))
            )
        })
        .collect();
        expect![[r#"
            Some(Ok(FileEdit { path: "/srv/demo/ws/b-shared/hello.txt", before: Some("hello world\nsecond line\n"), after: "hello EDITED\nsecond line\n" }))
            Some(Ok(FileEdit { path: "/srv/demo/ws/b-shared/new-acceptEdits.txt", before: None, after: "written by fake\n" }))
            Some(Ok(FileEdit { path: "/w/a", before: Some("old\n"), after: "new\n" }))
            None
            None
            Some(Err("Claude's edit record does not add up: a Write result without content"))
            Some(Ok(FileEdit { path: "/w/big", before: Some("old_a\nold_b\nkeep\n"), after: "new_a\nnew_b\nkeep\n" }))
            Some(Err("Claude's edit record does not add up: the record leaves out both the file and the patch (a large file)"))
            Some(Ok(FileEdit { path: "/w/m", before: Some("a b a\n"), after: "A B a\n" }))
            Some(Err("Claude's edit record does not add up: an edit's old text is not in the file"))"#]]
        .assert_eq(&got.join("\n"));
    }

    #[test]
    fn transcript_lines() {
        let lines = [
            r#"{"type":"queue-operation","operation":"enqueue","sessionId":"s","content":"hi"}"#,
            r#"{"parentUuid":null,"isSidechain":false,"promptId":"p1","type":"user","message":{"role":"user","content":"fix it"},"uuid":"u1","sessionId":"s"}"#,
            r#"{"type":"user","message":{"role":"user","content":"no prompt id"},"uuid":"u2","sessionId":"s"}"#,
            r#"{"type":"user","isMeta":true,"message":{"role":"user","content":"Caveat: …"},"uuid":"u3","sessionId":"s"}"#,
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","content":"ok"}]},"uuid":"u4","sessionId":"s","toolUseResult":{"type":"create","filePath":"/w/n","content":"n\n","structuredPatch":[],"originalFile":null}}"#,
            r#"{"type":"user","message":{"role":"user","content":[]},"sessionId":"s","toolUseResult":{"filePath":"/w/a","originalFile":"a\n","structuredPatch":[{"oldStart":1,"oldLines":1,"newStart":1,"newLines":1,"lines":["-b","+c"]}]}}"#,
            r#"{"type":"user","message":{"role":"user","content":[]},"sessionId":"s","toolUseResult":"Error: denied"}"#,
            r#"{"type":"assistant","message":{"content":"x"},"sessionId":"s"}"#,
            r#"{"type":"assistant","message":{"content":[],"stop_reason":"end_turn"},"sessionId":"s"}"#,
            r#"{"type":"assistant","isSidechain":true,"message":{"stop_reason":"end_turn"},"sessionId":"s"}"#,
            r#"not json"#,
        ];
        let got: Vec<String> = lines
            .iter()
            .map(|l| format!("{:?}", parse_transcript_line(l)))
            .collect();
        expect![[r#"
            Other
            Prompt { session: "s", turn: "p1", text: "fix it" }
            Prompt { session: "s", turn: "u2", text: "no prompt id" }
            Other
            Edit { session: "s", edit: FileEdit { path: "/w/n", before: None, after: "n\n" } }
            BadEdit { session: "s", why: "Claude's edit record does not add up: hunk 0: line 1 of the original does not match" }
            Other
            Other
            TurnEnded { session: "s" }
            Other
            Other"#]]
        .assert_eq(&got.join("\n"));
    }
}
