//! The agent host: what the service keeps for the agent sessions it runs.
//!
//! - [`transcript`]: the crash-safe JSONL store of one session's records,
//!   `<workspace>/.moonkale/chats/<id>.jsonl`.

pub mod transcript;
