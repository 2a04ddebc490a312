//! The `workspace/executeCommand` commands the service offers editors, as
//! one closed enum, [`Command`], with each command's wire name written
//! once, here. The hub parses a command's name once, at its edge, and its
//! handlers match on variants; code actions and the `initialize` result's
//! `executeCommandProvider` list are built from the variants too, so what
//! is advertised, offered and handled cannot drift apart.
//!
//! A command's arguments stay LSP's positional `arguments` array; each
//! variant's documentation says what it takes (docs/protocol.md in full).
//!
//! **Invariant:** every command is a [`Command`] variant; its wire name
//! is written once, here (no command name is a string literal in the hub,
//! the service or the client outside tests; the hub's sources test checks
//! the hub).

use std::fmt;
use std::str::FromStr;

/// A `workspace/executeCommand` command of the service, in the order the
/// service advertises them (`executeCommandProvider.commands`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Command {
    /// `moonkale.selection`: the command Helix keymaps call to push their
    /// selection (editors.md §3b). Arguments `[path, line, column, first
    /// line, last line]`.
    Selection,
    /// `moonkale.sendToClaude`: sends the selection to Claude Code (also a
    /// code action). Arguments `[uri, range]`, `[uri]` or none.
    SendToClaude,
    /// `moonkale.acceptProposal`: accepts a proposal. Arguments
    /// `[proposal]` (its document, its target or its tab name) or none (the
    /// newest).
    AcceptProposal,
    /// `moonkale.rejectProposal`: rejects a proposal. Arguments as
    /// [`Command::AcceptProposal`], with an optional reason second.
    RejectProposal,
    /// `moonkale.revertHunk`: puts one hunk's original lines back into the
    /// proposal. Arguments `[proposal document, hunk index]`.
    RevertHunk,
    /// `moonkale.keepHunk`: keeps one hunk of a proposal (its diagnostic
    /// goes; once every hunk is kept the proposal is accepted). Arguments
    /// `[proposal document, hunk index]`.
    KeepHunk,
    /// `moonkale.undoChange`: undoes Claude's change. Arguments
    /// `[UndoParams]` ([`crate::changes::UndoParams`]).
    UndoChange,
    /// `moonkale.keepChange`: keeps (dismisses) Claude's change. Arguments
    /// `[KeepParams]` ([`crate::changes::KeepParams`]).
    KeepChange,
    /// `moonkale.openChanges`: opens the files of a change set (the newest
    /// pending one without arguments; else `[set id]`) with
    /// `window/showDocument`.
    OpenChanges,
    /// `moonkale.answerApproval`: answers a waiting approval. Arguments
    /// `[{"approval", "allow", "always"?, "mode"?, "question"?, "choice"?,
    /// "answers"?, "message"?}]`.
    AnswerApproval,
    /// `moonkale.startClaude`: starts Claude Code in a terminal (also a
    /// code action). Arguments `[args?, sandbox?]`.
    StartClaude,
    /// `moonkale.trustWorkspace`: the user's trust decision. Arguments
    /// `[{"trusted": bool}?]`.
    TrustWorkspace,
}

impl Command {
    /// Every command, in the order the service advertises them.
    pub const ALL: [Command; 12] = [
        Command::Selection,
        Command::SendToClaude,
        Command::AcceptProposal,
        Command::RejectProposal,
        Command::RevertHunk,
        Command::KeepHunk,
        Command::UndoChange,
        Command::KeepChange,
        Command::OpenChanges,
        Command::AnswerApproval,
        Command::StartClaude,
        Command::TrustWorkspace,
    ];

    /// The command's name on the wire.
    pub const fn name(self) -> &'static str {
        match self {
            Command::Selection => "moonkale.selection",
            Command::SendToClaude => "moonkale.sendToClaude",
            Command::AcceptProposal => "moonkale.acceptProposal",
            Command::RejectProposal => "moonkale.rejectProposal",
            Command::RevertHunk => "moonkale.revertHunk",
            Command::KeepHunk => "moonkale.keepHunk",
            Command::UndoChange => "moonkale.undoChange",
            Command::KeepChange => "moonkale.keepChange",
            Command::OpenChanges => "moonkale.openChanges",
            Command::AnswerApproval => "moonkale.answerApproval",
            Command::StartClaude => "moonkale.startClaude",
            Command::TrustWorkspace => "moonkale.trustWorkspace",
        }
    }

    /// The command of a wire name, if it is one.
    pub fn parse(name: &str) -> Option<Command> {
        Command::ALL.into_iter().find(|c| c.name() == name)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no command of ours.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownCommand(pub String);

impl fmt::Display for UnknownCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown command {}", self.0)
    }
}

impl std::error::Error for UnknownCommand {}

impl FromStr for Command {
    type Err = UnknownCommand;

    fn from_str(name: &str) -> Result<Command, UnknownCommand> {
        Command::parse(name).ok_or_else(|| UnknownCommand(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for command in Command::ALL {
            assert_eq!(Command::parse(command.name()), Some(command));
            assert_eq!(command.name().parse(), Ok(command));
            assert_eq!(command.to_string(), command.name());
            assert!(command.name().starts_with("moonkale."), "{command}");
        }
    }

    #[test]
    fn names_are_unique_and_all_lists_every_command_once() {
        let names: std::collections::BTreeSet<&str> =
            Command::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names.len(), Command::ALL.len(), "a name is used twice");
        let variants: std::collections::HashSet<Command> = Command::ALL.into_iter().collect();
        assert_eq!(
            variants.len(),
            Command::ALL.len(),
            "a command is listed twice"
        );
    }

    #[test]
    fn an_unknown_name_is_none() {
        for name in [
            "",
            "moonkale.",
            "moonkale.nope",
            "moonkale.acceptproposal",
            "moonkale/acceptProposal",
            " moonkale.acceptProposal",
            "acceptProposal",
        ] {
            assert_eq!(Command::parse(name), None, "{name:?}");
            assert_eq!(
                name.parse::<Command>(),
                Err(UnknownCommand(name.to_owned()))
            );
        }
    }

    /// The names on the wire, exactly as editors and plugins send them.
    #[test]
    fn the_wire_names() {
        let names: Vec<&str> = Command::ALL.iter().map(|c| c.name()).collect();
        expect_test::expect![[r#"
            [
                "moonkale.selection",
                "moonkale.sendToClaude",
                "moonkale.acceptProposal",
                "moonkale.rejectProposal",
                "moonkale.revertHunk",
                "moonkale.keepHunk",
                "moonkale.undoChange",
                "moonkale.keepChange",
                "moonkale.openChanges",
                "moonkale.answerApproval",
                "moonkale.startClaude",
                "moonkale.trustWorkspace",
            ]
        "#]]
        .assert_debug_eq(&names);
    }
}
