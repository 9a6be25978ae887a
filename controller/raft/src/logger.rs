//! Forwards raft-rs's slog records to `tracing` (target `raft`), keeping key-value pairs.

use slog::{Drain, KV, OwnedKVList, Record};
use std::fmt::Write as _;

struct KvText(String);

impl slog::Serializer for KvText {
    fn emit_arguments(&mut self, key: slog::Key, val: &std::fmt::Arguments<'_>) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

struct TracingDrain;

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        let mut kv = KvText(String::new());
        let _ = record.kv().serialize(record, &mut kv);
        let _ = values.serialize(record, &mut kv);
        let msg = record.msg();
        match record.level() {
            slog::Level::Critical | slog::Level::Error => {
                tracing::error!(target: "raft", "{msg}{}", kv.0)
            }
            slog::Level::Warning => tracing::warn!(target: "raft", "{msg}{}", kv.0),
            slog::Level::Info => tracing::info!(target: "raft", "{msg}{}", kv.0),
            slog::Level::Debug => tracing::debug!(target: "raft", "{msg}{}", kv.0),
            slog::Level::Trace => tracing::trace!(target: "raft", "{msg}{}", kv.0),
        }
        Ok(())
    }
}

/// A slog logger that writes through `tracing`.
pub fn raft_logger() -> slog::Logger {
    slog::Logger::root(TracingDrain.fuse(), slog::o!())
}
