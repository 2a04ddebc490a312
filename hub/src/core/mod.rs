//! The pure core: text, positions and the editor-facing data model.
//!
//! **Invariant:** nothing under `core` does IO, reads the clock, spawns or
//! locks. Everything here is plain data and functions, tested with plain
//! `#[test]`s and property tests.

pub mod changes;
pub mod confine;
pub mod diff;
pub mod document;
pub mod pacing;
pub mod position;
pub mod uri;

pub use document::{ChangeError, Document, MAX_DOCUMENT_BYTES, SyncState, TextChange};
pub use position::{CharIdx, LineCol, PositionEncoding, WirePosition};
