//! Python tracebacks as a class: whatever the exception, a traceback in a job's output
//! names its class, its message and the deepest frame (file, line, function), read from
//! the shape every Python prints (`Traceback (most recent call last):`, `File "...",
//! line N, in f` frames, the exception line), whatever prefix a launcher puts before each
//! line (`[rank1]: `, `host: `, `[default0]:`). Chained exceptions ("During handling of
//! the above exception...", "The above exception was the direct cause...") keep the one
//! they follow, so the first of a chain stays the root cause. An exception that only
//! reports another process's failure (torchrun's `ChildFailedError`, a `subprocess`
//! failure, `torch.multiprocessing`'s) is a launcher's summary, and a `KeyboardInterrupt`
//! or `SystemExit` is the process being stopped: neither is a root cause while another
//! exception is in the log.

/// Where an exception was raised: the deepest frame of its traceback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub file: String,
    pub line: u32,
    pub function: String,
}

/// What an exception says about the job's failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The job's own error.
    Cause,
    /// A launcher reporting that a process it started failed: the cause is that
    /// process's own error.
    Launcher,
    /// The process was interrupted or told to exit (`KeyboardInterrupt`, `SystemExit`).
    Interrupt,
}

/// How a chained exception follows the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chain {
    /// "During handling of the above exception, another exception occurred".
    WhileHandling,
    /// "The above exception was the direct cause of the following exception" (`raise ...
    /// from ...`).
    CausedBy,
}

/// One exception read from a traceback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exception {
    /// As printed, module path included (`torch.distributed.DistBackendError`).
    pub class: String,
    /// The text after `Class: ` on the exception line (empty when there is none).
    pub message: String,
    pub frame: Option<Frame>,
    /// The thread it was raised in (`Exception in thread NAME:`), when not the main one.
    pub thread: Option<String>,
    /// The exception this one followed in a chain, and how.
    pub after: Option<(Chain, Box<Exception>)>,
}

impl Exception {
    /// The class without its module path (`DistBackendError`).
    pub fn short_class(&self) -> &str {
        self.class.rsplit('.').next().unwrap_or(&self.class)
    }

    pub fn role(&self) -> Role {
        match self.short_class() {
            "ChildFailedError"
            | "ProcessRaisedException"
            | "ProcessExitedException"
            | "CalledProcessError" => Role::Launcher,
            "KeyboardInterrupt" | "SystemExit" => Role::Interrupt,
            _ => Role::Cause,
        }
    }

    /// The exception line as Python printed it (`Class: message`).
    pub fn line(&self) -> String {
        if self.message.is_empty() {
            self.class.clone()
        } else {
            format!("{}: {}", self.class, self.message)
        }
    }

