//! A step's stdin: grun's own (or a file's, `--input=FILE`) sent to task 0, paced by
//! what it has read, and with a terminal, its size on every SIGWINCH.

use super::terminal::terminal_size;
use crate::client::{Client, controller_list};
use base64::Engine;
use gsched_proto::contract::Carries;
use gsched_proto::pb::StepInputRequest;
use gsched_types::job::JobId;
use gsched_types::steps::{INPUT_CHUNK, INPUT_WINDOW, InputEvent, StepInput};
use std::io::{IsTerminal, Read};

/// Where task 0's stdin comes from.
pub enum Source {
    /// grun's own stdin.
    Stdin,
    /// A file (`--input=FILE`).
    File(std::fs::File),
    /// Nothing: task 0 reads end of file (`--input=none`).
    Nothing,
}

/// Sends `source` to task 0 of the step (and, with a terminal, its size on each
/// SIGWINCH), each piece as one `StepInput` call to the leader.
pub fn forward_input(
    controllers: Option<String>,
    job: u64,
    step: u32,
    pty: bool,
    taken: std::sync::Arc<std::sync::atomic::AtomicU64>,
    source: Source,
) {
    let send = move |client: &mut Client, rt: &tokio::runtime::Runtime, input: InputEvent| {
        let body = StepInput {
            job: JobId(job),
            step,
            input,
        };
        let req = StepInputRequest::carrying(&body);
        rt.block_on(client.call(|mut c| {
            let req = req.clone();
            async move { c.step_input(req).await }
        }))
        .is_ok()
    };
    if pty && std::io::stdin().is_terminal() {
        let controllers = controllers.clone();
        std::thread::spawn(move || {
            let rt = crate::runtime();
            let mut client = Client::new(controller_list(controllers.as_deref()));
            let Ok(mut winch) = rt.block_on(async {
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
            }) else {
                return;
            };
            while rt.block_on(winch.recv()).is_some() {
                if !send(&mut client, &rt, InputEvent::Resize(terminal_size())) {
                    return;
                }
            }
        });
    }
    std::thread::spawn(move || {
        let rt = crate::runtime();
        let mut client = Client::new(controller_list(controllers.as_deref()));
        let mut reader: Box<dyn Read> = match source {
            Source::Stdin => Box::new(std::io::stdin().lock()),
            Source::File(f) => Box::new(f),
            Source::Nothing => Box::new(std::io::empty()),
        };
        let mut buf = vec![0u8; INPUT_CHUNK];
        let mut sent: u64 = 0;
        loop {
            // At most INPUT_WINDOW bytes ahead of what task 0 has read: a slow reader
            // slows this down instead of filling its node's memory.
            while sent.saturating_sub(taken.load(std::sync::atomic::Ordering::Relaxed))
                > INPUT_WINDOW
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let n = match reader.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => 0,
            };
            sent += n as u64;
            let input = if n == 0 {
                InputEvent::Eof
            } else {
                InputEvent::Data {
                    data: base64::engine::general_purpose::STANDARD.encode(&buf[..n]),
                }
            };
            if !send(&mut client, &rt, input) || n == 0 {
                return;
            }
        }
    });
}
