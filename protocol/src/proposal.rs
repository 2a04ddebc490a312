//! Claude Code's proposed edits (`openDiff`), as editors and front ends
//! decide them. Their `workspace/executeCommand` commands are
//! [`Command::AcceptProposal`](crate::Command::AcceptProposal),
//! `RejectProposal`, `KeepHunk` and `RevertHunk`.

use lsp_types::Url;
use serde::{Deserialize, Serialize};

use crate::changes::LineRange;
use crate::{NoParams, notification, request};

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
    /// The file Claude Code wanted to change.
    pub target: Url,
    /// Accepted, to an editor with a proposal view of its own
    /// (`moonkaleProposals`): the text Claude Code is told to write to
    /// `target`, so the plugin knows its buffer of it may be reloaded once
    /// the file holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

request!(
    /// The pending proposals with their hunks, for plugins that show their
    /// own diff view.
    List,
    "moonkale/proposals",
    NoParams => ListResult
);

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListResult {
    pub proposals: Vec<ProposalInfo>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProposalInfo {
    pub tab_name: String,
    /// The file Claude Code wants to change.
    pub target: Url,
    /// The document holding the proposal (editable; the answer is its text).
    pub document: Url,
    /// The target's text before the change, for the left side of a diff.
    pub original: String,
    /// Between `original` and the proposal document as it is now.
    pub hunks: Vec<ProposalHunk>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProposalHunk {
    pub index: usize,
    /// Lines of `original`.
    pub original: LineRange,
    /// Lines of the proposal document.
    pub proposed: LineRange,
    /// The original lines it replaces.
    pub removed: String,
    pub added: String,
    /// The user kept it already.
    pub kept: bool,
}
