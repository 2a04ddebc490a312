//! Which permission questions of the CLI the service answers itself and
//! which go to the user. Pure: no IO, no state but what is passed in.
//!
//! On top of the CLI's own rules (its permission mode decides what it asks
//! at all): reads and our own editor tools are allowed, file writes ask
//! unless the user said "always" for that tool in this session, and
//! destructive shell commands ask every time, "always" or not.

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

/// Tools that only read the workspace (or only talk to the user's editor).
const READ_TOOLS: &[&str] = &[
    "Read",
    "Glob",
    "Grep",
    "LS",
    "NotebookRead",
    "TodoWrite",
    "BashOutput",
];

/// Prefix of the tools of our in-process MCP server (`mcp__moonkale__…`).
pub const EDITOR_TOOL_PREFIX: &str = "mcp__moonkale__";

/// The tool with which the model asks to leave plan mode: the user's
/// approval of the plan.
pub const EXIT_PLAN_TOOL: &str = "ExitPlanMode";

/// The tool with which the model asks the user a multiple-choice question.
pub const ASK_USER_TOOL: &str = "AskUserQuestion";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed without asking.
    Allow,
    /// Ask the user. `destructive`: "always" does not apply.
    Ask { destructive: bool },
    /// Refused without asking (plan mode is read-only).
    Deny,
}

/// Decides a `can_use_tool` question. `plan`: the session is in plan mode,
/// where nothing but reads runs (the CLI still asks about writes there).
/// `always` holds the tools the user allowed for the rest of the session.
pub fn judge(tool: &str, input: &Value, plan: bool, always: &HashSet<String>) -> Verdict {
    if READ_TOOLS.contains(&tool) || tool.starts_with(EDITOR_TOOL_PREFIX) {
        return Verdict::Allow;
    }
    // Both are questions to the user, in any mode: only the user can answer
    // them, so "always" never does.
    if tool == EXIT_PLAN_TOOL || tool == ASK_USER_TOOL {
        return Verdict::Ask { destructive: false };
    }
    if plan {
        return Verdict::Deny;
    }
    let destructive = tool == "Bash"
        && input
            .get("command")
            .and_then(Value::as_str)
            .is_none_or(is_destructive_command);
    if !destructive && always.contains(tool) {
        return Verdict::Allow;
    }
    Verdict::Ask { destructive }
}

/// One line for the user: the tool and what it acts on, paths relative to
/// the workspace.
pub fn title(tool: &str, input: &Value, workspace: &Path) -> String {
    let field = |k: &str| input.get(k).and_then(Value::as_str);
    let what = if let Some(path) = field("file_path").or(field("notebook_path")) {
        Path::new(path)
            .strip_prefix(workspace)
            .map_or_else(|_| path.to_owned(), |p| p.display().to_string())
    } else if let Some(command) = field("command") {
        command.to_owned()
    } else if let Some(url) = field("url").or(field("query")).or(field("pattern")) {
        url.to_owned()
    } else {
        String::new()
    };
    let mut title = if what.is_empty() {
        tool.to_owned()
    } else {
        format!("{tool} {what}")
    };
    // One line, and short enough for a message box.
    title = title.replace(['\n', '\r'], " ");
    if title.chars().count() > 200 {
        title = title.chars().take(199).collect::<String>() + "…";
    }
    title
}

