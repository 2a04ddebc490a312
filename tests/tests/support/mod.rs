//! Support code for the end-to-end tests with the real `claude` CLI: the
//! fake Anthropic API, the CLI under a pty, and the world of a test.

pub mod claude_cli;
pub mod fakeapi;
pub mod world;
