//! Claude Code's proposed edits (`openDiff`), as editors and front ends
//! decide them.

use lsp_types::Url;
use serde::{Deserialize, Serialize};

use crate::notification;

/// `workspace/executeCommand` that accepts a proposal: `[proposal]` (its
/// document, its target or its tab name) or none (the newest).
pub const ACCEPT_COMMAND: &str = "moonkale.acceptProposal";
/// Rejects a proposal; arguments as [`ACCEPT_COMMAND`].
pub const REJECT_COMMAND: &str = "moonkale.rejectProposal";

notification!(
    /// A proposal was answered: a plugin may close the view it opened
    /// (service → every editor it was shown in).
    ProposalClosed,
    "moonkale/proposalClosed",
    ProposalClosedParams
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProposalClosedParams {
    /// The proposal document.
    pub uri: Url,
    pub accepted: bool,
}
