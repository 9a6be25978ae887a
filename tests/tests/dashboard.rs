//! The dashboard in a real browser: headless Chromium, run as two real users against a
//! running cluster's `gctld --http`, renders the page (its JavaScript reading the REST
//! API with the browser's identity) and the test reads the resulting DOM. The node grid
//! shows the GPU a job holds, with its owner; a job page draws its placement; a failed
//! job's page shows its evidence and details to its owner and not to another user (who
//! sees its summary and placement, as `scontrol show job -d` shows them); a `gctl token`
//! logs a browser in as its user, a bad one gets the login form. Screenshots go to
//! `target/test-artifacts/dashboard/`.

use gsched_tests::{Cluster, TestUser, free_port, test_users, workspace};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The Chromium binary, or `None` (the test is skipped) where there is none; CI
/// (`GSCHED_REQUIRE_CHROMIUM=1`) requires it.
fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|name| {
            ["/usr/bin", "/usr/local/bin", "/snap/bin"].map(|d| Path::new(d).join(name))
        })
        .find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("GSCHED_REQUIRE_CHROMIUM").is_none(),
            "GSCHED_REQUIRE_CHROMIUM is set but no Chromium is installed"
        );
        eprintln!("skipping: no Chromium (apt-get install chromium)");
    }
    found
}

struct Browser {
    exe: PathBuf,
    user: TestUser,
    profile: tempfile::TempDir,
}

impl Browser {
    fn new(exe: &Path, user: &TestUser) -> Browser {
        let profile = tempfile::Builder::new()
            .prefix("gsched-chromium")
            .tempdir()
            .unwrap();
        nix::unistd::chown(
            profile.path(),
            Some(nix::unistd::Uid::from_raw(user.uid)),
            Some(nix::unistd::Gid::from_raw(user.gid)),
        )
        .unwrap();
        Browser {
            exe: exe.to_path_buf(),
            user: user.clone(),
            profile,
        }
    }

