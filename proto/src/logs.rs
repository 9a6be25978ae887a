//! The daemons' logs (`gctld`, `gagentd`): to stderr, filtered by `--log`/`GSCHED_LOG`,
//! as text (coloured on a terminal) or, with `--log-format json`, one JSON object per
//! line with the event's fields (`job`, `node`, `request_id` where the event names them)
//! for a log shipper.

/// How the daemons write their logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the process's log writer.
pub fn init(filter: &str, format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_target(false)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
}
