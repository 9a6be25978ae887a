//! Slurm's command names: which gsched tool answers to which Slurm name, the links
//! `gctl slurm-names DIR` makes, and `scontrol`'s and `sacctmgr`'s commands translated
//! to `gctl`'s.

use std::path::{Path, PathBuf};

/// Slurm's name and the gsched tool that behaves as it.
pub const NAMES: [(&str, &str); 12] = [
    ("sbatch", "gsub"),
    ("srun", "grun"),
    ("salloc", "galloc"),
    ("squeue", "gqueue"),
    ("sinfo", "ginfo"),
    ("scancel", "gcancel"),
    ("sacct", "gacct"),
    ("seff", "gacct"),
    ("sreport", "greport"),
    ("sshare", "gctl"),
    ("scontrol", "gctl"),
    ("sacctmgr", "gctl"),
];

/// The name this process was started under (the last part of argv[0]).
pub fn invoked_as() -> String {
    std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default()
}

/// Why the Slurm-named links could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("{0} exists and is not a link (is Slurm installed there?); choose another directory")]
    NotALink(String),
    #[error("no gsched tool found in {0}")]
    NoTools(String),
}

/// A Slurm command line gsched cannot translate; the message is its usage.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Untranslatable(pub String);

/// Makes `dir/sbatch -> BIN/gsub` and the others, for the tools found in `bin` (a tool
/// that is not there gets no link, and is named in the second list); replaces links of
/// those names already there, never other files. Returns the links made.
pub fn make_links(dir: &Path, bin: &Path) -> Result<(Vec<PathBuf>, Vec<&'static str>), LinkError> {
    let io = |action: &'static str, path: &Path| {
        let path = path.display().to_string();
        move |source| LinkError::Io {
            action,
            path,
            source,
        }
    };
    std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    let mut made = Vec::new();
    let mut missing = Vec::new();
    for (slurm, tool) in NAMES {
        let target = bin.join(tool);
        if !target.exists() {
            missing.push(tool);
            continue;
        }
        let link = dir.join(slurm);
        match std::fs::symlink_metadata(&link) {
            Ok(m) if m.file_type().is_symlink() => {
                std::fs::remove_file(&link).map_err(io("replace", &link))?
            }
            Ok(_) => {
                return Err(LinkError::NotALink(link.display().to_string()));
            }
            Err(_) => {}
        }
        std::os::unix::fs::symlink(&target, &link).map_err(io("link", &link))?;
        made.push(link);
    }
    if made.is_empty() {
        return Err(LinkError::NoTools(bin.display().to_string()));
    }
    Ok((made, missing))
}

/// What an `scontrol` command line becomes.
#[derive(Debug, PartialEq, Eq)]
pub enum Scontrol {
    /// Answered here, without a controller (`show hostnames`, `show hostlist`).
    Print(String),
    /// The same request as this `gctl` command line.
    Gctl(Vec<String>),
}

/// Translates scontrol's arguments (after the program name). `nodelist` and `job` are
/// `SLURM_JOB_NODELIST` and `SLURM_JOB_ID`, the defaults inside a job.
pub fn scontrol(
    args: &[String],
    nodelist: Option<&str>,
    job: Option<&str>,
) -> Result<Scontrol, Untranslatable> {
    translate_scontrol(args, nodelist, job).map_err(Untranslatable)
}

/// What gsched's scontrol answers (its `--help`).
const SCONTROL_ANSWERS: &str = "show hostnames|hostlist|job|node|reservation, hold, release, requeue, update NodeName=.. State=DRAIN|RESUME Reason=.., update JobId=.. TimeLimit=.., create|update|delete reservation, ping, token (see gctl --help)";

