//! The runtime directory, as the service uses it: everything of it lives in
//! `moonkale_wire::runtime` (shared with the shim and the client, so every
//! process finds a service, and judges it alive, the same way); the service
//! adds the pace of its self-check and its secrets.

pub use moonkale_wire::runtime::*;

use crate::error::{Error, Result};

/// How often a service checks that its published files (and its Claude
/// Code lock file) are still in place: 2 s, `MOONKALE_SELF_CHECK_MS`.
pub fn self_check_interval() -> std::time::Duration {
    static EVERY: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *EVERY.get_or_init(|| {
        std::env::var("MOONKALE_SELF_CHECK_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&ms| ms > 0)
            .map_or(
                std::time::Duration::from_secs(2),
                std::time::Duration::from_millis,
            )
    })
}

/// A new secret: 256 bits from the OS CSPRNG as 64 lowercase hex digits.
pub fn new_token() -> Result<String> {
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(|e| Error::Invalid(format!("no OS randomness: {e}")))?;
    Ok(raw.iter().map(|b| format!("{b:02x}")).collect())
}
