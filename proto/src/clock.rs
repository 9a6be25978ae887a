//! Wall-clock time for the daemons and tools, in milliseconds since the Unix epoch (the
//! pure crates never read a clock; they are given times like this one).

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