fn translate_scontrol(
    args: &[String],
    nodelist: Option<&str>,
    job: Option<&str>,
) -> Result<Scontrol, String> {
    use crate::slurm_options::{Tool, given_longs, refusal};
    use clap::{CommandFactory, FromArgMatches};
    let cmd = crate::args::scontrol::Args::command();
    let m = cmd
        .clone()
        .try_get_matches_from(std::iter::once("scontrol".to_string()).chain(args.iter().cloned()))
        .map_err(|e| {
            e.to_string()
                .trim_start_matches("error: ")
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })?;
    let given = given_longs(&cmd, &m);
    if let Some(message) = refusal(Tool::Scontrol, given.iter().map(String::as_str)) {
        return Err(message);
    }
    let opts = crate::args::scontrol::Args::from_arg_matches(&m).map_err(|e| e.to_string())?;
    if opts.help {
        return Ok(Scontrol::Print(format!(
            "gsched's scontrol answers: {SCONTROL_ANSWERS}\n"
        )));
    }
    if opts.version {
        return Ok(Scontrol::Print(format!(
            "scontrol (gsched) {}\n",
            env!("CARGO_PKG_VERSION")
        )));
    }
    let mut out = translate_words(&opts.words, nodelist, job)?;
    if let Scontrol::Gctl(v) = &mut out {
        if opts.oneliner && v.first().is_some_and(|w| w == "show") {
            v.push("--oneliner".into());
        }
        // Informational messages are those of actions; what is shown stays.
        if opts.quiet && !v.iter().take(2).any(|w| w == "show" || w == "status") {
            v.push("--quiet".into());
        }
    }
    Ok(out)
}

fn translate_words(
    args: &[String],
    nodelist: Option<&str>,
    job: Option<&str>,
) -> Result<Scontrol, String> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let lower: Vec<String> = words.iter().map(|w| w.to_ascii_lowercase()).collect();
    let gctl = |v: Vec<&str>| Ok(Scontrol::Gctl(v.into_iter().map(String::from).collect()));
    match lower
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["show", "hostnames", ..] | ["show", "hostname", ..] => {
            let list = words.get(2).copied().or(nodelist).ok_or(
                "scontrol show hostnames: give a host list, or run it in a job (SLURM_JOB_NODELIST)",
            )?;
            let hosts = gsched_types::hostlist::expand(list)?;
            Ok(Scontrol::Print(
                hosts.iter().map(|h| format!("{h}\n")).collect(),
            ))
        }
        ["show", "hostlist", _, ..] | ["show", "hostlistsorted", _, ..] => {
            let mut hosts = Vec::new();
            for part in words[2].split(',').filter(|p| !p.is_empty()) {
                hosts.extend(gsched_types::hostlist::expand(part)?);
            }
            if lower[1] == "hostlistsorted" {
                hosts.sort();
            }
            Ok(Scontrol::Print(format!(
                "{}\n",
                gsched_types::hostlist::compress(&hosts)
            )))
        }
        ["show", "job" | "jobid" | "jobs", rest @ ..] => {
            let id = rest
                .first()
                .map(|_| {
                    words[2]
                        .trim_start_matches("JobId=")
                        .trim_start_matches("jobid=")
                })
                .or(job)
                .ok_or("scontrol show job: name a job (gqueue lists them all)")?;
            gctl(vec!["show", "job", id])
        }
        ["show", "node" | "nodes", _, ..] => gctl(vec!["show", "node", words[2]]),
        ["show", "node" | "nodes"] => {
            Err("scontrol show node: name a node (ginfo lists them all)".into())
        }
        [verb @ ("hold" | "uhold" | "release" | "requeue"), _, ..] => {
            let mut v = vec![if *verb == "uhold" { "hold" } else { *verb }];
            v.extend(words[1..].iter().map(|w| w.trim_start_matches("JobId=")));
            gctl(v)
        }
        ["create", "reservation" | "res", rest @ ..] => {
            reservation("create", &words[2..2 + rest.len()])
        }
        ["update", "reservation" | "res", rest @ ..] => {
            reservation("update", &words[2..2 + rest.len()])
        }
        ["update", first, ..] if first.starts_with("reservationname=") => {
            reservation("update", &words[1..])
        }
        ["delete", "reservation" | "res", _] => gctl(vec![
            "reservation",
            "delete",
            words[2].split_once('=').map_or(words[2], |(_, v)| v),
        ]),
        ["delete", first] if first.starts_with("reservationname=") => gctl(vec![
            "reservation",
            "delete",
            words[1].split_once('=').map_or(words[1], |(_, v)| v),
        ]),
        ["show", "reservation" | "reservations" | "res"] => gctl(vec!["reservation", "show"]),
        ["show", "reservation" | "reservations" | "res", _, ..] => gctl(vec![
            "reservation",
            "show",
            words[2].split_once('=').map_or(words[2], |(_, v)| v),
        ]),
        ["update", ..] => update(&words[1..]),
        ["ping"] => gctl(vec!["status"]),
        ["token", rest @ ..] => {
            let mut v = vec!["token"];
            for w in rest {
                if let Some(l) = w.strip_prefix("lifespan=") {
                    v.extend(["--lifetime", l]);
                }
            }
            gctl(v)
        }
        _ => Err(format!(
            "scontrol {}: not supported; gsched answers {SCONTROL_ANSWERS}",
            words.join(" ")
        )),
    }
}

