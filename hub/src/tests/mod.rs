//! The hub's specification: scripts of events run against a [`Workspace`]
//! with no IO, each checked against a transcript of everything the hub said
//! (see [`harness`]). A change in behaviour shows as a diff of a transcript;
//! `UPDATE_EXPECT=1 cargo test -p moonkale-hub` rewrites them after a
//! deliberate change.
//!
//! [`Workspace`]: crate::workspace::Workspace

mod harness;

mod approvals;
mod documents;
mod ide_tools;
mod proposals;
mod review;
mod selections;
mod sources;
mod topics;
