//! Accounts, users and QOS changed on a running cluster through `sacctmgr` and
//! `gctl account|user|qos`, acting only through the CLI: a group's GPU cap holds a queued
//! job with `AssocGrpGRES`, the cap survives a leader change (the new leader's
//! configuration file does not put the old accounts back), and raising it starts the job
//! without a restart; users may charge only their accounts, and only admins and an
//! account's coordinators change them.

use gsched_tests::{Cluster, success_stdout, test_users, wait_for};
use std::process::Output;
use std::time::Duration;

fn slurm(c: &Cluster, links: &str, name: &str, args: &[&str]) -> Output {
    c.slurm_name(links, name, args)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn reason(c: &Cluster, id: u64) -> String {
    c.job(id).unwrap()["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn parsable_id(o: &Output) -> u64 {
    assert!(o.status.success(), "{}", stderr(o));
    String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
}

#[test]
fn t10_limits_change_on_a_running_cluster_and_survive_a_leader_change() {
    let Some((alice, bob)) = test_users() else {
        return;
    };
    let mut c = Cluster::controllers(3, &[]);
    let links = c.slurm_links();
    c.add_agent("n1", "rtx4090-8gpu.json", &[]);
    c.wait_node_online("n1");

    // The lab's tree, in sacctmgr's words and gctl's. Account names are Slurm's: any case
    // given, stored lower case (NLP is nlp, and so is a job's -A Nlp).
    let nlp_user = "Account=nlp".to_string();
    for line in [
        vec!["-i", "add", "account", "lab", "Description=lab"],
        vec![
            "-i",
            "add",
            "account",
            "NLP",
            "Parent=Lab",
            "GrpTRES=gres/gpu=4",
        ],
        vec!["-i", "add", "user", &alice.name, &nlp_user],
    ] {
        let o = slurm(&c, &links, "sacctmgr", &line);
        success_stdout(&o, &format!("sacctmgr {}", line.join(" ")));
    }
    c.ok(
        "gctl",
        &[
            "account",
            "add",
            "vision",
            "--parent",
            "lab",
            "--coordinators",
            &bob.name,
        ],
    );
    let shown = success_stdout(
        &slurm(&c, &links, "sacctmgr", &["show", "account"]),
        "sacctmgr show account",
    );
    assert!(
        shown.contains("gres/gpu=4") && shown.contains("vision"),
        "{shown}"
    );

    // Bob coordinates vision: he may add users to it, not to nlp, and not make accounts.
    let o = c.cli_as(
        &bob,
        "gctl",
        &["user", "add", &bob.name, "--account", "vision"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = c.cli_as(
        &bob,
        "gctl",
        &["user", "add", &bob.name, "--account", "nlp"],
    );
    assert!(!o.status.success());
    assert!(stderr(&o).contains("may not change"), "{}", stderr(&o));
    let o = c.cli_as(&bob, "gctl", &["account", "add", "mine"]);
    assert!(stderr(&o).contains("may not change"), "{}", stderr(&o));
    // A coordinator adds existing users at or above min_uid only: not root, not a name
    // nobody has (which a later Unix user could take).
    for (who, why) in [
        ("root", "system user"),
        ("gsnosuchuser", "no user gsnosuchuser"),
    ] {
        let o = c.cli_as(&bob, "gctl", &["user", "add", who, "--account", "vision"]);
        assert!(!o.status.success(), "{who} was added by a coordinator");
        assert!(stderr(&o).contains(why), "{}", stderr(&o));
    }
    let users = c.ok("gctl", &["user", "show"]);
    assert!(!users.contains("gsnosuchuser"), "{users}");
    // Limits are capped like job time limits.
    let o = slurm(
        &c,
        &links,
        "sacctmgr",
        &[
            "-i",
            "modify",
            "account",
            "where",
            "name=nlp",
            "set",
            "MaxWall=99999999-00:00:00",
        ],
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("longer than ten years"),
        "{}",
        stderr(&o)
    );

    // Alice charges nlp by default and may not charge vision.
    let o = c.cli_as(&alice, "gsub", &["-A", "vision", "--wrap", "true"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("Invalid account or account/partition combination specified"),
        "{}",
        stderr(&o)
    );
    let job = |c: &Cluster| {
        parsable_id(&c.cli_as(
            &alice,
            "gsub",
            &[
                "-A",
                "Nlp",
                "--gpus-per-node",
                "3",
                "-t",
                "10",
                "--parsable",
                "--wrap",
                "sleep 600",
            ],
        ))
    };
    let first = job(&c);
    let second = job(&c);
    let running = c.wait_state(first, &["RUNNING"], Duration::from_secs(30));
    assert_eq!(running["account"], "nlp", "{running}");
    wait_for(
        "the cap to hold the second job",
        Duration::from_secs(20),
        || (reason(&c, second) == "AssocGrpGRES").then_some(()),
    );

    // A new leader commits its own configuration file; the cap is kept.
    c.kill_leader();
    let after = wait_for(
        "the accounts through a new leader",
        Duration::from_secs(30),
        || {
            let o = c.cli("gctl", &["account", "show", "--json"]);
            o.status
                .success()
                .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
        },
    );
    let accounts: serde_json::Value = serde_json::from_str(&after).unwrap();
    let nlp = accounts
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "nlp")
        .cloned()
        .unwrap_or_else(|| panic!("nlp is kept: {after}"));
    assert_eq!(nlp["max_gpus"], 4, "{nlp}");
    assert_eq!(nlp["parent"], "lab", "{nlp}");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(c.job(second).unwrap()["state"], "PENDING");
    assert_eq!(reason(&c, second), "AssocGrpGRES");

    // Raising the cap starts the job, with no restart.
    let o = wait_for(
        "the modify through the new leader",
        Duration::from_secs(20),
        || {
            let o = slurm(
                &c,
                &links,
                "sacctmgr",
                &[
                    "-i",
                    "modify",
                    "account",
                    "where",
                    "name=nlp",
                    "set",
                    "GrpTRES=gres/gpu=8",
                ],
            );
            o.status.success().then_some(o)
        },
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("Modified account nlp"));
    c.wait_state(second, &["RUNNING"], Duration::from_secs(30));

    // A QOS made at run time limits wall time with Slurm's reason; bad input changes nothing.
    c.ok("gctl", &["qos", "add", "short", "--max-wall", "5"]);
    let q = parsable_id(&c.cli_as(
        &alice,
        "gsub",
        &["--qos", "short", "-t", "10", "--parsable", "--wrap", "true"],
    ));
    wait_for("the QOS's MaxWall reason", Duration::from_secs(20), || {
        (reason(&c, q) == "QOSMaxWallDurationPerJobLimit").then_some(())
    });
    let before = c.ok("gctl", &["qos", "show", "--json"]);
    let o = c.cli("gctl", &["qos", "modify", "short", "--fairshare", "3"]);
    assert!(
        stderr(&o).contains("Fairshare cannot be set on a QOS"),
        "{}",
        stderr(&o)
    );
    let o = c.cli("gctl", &["account", "delete", "lab"]);
    assert!(stderr(&o).contains("sub-account"), "{}", stderr(&o));
    assert_eq!(c.ok("gctl", &["qos", "show", "--json"]), before);
}