/// `scontrol create|update reservation KEY=VALUE...` as `gctl reservation VERB NAME ...`.
fn reservation(verb: &str, pairs: &[&str]) -> Result<Scontrol, String> {
    let mut name = None;
    let mut out: Vec<String> = Vec::new();
    for p in pairs {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("scontrol {verb} reservation: '{p}' is not KEY=VALUE"))?;
        let flag = match k.to_ascii_lowercase().as_str() {
            "reservationname" | "reservation" | "name" => {
                name = Some(v.to_string());
                continue;
            }
            "starttime" => "--start",
            "endtime" => "--end",
            "duration" => "--duration",
            "users" | "user" => "--users",
            "accounts" | "account" => "--accounts",
            "nodes" | "nodelist" => "--nodes",
            "nodecnt" | "nodecount" => "--node-count",
            "flags" => "--flags",
            "tres" | "tresperjob" => {
                out.extend(["--gpus".into(), tres_gpus(v)?]);
                continue;
            }
            "partitionname" | "partition" => continue,
            other => {
                return Err(format!(
                    "scontrol {verb} reservation: {other} is not supported (gsched takes ReservationName, StartTime, EndTime, Duration, Users, Accounts, Nodes, NodeCnt, TRES=gres/gpu=N, Flags)"
                ));
            }
        };
        out.extend([flag.to_string(), v.to_string()]);
    }
    let name = name.ok_or(format!(
        "scontrol {verb} reservation: give ReservationName="
    ))?;
    let mut argv = vec!["reservation".to_string(), verb.to_string(), name];
    argv.extend(out);
    Ok(Scontrol::Gctl(argv))
}

/// The GPU count of a `TRES=` list (`gres/gpu=4`, `gres/gpu:a100=4`); other TRES refused.
fn tres_gpus(list: &str) -> Result<String, String> {
    let mut gpus = None;
    for item in list.split(',') {
        let (k, v) = item
            .split_once('=')
            .ok_or_else(|| format!("TRES={list}: '{item}' is not NAME=COUNT"))?;
        if k.to_ascii_lowercase().starts_with("gres/gpu") {
            v.parse::<u32>()
                .map_err(|_| format!("TRES={list}: '{v}' is not a GPU count"))?;
            gpus = Some(v.to_string());
        } else if !k.eq_ignore_ascii_case("cpu") {
            return Err(format!(
                "TRES={list}: gsched reserves GPUs (gres/gpu=N) or whole nodes (Nodes=, NodeCnt=)"
            ));
        }
    }
    gpus.ok_or_else(|| format!("TRES={list}: name gres/gpu=N"))
}

/// `scontrol update KEY=VALUE...`: node drain and resume.
fn update(pairs: &[&str]) -> Result<Scontrol, String> {
    let mut node = None;
    let mut state = None;
    let mut reason = None;
    let mut job = None;
    let mut time = None;
    for p in pairs {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("scontrol update: '{p}' is not KEY=VALUE"))?;
        match k.to_ascii_lowercase().as_str() {
            "nodename" | "node" => node = Some(v),
            "state" => state = Some(v.to_ascii_uppercase()),
            "reason" => reason = Some(v),
            "jobid" | "job" => job = Some(v),
            "timelimit" => time = Some(v),
            _ => return Err(format!("scontrol update: {k} is not supported")),
        }
    }
    if let Some(job) = job {
        let time = time.ok_or(
            "scontrol update JobId=...: gsched can change TimeLimit= (other fields: cancel and resubmit, or hold/release)",
        )?;
        return Ok(Scontrol::Gctl(vec![
            "update".into(),
            job.to_string(),
            "--time".into(),
            time.to_string(),
        ]));
    }
    let node = node.ok_or("scontrol update: give NodeName= or JobId=")?;
    let v = match state.as_deref() {
        Some("DRAIN" | "DOWN") => vec![
            "node".into(),
            "drain".into(),
            node.to_string(),
            "--reason".into(),
            reason
                .ok_or("scontrol update State=DRAIN needs Reason=")?
                .to_string(),
        ],
        Some("RESUME" | "IDLE" | "UNDRAIN") => {
            vec!["node".into(), "resume".into(), node.to_string()]
        }
        _ => return Err("scontrol update NodeName=..: State=DRAIN or State=RESUME".into()),
    };
    Ok(Scontrol::Gctl(v))
}

