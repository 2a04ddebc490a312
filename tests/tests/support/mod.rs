//! Support code for the end-to-end tests with the real `claude` CLI: the
//! fake Anthropic API and the CLI under a pty.

pub mod claude_cli;
pub mod fakeapi;
