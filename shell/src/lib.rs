//! The Moonkale shell's front end: Dioxus components over
//! `moonkale-client` alone (no service code), so the browser front door
//! (`moonkale-service web`, liveview) and a desktop shell render the same
//! components. [`App`] is the page; its root context holds a
//! [`feed::Shell`] (the page's own connection to the service).
//!
//! - `model`: what a page knows, as plain data, fed by the service.
//! - `feed`: loading, following notifications, carrying out clicks.
//! - `app`, `changes`: the components.
//! - `diff`, `keys`, `text`: pure helpers (a tool's change as diff lines,
//!   a key as the terminal's key name, session text made inert).

mod app;
mod changes;
pub mod diff;
pub mod feed;
pub mod keys;
pub mod model;
pub mod text;

pub use app::App;
pub use feed::Shell;

/// The name a page of the shell goes by in the service's editor list (the
/// header leaves these out: they are the shell's own pages).
pub const CLIENT_NAME: &str = "Moonkale shell";
