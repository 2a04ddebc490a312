//! Support code for the end-to-end tests with the real `claude` CLI: the
//! fake Anthropic API, the CLI under a pty, the world of a test, and the
//! world of an agent test (the service running the CLI headless).

pub mod agent;
pub mod claude_cli;
pub mod fakeapi;
pub mod world;
