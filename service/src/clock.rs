//! The wall clock as the service stamps what it keeps: milliseconds since
//! the Unix epoch, the unit of every stored and sent timestamp (transcripts,
//! session summaries, change sets). One function, so they cannot disagree.

/// Now, in milliseconds since the Unix epoch; 0 if the clock is set before
/// 1970 (a stamp is informative, never worth failing for).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