/// Whether a shell command may destroy work: deleting, overwriting whole
/// devices or history, or running as another user. Errs on the side of
/// asking: every simple command of a pipeline or list is looked at.
pub fn is_destructive_command(command: &str) -> bool {
    let separators = |c: char| matches!(c, ';' | '|' | '&' | '(' | ')' | '\n' | '`' | '{' | '}');
    command.split(separators).any(|simple| {
        let words: Vec<&str> = simple
            .split_whitespace()
            .skip_while(|w| w.contains('=') && !w.starts_with('-')) // VAR=value prefixes
            .collect();
        let Some((&program, args)) = words.split_first() else {
            return false;
        };
        let program = program.rsplit('/').next().unwrap_or(program);
        let has = |flag: &str| args.contains(&flag);
        let has_short = |letter: char| {
            args.iter()
                .any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains(letter))
        };
        match program {
            "rm" | "rmdir" | "shred" | "dd" | "truncate" | "sudo" | "su" | "doas" | "wipefs"
            | "fdisk" | "parted" => true,
            p if p.starts_with("mkfs") => true,
            "chmod" | "chown" | "chgrp" => has_short('R') || has("--recursive"),
            "find" => has("-delete") || has("-exec") || has("-execdir"),
            "xargs" => true,
            "mv" => true,
            "git" => match args.first().copied() {
                Some("push") => {
                    has("--force")
                        || has("--force-with-lease")
                        || has("--delete")
                        || has_short('f')
                        || has_short('d')
                        || args.iter().skip(1).any(|a| a.starts_with('+'))
                }
                Some("reset") => has("--hard"),
                Some("clean") => true,
                Some("checkout") | Some("restore") => {
                    has("--") || has(".") || has("--force") || has_short('f')
                }
                Some("branch") => has_short('D') || has("--delete") || has_short('d'),
                Some("stash") => matches!(args.get(1).copied(), Some("drop") | Some("clear")),
                Some("rebase") | Some("filter-branch") | Some("filter-repo") => true,
                _ => false,
            },
            _ => false,
        }
    }) || command.contains("> /dev/")
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::{Expect, expect};
    use serde_json::json;

    fn check(cases: &[(&str, Value)], plan: bool, always: &[&str], expect: Expect) {
        let always: HashSet<String> = always.iter().map(|s| s.to_string()).collect();
        let got: Vec<String> = cases
            .iter()
            .map(|(tool, input)| {
                format!("{tool} {input} -> {:?}", judge(tool, input, plan, &always))
            })
            .collect();
        expect.assert_eq(&got.join("\n"));
    }

    #[test]
    fn reads_pass_writes_ask() {
        check(
            &[
                ("Read", json!({"file_path": "/w/a"})),
                ("Grep", json!({"pattern": "x"})),
                ("mcp__moonkale__readBuffer", json!({"filePath": "/w/a"})),
                ("Write", json!({"file_path": "/w/a"})),
                ("Edit", json!({"file_path": "/w/a"})),
                ("Bash", json!({"command": "cargo test"})),
                ("Bash", json!({"command": "rm -rf target"})),
                ("Bash", json!({})),
                ("WebFetch", json!({"url": "https://example.com"})),
            ],
            false,
            &[],
            expect![[r#"
                Read {"file_path":"/w/a"} -> Allow
                Grep {"pattern":"x"} -> Allow
                mcp__moonkale__readBuffer {"filePath":"/w/a"} -> Allow
                Write {"file_path":"/w/a"} -> Ask { destructive: false }
                Edit {"file_path":"/w/a"} -> Ask { destructive: false }
                Bash {"command":"cargo test"} -> Ask { destructive: false }
                Bash {"command":"rm -rf target"} -> Ask { destructive: true }
                Bash {} -> Ask { destructive: true }
                WebFetch {"url":"https://example.com"} -> Ask { destructive: false }"#]],
        );
    }

    #[test]
    fn always_never_covers_destruction() {
        check(
            &[
                ("Write", json!({"file_path": "/w/a"})),
                ("Bash", json!({"command": "ls -la"})),
                ("Bash", json!({"command": "ls && rm x"})),
                ("Bash", json!({"command": "git push --force origin main"})),
            ],
            false,
            &["Write", "Bash"],
            expect![[r#"
                Write {"file_path":"/w/a"} -> Allow
                Bash {"command":"ls -la"} -> Allow
                Bash {"command":"ls && rm x"} -> Ask { destructive: true }
                Bash {"command":"git push --force origin main"} -> Ask { destructive: true }"#]],
        );
    }

    #[test]
    fn plan_mode_runs_reads_only() {
        check(
            &[
                ("Read", json!({"file_path": "/w/a"})),
                ("mcp__moonkale__getDiagnostics", json!({})),
                ("Write", json!({"file_path": "/w/a"})),
                ("Bash", json!({"command": "ls"})),
                ("ExitPlanMode", json!({"plan": "1. do it"})),
                ("AskUserQuestion", json!({"questions": []})),
            ],
            true,
            &["Write", "Bash"],
            expect![[r#"
                Read {"file_path":"/w/a"} -> Allow
                mcp__moonkale__getDiagnostics {} -> Allow
                Write {"file_path":"/w/a"} -> Deny
                Bash {"command":"ls"} -> Deny
                ExitPlanMode {"plan":"1. do it"} -> Ask { destructive: false }
                AskUserQuestion {"questions":[]} -> Ask { destructive: false }"#]],
        );
    }

    /// Questions only the user can answer are asked in every mode, and an
    /// "always" (even one planted by a bug) never answers them.
    #[test]
    fn questions_for_the_user_are_always_asked() {
        check(
            &[
                ("ExitPlanMode", json!({"plan": "1. do it"})),
                ("AskUserQuestion", json!({"questions": []})),
            ],
            false,
            &["ExitPlanMode", "AskUserQuestion"],
            expect![[r#"
                ExitPlanMode {"plan":"1. do it"} -> Ask { destructive: false }
                AskUserQuestion {"questions":[]} -> Ask { destructive: false }"#]],
        );
    }

    #[test]
    fn destructive_commands() {
        let got: Vec<String> = [
            "rm a",
            "/bin/rm -f a",
            "FOO=1 rm a",
            "echo hi | sudo tee /etc/x",
            "mkfs.ext4 /dev/sda1",
            "dd if=/dev/zero of=x",
            "chmod -R 777 .",
            "chmod 644 a",
            "find . -name '*.o' -delete",
            "git push -f",
            "git push origin +main",
            "git push origin main",
            "git reset --hard HEAD~1",
            "git reset HEAD a",
            "git clean -fdx",
            "git checkout -- .",
            "git checkout main",
            "git branch -D old",
            "git stash drop",
            "git status",
            "cat a > /dev/sda",
            "cargo build && (cd x; rm -r y)",
            "ls",
            "",
        ]
        .iter()
        .map(|c| format!("{c:?}: {}", is_destructive_command(c)))
        .collect();
        expect![[r#"
            "rm a": true
            "/bin/rm -f a": true
            "FOO=1 rm a": true
            "echo hi | sudo tee /etc/x": true
            "mkfs.ext4 /dev/sda1": true
            "dd if=/dev/zero of=x": true
            "chmod -R 777 .": true
            "chmod 644 a": false
            "find . -name '*.o' -delete": true
            "git push -f": true
            "git push origin +main": true
            "git push origin main": false
            "git reset --hard HEAD~1": true
            "git reset HEAD a": false
            "git clean -fdx": true
            "git checkout -- .": true
            "git checkout main": false
            "git branch -D old": true
            "git stash drop": true
            "git status": false
            "cat a > /dev/sda": true
            "cargo build && (cd x; rm -r y)": true
            "ls": false
            "": false"#]]
        .assert_eq(&got.join("\n"));
    }

    #[test]
    fn titles() {
        let ws = Path::new("/w");
        let got = [
            title("Write", &json!({"file_path": "/w/src/a.rs"}), ws),
            title("Write", &json!({"file_path": "/elsewhere/a.rs"}), ws),
            title("Bash", &json!({"command": "ls\nrm -rf /"}), ws),
            title("Task", &json!({}), ws),
        ];
        expect![[r#"
            [
                "Write src/a.rs",
                "Write /elsewhere/a.rs",
                "Bash ls rm -rf /",
                "Task",
            ]
        "#]]
        .assert_debug_eq(&got);
    }
}
