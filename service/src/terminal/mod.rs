//! Terminals owned by the service.
//!
//! - [`pty`]: one program in a pseudo-terminal (spawn by argv, bounded
//!   output, SIGHUP then SIGKILL).
//! - [`screen`]: the VT screen model (vt100) rendered as rows of styled
//!   spans, with incremental updates.
//! - [`keys`]: key names to the bytes a terminal sends.
//! - [`host`]: the terminals of a workspace and the `moonkale/terminal/*`
//!   front door; "Start Claude Code here".
//! - `session`: one terminal's task (its PTY and screen).
pub mod host;
pub mod keys;
pub mod pty;
pub mod screen;
mod session;

pub use session::{TerminalInfo, find_links};
