//! Interactive jobs driven through a pseudo-terminal, as a user at a keyboard would:
//! `grun --pty bash` (a real terminal on the node: its size and resizes, Ctrl-C reaching
//! the running command, the shell's exit status coming back), `galloc` (a shell on the
//! submit host inside the allocation, `grun` steps from it, its exit giving the
//! allocation back as COMPLETED), stdin piped into `grun` reaching task 0 only, and steps
//! recorded in their job (`gqueue -s` while they run, `gacct` rows `JOBID.STEP`).

use gsched_tests::{Cluster, bin, success_stdout};
use parking_lot::Mutex;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

nix::ioctl_write_ptr_bad!(set_window_size, libc::TIOCSWINSZ, nix::pty::Winsize);
nix::ioctl_write_int_bad!(set_controlling_tty, libc::TIOCSCTTY);

fn winsize(rows: u16, cols: u16) -> nix::pty::Winsize {
    nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

/// A command running on a pseudo-terminal this test types into and reads.
struct Terminal {
    master: std::fs::File,
    child: Child,
    screen: Arc<Mutex<Vec<u8>>>,
    /// How much of the screen earlier `expect`s consumed.
    seen: usize,
}

impl Terminal {
    fn spawn(mut cmd: Command, rows: u16, cols: u16) -> Terminal {
        let pty = nix::pty::openpty(&winsize(rows, cols), None).expect("openpty");
        let slave = std::fs::File::from(pty.slave);
        cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        // SAFETY: setsid and TIOCSCTTY on fd 0 (the slave, placed there by Command) are
        // async-signal-safe system calls; nothing is allocated.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                nix::unistd::setsid()?;
                set_controlling_tty(0, 0)?;
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn on the terminal");
        let master = std::fs::File::from(pty.master);
        let screen = Arc::new(Mutex::new(Vec::new()));
        let mut reader = master.try_clone().unwrap();
        let sink = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().extend_from_slice(&buf[..n]);
            }
        });
        Terminal {
            master,
            child,
            screen,
            seen: 0,
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock()).into_owned()
    }

    fn send(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).unwrap();
    }

    /// Waits until `needle` appears after what earlier calls consumed; returns the text
    /// up to and including it.
    fn expect(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.text();
            if let Some(i) = text.get(self.seen..).and_then(|t| t.find(needle)) {
                let end = self.seen + i + needle.len();
                let got = text[self.seen..end].to_string();
                self.seen = end;
                return got;
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} on the terminal; it shows:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Resizes the terminal (the kernel sends SIGWINCH to its foreground process).
    fn resize(&self, rows: u16, cols: u16) {
        // SAFETY: TIOCSWINSZ reads one winsize from the pointer, valid for the call.
        unsafe { set_window_size(self.master.as_raw_fd(), &winsize(rows, cols)) }.unwrap();
    }

    fn exit_status(mut self) -> i32 {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code().unwrap_or(-1);
            }
            assert!(Instant::now() < deadline, "still running:\n{}", self.text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn cluster() -> Cluster {
    let mut c = Cluster::controllers(1, &[]);
    c.add_agent("n1", "ws-2gpu-nvlink.json", &[]);
    c.add_agent("n2", "ws-2gpu-nvlink.json", &[]);
    c
}

fn state_of(c: &Cluster, job: &str) -> String {
    let v = c.json("gacct", &["-j", job]);
    v["jobs"][0]["state"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn wait_state(c: &Cluster, job: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while state_of(c, job) != want {
        assert!(
            Instant::now() < deadline,
            "job {job} is {}, not {want}",
            state_of(c, job)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn t10_grun_pty_bash_is_a_real_terminal_on_the_node() {
    let c = cluster();
    let mut cmd = c.command(
        "grun",
        &["-G", "1", "--pty", "bash", "--norc", "--noprofile"],
        &c.path(""),
    );
    cmd.env("TERM", "xterm");
    let mut t = Terminal::spawn(cmd, 30, 100);
    t.expect("has been allocated resources");
    // A terminal of the size of ours, in the job.
    t.send("tty; stty size; echo job=$SLURM_JOB_ID node=$SLURMD_NODENAME\r");
    t.expect("/dev/pts/");
    t.expect("30 100");
    let line = t.expect("node=n1");
    let job: String = line
        .rsplit("job=")
        .next()
        .unwrap()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    assert!(!job.is_empty(), "{line}");
    // Our resize reaches it.
    t.resize(40, 120);
    std::thread::sleep(Duration::from_millis(800));
    t.send("stty size\r");
    t.expect("40 120");
    // Ctrl-C stops the command in the foreground, not the shell.
    t.send("sleep 60; echo slept\r");
    std::thread::sleep(Duration::from_millis(700));
    t.send("\x03");
    t.send("echo back-$((6*7))\r");
    t.expect("back-42");
    // The shell's exit status is grun's, and the allocation ends COMPLETED.
    t.send("exit 7\r");
    assert_eq!(t.exit_status(), 7);
    wait_state(&c, &job, "COMPLETED");
}

#[test]
fn t20_galloc_gives_a_shell_in_the_allocation_and_its_exit_gives_it_back() {
    let c = cluster();
    let mut cmd = c.command("galloc", &["-N", "2", "--gpus-per-node", "1"], &c.path(""));
    let tools = bin("grun").parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        tools.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    cmd.env("SHELL", "/bin/bash")
        .env("TERM", "xterm")
        .env("PATH", path);
    let mut t = Terminal::spawn(cmd, 24, 80);
    t.expect("has been allocated resources (n[1-2])");
    // One line, so nothing is typed while a step owns the terminal.
    t.send("echo nodes=$SLURM_JOB_NODELIST; grun -l hostname; grun -w n2 --pty tty; echo id=$SLURM_JOB_ID; exit 3\r");
    t.expect("nodes=n[1-2]");
    let steps = t.expect("/dev/pts/");
    assert!(steps.contains("0: ") && steps.contains("1: "), "{steps}");
    let line = t.expect("Relinquishing job allocation");
    let job: String = line
        .rsplit("id=")
        .next()
        .unwrap()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    assert_eq!(t.exit_status(), 3);
    wait_state(&c, &job, "COMPLETED");
}

#[test]
fn t30_piped_stdin_reaches_task_zero_and_ends_there() {
    let c = cluster();
    let mut child = c
        .command(
            "grun",
            &[
                "--gpus-per-node",
                "1",
                "-N",
                "2",
                "--ntasks-per-node",
                "1",
                "-l",
                "sh",
                "-c",
                "wc -l",
            ],
            &c.path(""),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // More than one input piece and more than a pipe holds.
    let line = "x".repeat(99) + "\n";
    for _ in 0..3000 {
        stdin.write_all(line.as_bytes()).unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text = success_stdout(&out, "grun wc -l");
    let mut lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines.sort();
    assert_eq!(lines, ["0: 3000", "1: 0"], "{text}");
    // A slow reader: 8 MiB (twice what an agent buffers) arrive whole, because grun
    // sends no more than the task has taken plus a window.
    let mut child = c
        .command(
            "grun",
            &["-G", "1", "sh", "-c", "sleep 2; wc -c"],
            &c.path(""),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let block = vec![b'y'; 1 << 20];
        for _ in 0..8 {
            stdin.write_all(&block).unwrap();
        }
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let text = success_stdout(&out, "grun wc -c");
    assert_eq!(text.trim(), (8u64 << 20).to_string(), "{out:?}");
    // --pty is one task.
    let out = Command::new(bin("grun"))
        .args([
            "-N",
            "2",
            "-n",
            "2",
            "--gpus-per-node",
            "1",
            "--pty",
            "true",
        ])
        .env("GSCHED_CONTROLLERS", c.controllers_arg())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("grun --pty runs one task"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn t40_steps_show_in_gqueue_s_while_they_run_and_in_gacct_after() {
    let c = cluster();
    let grun = bin("grun");
    let script = c.script(
        "steps.sbatch",
        &format!(
            "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --gpus-per-node 1\n{g} -l hostname\n{g} sh -c 'exit 3' || true\n{g} -N 1 sleep 5\n",
            g = grun.display()
        ),
    );
    let job = c.submit(&[&script]).to_string();
    let step = format!("{job}.2");
    gsched_tests::wait_for(
        "gqueue -s to show the sleep",
        Duration::from_secs(30),
        || {
            let out = c.ok("gqueue", &["-s"]);
            out.lines()
                .find(|l| l.trim_start().starts_with(&step))
                .map(str::to_string)
        },
    );
    let out = c.ok("gqueue", &["-s", "-h"]);
    let row: Vec<&str> = out
        .lines()
        .find(|l| l.trim_start().starts_with(&step))
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(
        (row[1], row.last().copied()),
        ("sleep", Some("n1")),
        "{out}"
    );
    wait_state(&c, &job, "COMPLETED");
    let acct = c.ok("gacct", &["-j", &job]);
    let rows: Vec<Vec<&str>> = acct
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|r: &Vec<&str>| {
            r.first()
                .is_some_and(|id| id.starts_with(&format!("{job}.")))
        })
        .collect();
    let got: Vec<(&str, &str, &str, &str)> =
        rows.iter().map(|r| (r[0], r[1], r[2], r[3])).collect();
    assert_eq!(
        got,
        [
            (format!("{job}.0"), "hostname", "COMPLETED", "0:0"),
            (format!("{job}.1"), "sh", "FAILED", "3:0"),
            (format!("{job}.2"), "sleep", "COMPLETED", "0:0"),
        ]
        .iter()
        .map(|(a, b, c, d)| (a.as_str(), *b, *c, *d))
        .collect::<Vec<_>>(),
        "{acct}"
    );
    let v = c.json("gacct", &["-j", &job]);
    assert_eq!(
        v["jobs"][0]["grun_steps"][0]["nodes"],
        serde_json::json!(["n1", "n2"])
    );
    assert!(!c.ok("gqueue", &["-s"]).contains(&step));
}
