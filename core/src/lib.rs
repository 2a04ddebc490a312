//! The pure core: text, positions and the editor-facing data model, under
//! the hub (which re-exports it as `moonkale_hub::core`).
//!
//! **Invariant:** nothing in this crate does IO, reads the clock, spawns or
//! locks; its manifest has no async runtime or IO crate (a test in
//! `protocol/src/lib.rs` keeps it so). Everything here is plain data and
//! functions, tested with plain `#[test]`s and property tests.

pub mod changes;
pub mod confine;
pub mod diff;
pub mod document;
pub mod pacing;
pub mod path_map;
pub mod position;
pub mod preview;
pub mod uri;

pub use changes::PendingFile;
pub use document::{ChangeError, Document, MAX_DOCUMENT_BYTES, SyncState, TextChange};
pub use position::{CharIdx, LineCol, PositionEncoding, WirePosition};