    /// Chromium as this browser's user, headless, with `extra` arguments.
    fn run(&self, url: &str, extra: &[&str]) -> String {
        let out = Command::new("runuser")
            .args(["-u", &self.user.name, "--"])
            .arg(&self.exe)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--virtual-time-budget=4000",
                "--window-size=1400,1000",
            ])
            .arg(format!("--user-data-dir={}", self.profile.path().display()))
            .args(extra)
            .arg(url)
            .env("HOME", self.profile.path())
            .output()
            .expect("run chromium");
        assert!(
            out.status.success(),
            "chromium failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the page's scripts drew (its `<main>`), once they have.
    fn dom(&self, url: &str) -> String {
        for _ in 0..5 {
            let dom = self.run(url, &["--dump-dom"]);
            if dom.contains("data-ready=\"1\"") {
                let start = dom.find("<main").expect("a main element");
                let end = dom.find("</main>").expect("a main element");
                return dom[start..end].to_string();
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!("the dashboard did not finish drawing {url}");
    }

    /// What the page drew, finished or showing its login form.
    fn dom_or_login(&self, url: &str) -> String {
        let dom = self.run(url, &["--dump-dom"]);
        let start = dom.find("<main").expect("a main element");
        let end = dom.find("</main>").expect("a main element");
        dom[start..end].to_string()
    }

    fn screenshot(&self, url: &str, name: &str) {
        let dir = workspace().join("target/test-artifacts/dashboard");
        std::fs::create_dir_all(&dir).unwrap();
        // Chromium writes as the user: give it a file of its own, then move it.
        let shot = self.profile.path().join("shot.png");
        self.run(url, &[&format!("--screenshot={}", shot.display())]);
        std::fs::copy(&shot, dir.join(name)).unwrap();
    }
}

#[test]
fn t10_node_grid_job_placement_and_evidence_only_for_the_owner() {
    let Some(exe) = chromium() else { return };
    let Some((alice, bob)) = test_users() else {
        return;
    };
    let addr = format!("127.0.0.1:{}", free_port());
    let mut c = Cluster::controllers(1, &["--http", &addr]);
    let util = c.path("n1-util.json");
    std::fs::write(&util, r#"{"0": 70, "1": 70}"#).unwrap();
    c.add_agent(
        "n1",
        "ws-2gpu-nvlink.json",
        &[
            "--gpu-sample-interval",
            "1",
            "--fake-gpu-util",
            &util.to_string_lossy(),
        ],
    );
    c.add_agent("n2", "ws-2gpu-nvlink.json", &[]);
    let home = c.user_dir(&alice);
    let sleep = home.join("sleep.sh");
    std::fs::write(&sleep, "#!/bin/sh\nexec sleep 600\n").unwrap();
    let hang = home.join("hang.sh");
    std::fs::write(
        &hang,
        "#!/bin/sh\necho '[rank0]:[E1201 10:00:00.000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.'\nexit 1\n",
    )
    .unwrap();
    for f in [&sleep, &hang] {
        std::fs::set_permissions(f, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        nix::unistd::chown(
            f.as_path(),
            Some(nix::unistd::Uid::from_raw(alice.uid)),
            Some(nix::unistd::Gid::from_raw(alice.gid)),
        )
        .unwrap();
    }
    let submit = |args: &[&str]| -> u64 {
        let out = c.cli_as(&alice, "gsub", args);
        gsched_tests::success_stdout(&out, "gsub as alice")
            .trim()
            .parse()
            .unwrap()
    };
    let busy = submit(&[
        "--parsable",
        "-w",
        "n1",
        "--gpus-per-node",
        "1",
        sleep.to_str().unwrap(),
    ]);
    c.wait_state(busy, &["RUNNING"], Duration::from_secs(30));
    let failed = submit(&[
        "--parsable",
        "-w",
        "n2",
        "--gpus-per-node",
        "1",
        hang.to_str().unwrap(),
    ]);
    c.wait_state(failed, &["FAILED"], Duration::from_secs(30));

    let base = format!("http://{addr}/");
    let as_alice = Browser::new(&exe, &alice);
    let as_bob = Browser::new(&exe, &bob);

    // The node grid: the one held GPU is n1's, labelled with the job and its owner.
    let dom = as_alice.dom(&base);
    let busy_cells: Vec<&str> = dom
        .match_indices("class=\"gpu busy\"")
        .map(|(i, _)| &dom[i..i + 300])
        .collect();
    assert_eq!(busy_cells.len(), 1, "{dom}");
    assert!(
        busy_cells[0].contains(&format!("data-job=\"{busy}\"")),
        "{}",
        busy_cells[0]
    );
    assert!(busy_cells[0].contains(&alice.name), "{}", busy_cells[0]);
    let n1 = &dom[dom.find("data-node=\"n1\"").unwrap()..];
    let n1 = &n1[..n1.find("</section>").unwrap()];
    assert!(n1.contains("gpu busy"), "the busy GPU is n1's: {n1}");
    // Its wiring: the NVLink bond drawn, and the link matrix.
    assert!(n1.contains("GPU 0 - GPU 1: NV4"), "{n1}");
    assert!(n1.contains("class=\"l-nv\""), "{n1}");
    // The queue lists the running job.
    assert!(dom.contains(&format!("<tr data-job=\"{busy}\">")), "{dom}");
    as_alice.screenshot(&base, "overview.png");

    // The job's page draws its placement: n1, its GPU highlighted; and its GPU's
    // utilisation over time, once a few samples are in.
    gsched_tests::wait_for("samples of the busy job", Duration::from_secs(20), || {
        let v = c.json("gacct", &["--eff", &busy.to_string()]);
        (v["gpus"][0]["samples"].as_u64() >= Some(3)).then_some(())
    });
    let job_url = format!("{base}#/job/{busy}");
    let dom = as_alice.dom(&job_url);
    assert!(
        dom.contains("class=\"placement\" data-node=\"n1\""),
        "{dom}"
    );
    assert!(dom.contains("gpubox mine"), "{dom}");
    let eff = &dom[dom.find("class=\"eff\" data-gpu=\"n1:").expect(&dom)..];
    assert!(
        eff.contains("mean 70%") && eff.contains("<polyline"),
        "{eff}"
    );
    as_alice.screenshot(&job_url, "job.png");

    // A failed job: its evidence for its owner...
    let failed_url = format!("{base}#/job/{failed}");
    let dom = as_alice.dom(&failed_url);
    assert!(dom.contains("nccl_timeout"), "{dom}");
    assert!(
        dom.contains("Watchdog caught collective operation timeout"),
        "{dom}"
    );
    as_alice.screenshot(&failed_url, "failed-job.png");
    // ...and not for another user, who sees the summary only.
    let dom = as_bob.dom(&failed_url);
    assert!(dom.contains(&format!("Job {failed}")), "{dom}");
    assert!(
        !dom.contains("Watchdog caught"),
        "bob sees alice's evidence: {dom}"
    );
    assert!(dom.contains("class=\"note restricted\""), "{dom}");
    assert!(
        !dom.contains("Working directory"),
        "bob sees alice's job details: {dom}"
    );

    // Logging in with a token (`gctl token`, given once as #token=...) makes the browser
    // that user, whoever runs it; a bad token gets the login form, not someone's data.
    let out = c.cli_as(&alice, "gctl", &["token", "--json"]);
    let v: serde_json::Value =
        serde_json::from_str(&gsched_tests::success_stdout(&out, "gctl token")).unwrap();
    let token = v["token"].as_str().unwrap();
    let guest = Browser::new(&exe, &bob);
    let dom = guest.dom_or_login(&format!("{base}#token=forged.{token}"));
    assert!(dom.contains("id=\"login\""), "{dom}");
    let dom = guest.dom(&format!("{base}#token={token}"));
    assert!(dom.contains("data-node=\"n1\""), "{dom}");
    let dom = guest.dom(&failed_url);
    assert!(
        dom.contains("Watchdog caught collective operation timeout"),
        "{dom}"
    );
}