/// Translates sacctmgr's arguments (after the program name) into `gctl`'s:
/// `add|modify|delete|show account|user|qos NAME [where K=V...] [set] K=V...`.
pub fn sacctmgr(args: &[String]) -> Result<Vec<String>, Untranslatable> {
    translate_sacctmgr(args).map_err(Untranslatable)
}

fn translate_sacctmgr(args: &[String]) -> Result<Vec<String>, String> {
    let words: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| {
            !matches!(
                *a,
                "-i" | "--immediate"
                    | "-n"
                    | "--noheader"
                    | "-P"
                    | "--parsable2"
                    | "-p"
                    | "--parsable"
            )
        })
        .collect();
    let usage =
        "sacctmgr: gsched takes add|modify|delete|show account|user|qos (and add coordinator)";
    let (verb, entity, rest) = match words.as_slice() {
        [v, e, rest @ ..] => (v.to_ascii_lowercase(), e.to_ascii_lowercase(), rest),
        _ => return Err(usage.into()),
    };
    let verb = match verb.as_str() {
        "add" | "create" => "add",
        "modify" | "update" => "modify",
        "delete" | "remove" => "delete",
        "show" | "list" => "show",
        _ => return Err(usage.into()),
    };
    let entity = match entity.trim_end_matches('s') {
        "account" => "account",
        "user" => "user",
        "qo" => "qos",
        "association" | "assoc" if verb == "show" => "user",
        "coordinator" if verb == "add" => return coordinator(rest),
        _ => return Err(usage.into()),
    };
    if verb == "show" {
        let json = rest.iter().any(|w| w.eq_ignore_ascii_case("--json"));
        let mut argv = vec![entity.to_string(), "show".into()];
        if json {
            argv.push("--json".into());
        }
        return Ok(argv);
    }
    let mut name = None;
    let mut account = None;
    let mut out: Vec<String> = Vec::new();
    for w in rest {
        if w.eq_ignore_ascii_case("where") || w.eq_ignore_ascii_case("set") {
            continue;
        }
        let Some((k, v)) = w.split_once('=') else {
            name = Some(w.to_string());
            continue;
        };
        let key = k.to_ascii_lowercase();
        let flag = match key.as_str() {
            "name" | "names" | "user" | "users" => {
                name = Some(v.to_string());
                continue;
            }
            "account" | "accounts" if entity == "user" && verb == "delete" => {
                account = Some(v.to_string());
                continue;
            }
            "account" | "accounts" if entity == "user" && verb == "add" => "--account",
            "account" | "accounts" if entity == "account" => {
                name = Some(v.to_string());
                continue;
            }
            "account" | "accounts" | "cluster" | "clusters" | "description" | "organization"
            | "partition" | "flags" => continue,
            "parent" => "--parent",
            "fairshare" | "shares" => "--fairshare",
            "grptres" => {
                out.extend(["--grp-gpus".into(), tres_limit(v)?]);
                continue;
            }
            "maxtresperuser" | "maxtrespu" => {
                out.extend(["--max-gpus-per-user".into(), tres_limit(v)?]);
                continue;
            }
            "maxjobs" | "maxjobsperuser" | "maxjobspu" => "--max-jobs",
            "maxsubmitjobs" | "maxsubmit" | "maxsubmitjobsperuser" | "maxsubmitpu" => {
                "--max-submit-jobs"
            }
            "maxwall" | "maxwalldurationperjob" => "--max-wall",
            "defaultaccount" => "--default-account",
            "priority" => "--priority",
            "preempt" => "--preempt",
            other => {
                return Err(format!(
                    "sacctmgr: {other} is not supported (gsched takes Name, Parent, Fairshare, GrpTRES=gres/gpu=N, MaxTRESPerUser=gres/gpu=N, MaxJobs, MaxSubmitJobs, MaxWall, Account, DefaultAccount, Priority, Preempt)"
                ));
            }
        };
        out.extend([flag.to_string(), v.to_string()]);
    }
    let name = name.ok_or(format!("sacctmgr {verb} {entity}: name one"))?;
    let mut argv = vec![entity.to_string(), verb.to_string(), name];
    if let Some(a) = account {
        argv.extend(["--account".into(), a]);
    }
    argv.extend(out);
    Ok(argv)
}

