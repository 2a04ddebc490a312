//! Claude Code's permission modes, as the CLI, the front door and the
//! transcripts spell them.

use serde::{Deserialize, Serialize};

/// How much the CLI may do without asking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PermissionMode {
    /// Ask for anything that is not a read.
    Default,
    /// Edits without asking; other tools ask.
    AcceptEdits,
    /// Read only: the service's default.
    Plan,
    /// Everything without asking: only on the user's explicit say-so.
    BypassPermissions,
}

impl PermissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Default => "default",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::Plan => "plan",
            PermissionMode::BypassPermissions => "bypassPermissions",
        }
    }

    pub fn parse(s: &str) -> Option<PermissionMode> {
        [
            PermissionMode::Default,
            PermissionMode::AcceptEdits,
            PermissionMode::Plan,
            PermissionMode::BypassPermissions,
        ]
        .into_iter()
        .find(|m| m.as_str() == s)
    }
}