    /// Where it was raised: `(at FILE:LINE in FUNCTION, in thread NAME)`.
    pub fn place(&self) -> String {
        let mut parts = Vec::new();
        if let Some(f) = &self.frame {
            parts.push(format!(
                "at {}:{} in {}",
                short_path(&f.file),
                f.line,
                f.function
            ));
        }
        if let Some(t) = &self.thread {
            parts.push(format!("in thread {t}"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("({})", parts.join(", "))
        }
    }

    /// The first exception of its chain.
    pub fn root(&self) -> &Exception {
        match &self.after {
            Some((_, before)) => before.root(),
            None => self,
        }
    }

    /// One line of evidence: the exception line (its message cut to leave room), where it
    /// was raised, and for a chained exception the one it followed.
    pub fn evidence(&self) -> String {
        let mut out = one_line(&self.line(), 240);
        let place = self.place();
        if !place.is_empty() {
            out.push(' ');
            out.push_str(&place);
        }
        if let Some((how, before)) = &self.after {
            let root = before.root();
            let word = match how {
                Chain::WhileHandling => "while handling",
                Chain::CausedBy => "caused by",
            };
            out.push_str(&format!("; {word} {}", one_line(&root.line(), 120)));
            let place = root.place();
            if !place.is_empty() {
                out.push(' ');
                out.push_str(&place);
            }
        }
        out
    }
}

/// A long path shortened to its last three parts (`…/distributed/c10d/utils.py`).
fn short_path(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').collect();
    if path.len() <= 60 || parts.len() <= 3 {
        return path.to_string();
    }
    format!("…/{}", parts[parts.len() - 3..].join("/"))
}

fn one_line(text: &str, max: usize) -> String {
    let t = text.trim();
    if t.chars().count() <= max {
        return t.to_string();
    }
    let cut: String = t.chars().take(max).collect();
    format!("{cut}…")
}

const HEADER: &str = "Traceback (most recent call last):";
const WHILE_HANDLING: &str = "During handling of the above exception, another exception occurred:";
const CAUSED_BY: &str = "The above exception was the direct cause of the following exception:";

/// Lines a traceback may go without a frame or its exception line (other processes'
/// output interleaved with it) before it is given up.
const STRAYS: u32 = 40;
/// Tracebacks read at once (one per prefix: ranks print theirs together).
const OPEN: usize = 64;

#[derive(Debug)]
enum State {
    /// Reading frames, waiting for the exception line.
    Frames {
        deepest: Option<Frame>,
        /// Indented lines read: frames, their source lines, carets.
        lines: u32,
    },
    /// The exception is read; a chain marker may follow.
    Ended(Exception),
}

#[derive(Debug)]
struct Open {
    prefix: String,
    state: State,
    thread: Option<String>,
    /// The exception this traceback follows (a chain marker was read after it).
    after: Option<(Chain, Box<Exception>)>,
    /// A chain marker read after the exception: the next traceback continues the chain.
    marker: Option<Chain>,
    strays: u32,
}

/// Reads tracebacks out of a job's output, line by line.
#[derive(Debug, Default)]
pub struct Tracebacks {
    open: Vec<Open>,
    /// `Exception in thread NAME:` lines waiting for their traceback, by prefix.
    threads: Vec<(String, String)>,
    /// Whether the last line read belonged to a traceback.
    inside: bool,
}

impl Tracebacks {
    /// Reads one line; the exception it completes, if it is a traceback's exception line.
    pub fn line(&mut self, raw: &str) -> Option<Exception> {
        let line = raw.trim_end_matches(['\n', '\r']);
        self.inside = false;
        if let Some(pos) = line.find(HEADER) {
            let prefix = line[..pos].to_string();
            self.start(prefix);
            self.inside = true;
            return None;
        }
        if let Some((prefix, name)) = thread_header(line) {
            self.threads.retain(|(p, _)| *p != prefix);
            self.threads.push((prefix, name));
            if self.threads.len() > OPEN {
                self.threads.remove(0);
            }
            self.inside = true;
            return None;
        }
        // The open traceback whose prefix this line carries (the longest: "[rank1]: "
        // before "").
        let k = self
            .open
            .iter()
            .enumerate()
            .filter(|(_, o)| line.starts_with(o.prefix.as_str()))
            .max_by_key(|(_, o)| o.prefix.len())
            .map(|(k, _)| k)?;
        let o = &mut self.open[k];
        let body = &line[o.prefix.len()..];
        match &mut o.state {
            State::Frames { deepest, lines } => {
                if body.starts_with([' ', '\t']) {
                    // A frame, its source line, Python 3.11's carets, an exception
                    // group's box: part of the traceback.
                    if let Some(f) = frame(body) {
                        *deepest = Some(f);
                    }
                    *lines += 1;
                    o.strays = 0;
                    self.inside = true;
                    return None;
                }
                if body.trim().is_empty() {
                    return None;
                }
                match exception_line(body).filter(|_| *lines > 0) {
                    Some((class, message)) => {
                        let exc = Exception {
                            class,
                            message,
                            frame: deepest.take(),
                            thread: o.thread.take(),
                            after: o.after.take(),
                        };
                        o.state = State::Ended(exc.clone());
                        o.strays = 0;
                        self.inside = true;
                        Some(exc)
                    }
                    None => {
                        o.strays += 1;
                        if o.strays > STRAYS {
                            self.open.remove(k);
                        }
                        None
                    }
                }
            }
            State::Ended(_) => {
                let t = body.trim();
                let marker = if t == WHILE_HANDLING {
                    Some(Chain::WhileHandling)
                } else if t == CAUSED_BY {
                    Some(Chain::CausedBy)
                } else {
                    None
                };
                if marker.is_some() {
                    o.marker = marker;
                    self.inside = true;
                } else if !t.is_empty() {
                    o.strays += 1;
                    if o.strays > STRAYS {
                        self.open.remove(k);
                    }
                }
                None
            }
        }
    }

    /// Whether the last line read was part of a traceback (its header, a frame, its
    /// exception line, a chain marker), so no other rule need read it.
    pub fn inside(&self) -> bool {
        self.inside
    }

    fn start(&mut self, prefix: String) {
        let mut after = None;
        if let Some(k) = self.open.iter().position(|o| o.prefix == prefix) {
            let old = self.open.remove(k);
            if let (Some(how), State::Ended(exc)) = (old.marker, old.state) {
                after = Some((how, Box::new(exc)));
            }
        }
        let thread = self
            .threads
            .iter()
            .position(|(p, _)| *p == prefix)
            .map(|k| self.threads.remove(k).1);
        self.open.push(Open {
            prefix,
            state: State::Frames {
                deepest: None,
                lines: 0,
            },
            thread,
            after,
            marker: None,
            strays: 0,
        });
        if self.open.len() > OPEN {
            self.open.remove(0);
        }
    }
}

/// `Exception in thread Thread-1 (worker):` (Python 3.8+; before, `Exception in thread
/// Thread-1:`), with its prefix.
fn thread_header(line: &str) -> Option<(String, String)> {
    let pos = line.find("Exception in thread ")?;
    let name = line[pos + 20..].trim_end().strip_suffix(':')?;
    Some((line[..pos].to_string(), name.to_string()))
}

/// `  File "/w/train.py", line 12, in step` (the function is absent in some dumps).
fn frame(body: &str) -> Option<Frame> {
    if !body.starts_with(' ') {
        return None;
    }
    let rest = body.trim_start().strip_prefix("File \"")?;
    let (file, rest) = rest.split_once("\", line ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let line = digits.parse().ok()?;
    let function = rest[digits.len()..]
        .strip_prefix(", in ")
        .map(|f| f.trim().to_string())
        .unwrap_or_default();
    Some(Frame {
        file: file.to_string(),
        line,
        function,
    })
}

/// `Class: message` or `Class`, where the class is a dotted Python name.
fn exception_line(body: &str) -> Option<(String, String)> {
    let t = body.trim_end();
    let (class, message) = match t.split_once(':') {
        Some((c, m)) => (c, m.trim()),
        None => (t, ""),
    };
    let name = |part: &str| {
        part.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    (!class.is_empty() && class.split('.').all(name))
        .then(|| (class.to_string(), message.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<Exception> {
        let mut t = Tracebacks::default();
        text.lines().filter_map(|l| t.line(l)).collect()
    }

    #[test]
    fn a_plain_traceback_names_its_class_and_deepest_frame() {
        let e = read(
            "step 10 loss 0.5
Traceback (most recent call last):
  File \"/work/train.py\", line 40, in <module>
    main()
  File \"/work/train.py\", line 12, in step
    raise RuntimeError(\"boom\")
    ^^^^^^^^^^^^^^^^^^^^^^^^^^^
RuntimeError: boom
",
        );
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].class, "RuntimeError");
        assert_eq!(e[0].message, "boom");
        assert_eq!(e[0].role(), Role::Cause);
        assert_eq!(
            e[0].evidence(),
            "RuntimeError: boom (at /work/train.py:12 in step)"
        );
    }

    #[test]
    fn a_chain_keeps_its_root_cause() {
        let e = read(
            "Traceback (most recent call last):
  File \"/work/config.py\", line 8, in get
    return self.values[key]
KeyError: 'lr'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File \"/work/train.py\", line 30, in load
    lr = cfg.get(\"lr\")
  File \"/work/config.py\", line 10, in get
    raise ValueError(f\"no {key}\")
ValueError: no lr
",
        );
        assert_eq!(e.len(), 2);
        assert_eq!(e[1].root().class, "KeyError");
        assert_eq!(
            e[1].evidence(),
            "ValueError: no lr (at /work/config.py:10 in get); while handling KeyError: 'lr' (at /work/config.py:8 in get)"
        );
        let e = read(
            "Traceback (most recent call last):
  File \"/work/io.py\", line 3, in fetch
    raise ConnectionError(\"store unreachable\")
ConnectionError: store unreachable

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File \"/work/train.py\", line 9, in <module>
    fetch()
RuntimeError: cannot load the checkpoint
",
        );
        assert!(
            e[1].evidence().ends_with(
                "caused by ConnectionError: store unreachable (at /work/io.py:3 in fetch)"
            ),
            "{}",
            e[1].evidence()
        );
    }

    #[test]
    fn rank_prefixed_tracebacks_are_read_apart_even_interleaved() {
        // PyTorch 2.2+ prefixes every line of a rank's error with "[rankN]: ".
        let e = read(
            "[rank1]: Traceback (most recent call last):
[rank0]: Traceback (most recent call last):
[rank1]:   File \"/w/train.py\", line 42, in <module>
[rank0]:   File \"/w/train.py\", line 42, in <module>
[rank1]:     dist.all_reduce(t)
[rank0]:     dist.all_reduce(t)
[rank1]:   File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 2501, in all_reduce
[rank1]:     work = group.allreduce([tensor], opts)
[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
[rank1]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.
[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error
",
        );
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(e[0].short_class(), "DistBackendError");
        assert_eq!(
            e[0].frame.as_ref().map(|f| (f.line, f.function.as_str())),
            Some((2501, "all_reduce"))
        );
        assert!(
            e[0].place()
                .contains("…/torch/distributed/distributed_c10d.py:2501")
        );
        assert_eq!(e[1].frame.as_ref().map(|f| f.line), Some(42));
        assert!(e[1].message.contains("remote process exited"));
    }

    #[test]
    fn an_interrupt_and_a_launchers_summary_are_not_causes() {
        let e = read(
            "Traceback (most recent call last):
  File \"/w/train.py\", line 5, in <module>
    time.sleep(100)
KeyboardInterrupt
",
        );
        assert_eq!(
            (e[0].class.as_str(), e[0].role()),
            ("KeyboardInterrupt", Role::Interrupt)
        );
        assert_eq!(
            e[0].evidence(),
            "KeyboardInterrupt (at /w/train.py:5 in <module>)"
        );
        let e = read(
            "Traceback (most recent call last):
  File \"/usr/local/bin/torchrun\", line 8, in <module>
    sys.exit(main())
  File \"/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py\", line 250, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
train.py FAILED
",
        );
        assert_eq!(e[0].role(), Role::Launcher);
        assert_eq!(e[0].message, "");
    }

    #[test]
    fn an_exception_in_a_thread_names_the_thread() {
        let e = read(
            "Exception in thread Thread-1 (worker):
Traceback (most recent call last):
  File \"/usr/lib/python3.10/threading.py\", line 1016, in _bootstrap_inner
    self.run()
  File \"/usr/lib/python3.10/threading.py\", line 953, in run
    self._target(*self._args, **self._kwargs)
  File \"/w/loader.py\", line 4, in worker
    raise ValueError(\"bad shard 3\")
ValueError: bad shard 3
",
        );
        assert_eq!(
            e[0].evidence(),
            "ValueError: bad shard 3 (at /w/loader.py:4 in worker, in thread Thread-1 (worker))"
        );
    }

    #[test]
    fn host_prefixes_wrapped_paths_and_stray_lines_do_not_derail_it() {
        let e = read(
            "node-77: Traceback (most recent call last):
node-77:   File \"/opt/conda/lib/python3.6/site-packages/deepspeed/launcher/launch.py\", line 161, in main
node-77:     raise subprocess.CalledProcessError(returncode=last_return_code, cmd=cmd)
node-12: epoch 3
node-77: subprocess.CalledProcessError: Command '['python', 'train.py']' returned non-zero exit status 1.
",
        );
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].role(), Role::Launcher);
        // A frame's path wrapped by a terminal: the broken line is skipped, not taken for
        // the exception.
        let e = read(
            "Traceback (most recent call last):
  File \"/home/user/.conda/envs/deit/lib/python3.7/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.p
y\", line 345, in wrapper
    return f(*args, **kwargs)
OSError: [Errno 28] No space left on device
",
        );
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].class, "OSError");
        // Output with no traceback has no exception, whatever it says.
        assert!(read("RuntimeError: boom\nValueError: x\n").is_empty());
    }
}