/// `sacctmgr add coordinator account=A names=u,v`: the account's coordinators become these.
fn coordinator(pairs: &[&str]) -> Result<Vec<String>, String> {
    let mut account = None;
    let mut names = None;
    for p in pairs {
        match p.split_once('=').map(|(k, v)| (k.to_ascii_lowercase(), v)) {
            Some((k, v)) if k.starts_with("account") => account = Some(v.to_string()),
            Some((k, v)) if k.starts_with("name") || k.starts_with("user") => {
                names = Some(v.to_string())
            }
            _ => {}
        }
    }
    match (account, names) {
        (Some(a), Some(n)) => Ok(vec![
            "account".into(),
            "modify".into(),
            a,
            "--coordinators".into(),
            n,
        ]),
        _ => Err("sacctmgr add coordinator: give Account=A Names=USER,...".into()),
    }
}

/// A GPU limit in a TRES list (`gres/gpu=8`, `gres/gpu=-1` to clear).
fn tres_limit(list: &str) -> Result<String, String> {
    if list
        .split(',')
        .any(|i| i.to_ascii_lowercase().starts_with("gres/gpu") && i.ends_with("=-1"))
    {
        return Ok("-1".into());
    }
    tres_gpus(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &str) -> Result<Scontrol, Untranslatable> {
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        scontrol(&args, Some("gpu[01-02],cpu7"), Some("42"))
    }

    #[test]
    fn reservation_lines_become_gctl_reservation() {
        let g = |line: &str| match run(line).unwrap() {
            Scontrol::Gctl(v) => v.join(" "),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            g(
                "create reservation ReservationName=maint StartTime=now+1hour Duration=120 Users=root Nodes=n[1-2] Flags=MAINT,IGNORE_JOBS"
            ),
            "reservation create maint --start now+1hour --duration 120 --users root --nodes n[1-2] --flags MAINT,IGNORE_JOBS"
        );
        assert_eq!(
            g(
                "create res reservationname=dl starttime=2026-12-24T08:00 endtime=2026-12-25T08:00 accounts=nlp TRES=gres/gpu=4"
            ),
            "reservation create dl --start 2026-12-24T08:00 --end 2026-12-25T08:00 --accounts nlp --gpus 4"
        );
        assert_eq!(
            g("update ReservationName=dl Users=alice,bob"),
            "reservation update dl --users alice,bob"
        );
        assert_eq!(g("delete ReservationName=dl"), "reservation delete dl");
        assert_eq!(g("delete reservation dl"), "reservation delete dl");
        assert_eq!(g("show reservation"), "reservation show");
        assert_eq!(g("show res dl"), "reservation show dl");
        assert!(
            run("create reservation Duration=10 Users=root NodeCnt=1")
                .unwrap_err()
                .0
                .contains("ReservationName")
        );
        assert!(
            run("create reservation ReservationName=x Licenses=a:1")
                .unwrap_err()
                .0
                .contains("licenses")
        );
        assert!(
            run("create reservation ReservationName=x TRES=cpu=4,mem=1G")
                .unwrap_err()
                .0
                .contains("gres/gpu")
        );
    }

    #[test]
    fn sacctmgr_lines_become_gctl_account_user_qos() {
        let g = |line: &str| {
            let args: Vec<String> = line.split_whitespace().map(String::from).collect();
            sacctmgr(&args).map(|v| v.join(" "))
        };
        assert_eq!(
            g("-i add account nlp Parent=lab Fairshare=10 GrpTRES=gres/gpu=8 Description=x")
                .unwrap(),
            "account add nlp --parent lab --fairshare 10 --grp-gpus 8"
        );
        assert_eq!(
            g("add user alice Account=nlp DefaultAccount=nlp MaxJobs=2").unwrap(),
            "user add alice --account nlp --default-account nlp --max-jobs 2"
        );
        assert_eq!(
            g("modify account where name=nlp set GrpTRES=gres/gpu=-1 MaxWall=1-00:00:00").unwrap(),
            "account modify nlp --grp-gpus -1 --max-wall 1-00:00:00"
        );
        assert_eq!(
            g("-i modify qos normal set MaxTRESPerUser=gres/gpu=4 MaxSubmitJobsPerUser=10 Priority=5").unwrap(),
            "qos modify normal --max-gpus-per-user 4 --max-submit-jobs 10 --priority 5"
        );
        assert_eq!(
            g("delete user where name=alice account=nlp").unwrap(),
            "user delete alice --account nlp"
        );
        assert_eq!(g("remove account nlp").unwrap(), "account delete nlp");
        assert_eq!(g("show assoc").unwrap(), "user show");
        assert_eq!(g("list qos").unwrap(), "qos show");
        assert_eq!(
            g("add coordinator account=nlp names=carol").unwrap(),
            "account modify nlp --coordinators carol"
        );
        assert!(
            g("add account x GrpTRESMins=gres/gpu=10")
                .unwrap_err()
                .0
                .contains("not supported")
        );
        assert!(
            g("add cluster c")
                .unwrap_err()
                .0
                .contains("account|user|qos")
        );
        assert!(g("add user").unwrap_err().0.contains("name one"));
    }

    #[test]
    fn scontrol_lines_from_real_scripts() {
        assert_eq!(
            run("show hostnames").unwrap(),
            Scontrol::Print("gpu01\ngpu02\ncpu7\n".into())
        );
        assert_eq!(
            run("show hostnames n[1-3]").unwrap(),
            Scontrol::Print("n1\nn2\nn3\n".into())
        );
        assert_eq!(
            run("show hostlist n1,n2,n3").unwrap(),
            Scontrol::Print("n[1-3]\n".into())
        );
        let g = |v: &[&str]| Scontrol::Gctl(v.iter().map(|s| s.to_string()).collect());
        assert_eq!(run("show job").unwrap(), g(&["show", "job", "42"]));
        assert_eq!(run("-d show job 7").unwrap(), g(&["show", "job", "7"]));
        assert_eq!(run("requeue 42").unwrap(), g(&["requeue", "42"]));
        assert_eq!(run("hold 1,2").unwrap(), g(&["hold", "1,2"]));
        assert_eq!(
            run("token lifespan=3600").unwrap(),
            g(&["token", "--lifetime", "3600"])
        );
        assert_eq!(run("release JobId=3").unwrap(), g(&["release", "3"]));
        assert_eq!(
            run("update NodeName=n1 State=DRAIN Reason=fan").unwrap(),
            g(&["node", "drain", "n1", "--reason", "fan"])
        );
        assert_eq!(
            run("update nodename=n1 state=resume").unwrap(),
            g(&["node", "resume", "n1"])
        );
        assert_eq!(
            run("update JobId=3 TimeLimit=1:00:00").unwrap(),
            g(&["update", "3", "--time", "1:00:00"])
        );
        for bad in [
            "update JobId=3 Partition=big",
            "show partition",
            "reconfigure",
            "update NodeName=n1 State=DRAIN",
        ] {
            assert!(run(bad).is_err(), "{bad}");
        }
        assert!(scontrol(&["show".into(), "hostnames".into()], None, None).is_err());
    }

    /// The options scontrol takes before its command (scontrol's getopt permutes, so
    /// they may come after it too): -o puts each record on one line, -Q silences the
    /// messages of actions, -d/-a/-M change nothing here, -u is refused.
    #[test]
    fn scontrol_options_before_the_command() {
        let g = |v: &[&str]| Scontrol::Gctl(v.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            run("-o show job 7").unwrap(),
            g(&["show", "job", "7", "--oneliner"])
        );
        assert_eq!(
            run("--oneliner show node n1").unwrap(),
            g(&["show", "node", "n1", "--oneliner"])
        );
        assert_eq!(
            run("show job 7 -o").unwrap(),
            g(&["show", "job", "7", "--oneliner"])
        );
        assert_eq!(run("-o hold 7").unwrap(), g(&["hold", "7"]));
        assert_eq!(run("-Q hold 7").unwrap(), g(&["hold", "7", "--quiet"]));
        assert_eq!(run("-Q -d show job 7").unwrap(), g(&["show", "job", "7"]));
        assert_eq!(
            run("-Q show reservation").unwrap(),
            g(&["reservation", "show"])
        );
        assert_eq!(
            run("-dav -M here -F show job 7").unwrap(),
            g(&["show", "job", "7"])
        );
        let refused = run("-u 1000 hold 7").unwrap_err().to_string();
        assert!(refused.contains("--uid is not supported"), "{refused}");
        assert!(run("--bogus show job 7").is_err());
        assert!(
            matches!(run("--help").unwrap(), Scontrol::Print(t) if t.contains("show hostnames"))
        );
        assert!(
            matches!(run("-V").unwrap(), Scontrol::Print(t) if t.starts_with("scontrol (gsched) "))
        );
    }
}
