//! `gsub`'s options: sbatch's names (with its unambiguous abbreviations, [`flags`]),
//! `#SBATCH` and `#GSUB` directives read from the script ([`directives`]; the command line
//! wins), and the resolution of all of it into a [`JobSpec`](gsched_types::job::JobSpec)
//! the way sbatch resolves it ([`resolve`]). Options sbatch has that gsched does not act
//! on yet are accepted with a warning that names them; options sbatch does not know are
//! refused.

pub mod directives;
pub mod flags;
pub mod resolve;
pub mod sources;

pub use directives::{DirectiveError, directives, split_words};
pub use flags::SubArgs;
pub use resolve::{ResolveError, SubmitContext, dry_run_json, resolve, wider_node_counts};

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::collections::BTreeMap;

    fn ctx() -> SubmitContext {
        let mut env = BTreeMap::new();
        env.insert("PATH".into(), "/usr/bin".into());
        env.insert("NCCL_DEBUG".into(), "INFO".into());
        SubmitContext {
            cwd: "/home/a".into(),
            env,
            user: "alice".into(),
            umask: 0o022,
            now: chrono::TimeZone::timestamp_millis_opt(&chrono::Local, 1_800_000_000_000).unwrap(),
            host: Some("login1".into()),
            read_file: |p| match p.file_name().and_then(|n| n.to_str()) {
                Some("nodes.txt") => Ok(b"n[1-2]\nn1 n3,n4\n".to_vec()),
                Some("env0") => Ok(b"FOO=bar baz\0EMPTY=\0".to_vec()),
                _ => Err(std::io::Error::from(std::io::ErrorKind::NotFound)),
            },
            as_sbatch: false,
            soft_limit: |n| (n == "STACK").then_some(8 << 20),
            login_env: |user, how| {
                assert!(how.login);
                Ok([
                    ("PATH".to_string(), "/login/bin".to_string()),
                    ("MODULEPATH".to_string(), format!("/home/{user}/modules")),
                ]
                .into_iter()
                .collect())
            },
        }
    }

    fn parse_args(v: &[&str]) -> SubArgs {
        SubArgs::try_parse_from(std::iter::once("gsub").chain(v.iter().copied())).unwrap()
    }

    /// Each as sbatch 22.05 exited on the Slurm peer: 255 where the option's own parser
    /// refuses the value ("Invalid --time specification"), 1 for a later check.
    #[test]
    fn a_refused_value_exits_as_sbatch_does() {
        let status = |v: &[&str]| {
            let e = resolve(&parse_args(v), None, None, &ctx()).unwrap_err();
            (e.exit_status(), e.to_string())
        };
        for (words, want) in [
            (&["--time=abc", "--wrap=true"][..], 255),
            (&["--mem=abc", "--wrap=true"], 255),
            (&["--mem-per-gpu=x", "--wrap=true"], 255),
            (&["--begin=garbage", "--wrap=true"], 255),
            (&["--deadline=garbage", "--wrap=true"], 255),
            (&["--time-min=abc", "--wrap=true"], 255),
            (&["--mail-type=bogus", "--wrap=true"], 255),
            (&["--kill-on-invalid-dep=maybe", "--wrap=true"], 255),
            (&["--no-kill=x", "--wrap=true"], 255),
            (&["--distribution=bogus", "--wrap=true"], 255),
            (&["--exclusive=bogus", "--wrap=true"], 255),
            (&["-n", "0", "--wrap=true"], 1),
            (&["--hint=bogus", "--wrap=true"], 1),
            (&["--mem=1G", "--mem-per-cpu=1", "--wrap=true"], 1),
        ] {
            assert_eq!(status(words).0, want, "{words:?}: {}", status(words).1);
        }
    }

    #[test]
    fn directives_stop_at_first_command_and_cli_wins() {
        let script = "#!/bin/bash\n#SBATCH -N 2 --gpus-per-node=4 # two nodes\n#SBATCH --job-name 'my job'\n# plain comment\n#GSUB --time=1:00:00\necho hi\n#SBATCH --nodes=9\n";
        let d = directives(script).unwrap();
        assert_eq!(
            d,
            vec![
                "-N",
                "2",
                "--gpus-per-node=4",
                "--job-name",
                "my job",
                "--time=1:00:00"
            ]
        );
        let mut argv = vec!["gsub".to_string()];
        argv.extend(d);
        argv.extend(["-N".to_string(), "3".to_string(), "train.sh".to_string()]);
        let args = SubArgs::try_parse_from(argv).unwrap();
        let spec = resolve(&args, Some(script.into()), Some("train.sh"), &ctx()).unwrap();
        assert_eq!(spec.nodes, 3, "the command line wins");
        assert_eq!(spec.gpus_per_node, 4);
        assert_eq!(spec.name, "my job");
        assert_eq!(spec.time_limit_s, Some(3600));
    }

    #[test]
    fn gpus_per_task_resolves_per_node() {
        let a = parse_args(&[
            "--ntasks-per-node=2",
            "--gpus-per-task=2",
            "-N",
            "2",
            "x.sh",
        ]);
        let s = resolve(&a, Some("#!/bin/sh\ntrue".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!((s.gpus_per_node, s.ntasks, s.ntasks_per_node), (4, 4, 2));
        let a = parse_args(&["--gres=gpu:a100:8", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!((s.gpus_per_node, s.gpu_type.as_deref()), (8, Some("a100")));
        let a = parse_args(&["--gres=gpu:8", "--gpus-per-node=4", "x.sh"]);
        let e = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap_err();
        assert_eq!(
            e,
            ResolveError::GpuFlagsDisagree {
                flag: "--gres",
                count: 8,
                other: "--gpus-per-node",
                earlier: 4
            }
        );
    }

    // Held-out public scripts (tests/slurmdiff 49, 54): sbatch's --tasks-per-node alias,
    // and what was given (`-c 1`, --mem-per-cpu) kept for the variables Slurm sets.
    #[test]
    fn tasks_per_node_is_an_alias_and_given_cpu_and_memory_flags_are_kept() {
        let a = parse_args(&[
            "--tasks-per-node=2",
            "-c",
            "1",
            "--mem-per-cpu=512M",
            "x.sh",
        ]);
        let s = resolve(&a, Some("#!/bin/sh\ntrue".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!((s.ntasks_per_node, s.cpus_per_task), (2, 1));
        assert!(s.given.ntasks_per_node && s.given.cpus_per_task);
        assert_eq!(s.given.mem_per_cpu_mb, Some(512));
        assert_eq!(s.mem_mb, Some(1024));
        let plain = parse_args(&["x.sh"]);
        let s = resolve(&plain, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert!(!s.given.cpus_per_task && s.given.mem_per_cpu_mb.is_none());
    }

    #[test]
    fn sbatch_scripts_run_once_and_the_rest_on_every_node() {
        use gsched_types::job::LaunchMode;
        let launch = |flags: &[&str], text: &str| {
            let mut v = flags.to_vec();
            v.push("x.sh");
            resolve(&parse_args(&v), Some(text.into()), Some("x.sh"), &ctx()).map(|s| s.launch)
        };
        let slurm = "#!/bin/bash\n#SBATCH -N 2\nsrun hostname\n";
        let gsched = "#!/bin/bash\n#GSUB -N 2\nhostname\n";
        assert_eq!(launch(&[], slurm), Ok(LaunchMode::Batch));
        assert_eq!(launch(&[], gsched), Ok(LaunchMode::EachNode));
        assert_eq!(
            launch(&[], "#!/bin/sh\nhostname\n"),
            Ok(LaunchMode::EachNode)
        );
        assert_eq!(
            launch(&[], "#!/bin/sh\nhostname\n#SBATCH -N 2\n"),
            Ok(LaunchMode::EachNode),
            "directives after the first command are not directives"
        );
        assert_eq!(
            launch(&["--launch=each-node"], slurm),
            Ok(LaunchMode::EachNode)
        );
        assert_eq!(launch(&["--launch=batch"], gsched), Ok(LaunchMode::Batch));
        let as_sbatch = SubmitContext {
            as_sbatch: true,
            ..ctx()
        };
        let wrap = parse_args(&["-N", "2", "--wrap", "hostname"]);
        let s = resolve(&wrap, None, None, &as_sbatch).unwrap();
        assert_eq!(
            s.launch,
            LaunchMode::Batch,
            "sbatch --wrap runs once, as Slurm's"
        );
        let s = resolve(&wrap, None, None, &ctx()).unwrap();
        assert_eq!(
            s.launch,
            LaunchMode::EachNode,
            "gsub --wrap runs on every node"
        );
        let a = parse_args(&["--launch=batch", "--torchrun", "train.py"]);
        assert!(resolve(&a, None, None, &ctx()).is_err());
    }

    #[test]
    fn uneven_task_counts_are_for_batch_jobs_alone() {
        let slurm = "#!/bin/bash\n#SBATCH -N 2\nsrun hostname\n";
        let spec = |text: &str| {
            let a = parse_args(&["-N", "2", "-n", "3", "x.sh"]);
            resolve(&a, Some(text.into()), Some("x.sh"), &ctx())
        };
        let s = spec(slurm).unwrap();
        assert_eq!((s.ntasks, s.ntasks_per_node), (3, 2));
        let e = spec("#!/bin/sh\nhostname\n").unwrap_err();
        assert_eq!(
            e,
            ResolveError::UnevenEachNode {
                ntasks: 3,
                nodes: 2
            }
        );
    }

    #[test]
    fn export_file_and_nodefile_are_read_as_sbatch_reads_them() {
        let a = parse_args(&["--nodefile=nodes.txt", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!(
            s.nodelist,
            ["n1", "n2", "n3", "n4"],
            "each node once, in order"
        );
        assert_eq!(
            s.nodes, 4,
            "without --nodes, the job takes every node named"
        );
        let a = parse_args(&["-w", "n[1-2]", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!(
            (s.nodes, s.ntasks),
            (2, 2),
            "as sbatch: NumNodes=2 NumTasks=2"
        );
        let a = parse_args(&["-N", "1", "-w", "n[1-2]", "x.sh"]);
        assert!(resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).is_err());
        let a = parse_args(&["--nodefile=missing", "x.sh"]);
        let e = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap_err();
        assert!(
            e.to_string().starts_with("--nodefile /home/a/missing"),
            "{e}"
        );

        let a = parse_args(&["--export-file=env0", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!(s.env.get("FOO").map(String::as_str), Some("bar baz"));
        assert_eq!(s.env.get("EMPTY").map(String::as_str), Some(""));
        assert!(
            !s.env.contains_key("NCCL_DEBUG"),
            "the file stands for the shell's environment"
        );
        assert!(s.env.contains_key("PATH"));
        let a = parse_args(&["--export=NONE", "--export-file=env0", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert!(
            !s.env.contains_key("FOO"),
            "--export=NONE passes none of them, as sbatch"
        );
    }

    #[test]
    fn ntasks_per_tres_is_ntasks_per_gpu() {
        let a = parse_args(&["--ntasks-per-tres=2", "--gpus-per-node=2", "x.sh"]);
        let b = parse_args(&["--ntasks-per-gpu=2", "--gpus-per-node=2", "x.sh"]);
        let r = |a: &SubArgs| resolve(a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!(r(&a), r(&b));
        assert_eq!(r(&a).ntasks_per_gpu, Some(2));
    }

    #[test]
    fn begin_and_nice() {
        let a = parse_args(&["--begin=now+1hour", "--nice", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!((s.begin_ms, s.nice), (Some(1_800_003_600_000), 100));
        let a = parse_args(&["--begin=now-1hour", "--nice=-5", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!((s.begin_ms, s.nice), (None, -5), "a past begin is no begin");
        for bad in [
            &["--begin=someday", "x.sh"][..],
            &["--nice=lots", "x.sh"][..],
        ] {
            let a = parse_args(bad);
            assert!(resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).is_err());
        }
    }

    #[test]
    fn switches_are_carried_not_ignored() {
        let a = parse_args(&["--switches=1@2:00:00", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!(
            s.switches,
            Some(gsched_types::job::SwitchWait {
                count: 1,
                wait_s: Some(7200)
            })
        );
        let slurm = "#!/bin/sh\n#SBATCH --switches=2\nhostname\n";
        let from_script = directives::directives(slurm).unwrap();
        assert_eq!(from_script, ["--switches=2"]);
        let mut argv: Vec<&str> = from_script.iter().map(String::as_str).collect();
        argv.push("x.sh");
        let a = parse_args(&argv);
        let s = resolve(&a, Some(slurm.into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!(s.switches.map(|w| (w.count, w.wait_s)), Some((2, None)));
        let a = parse_args(&["--switches=0", "x.sh"]);
        let e = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap_err();
        assert!(e.to_string().contains("--switches '0'"), "{e}");
    }

    #[test]
    fn gpu_jobs_get_their_gpus_share_of_cpus_unless_told_otherwise() {
        let a = parse_args(&["--gpus-per-node=4", "--torchrun", "train.py"]);
        let s = resolve(&a, None, None, &ctx()).unwrap();
        assert_eq!(
            (s.cpus_per_gpu, s.cpus_per_task, s.gpu_share_cpus),
            (None, 1, true)
        );
        let a = parse_args(&["--gpus-per-node=4", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert!(s.gpu_share_cpus);
        for explicit in ["--cpus-per-task=16", "--cpus-per-gpu=2", "-c1"] {
            let a = parse_args(&["--gpus-per-node=4", explicit, "x.sh"]);
            let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
            assert!(!s.gpu_share_cpus, "{explicit} wins");
        }
        let a = parse_args(&["x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert!(
            !s.gpu_share_cpus,
            "a CPU job keeps Slurm's one CPU per task"
        );
    }

    #[test]
    fn tasks_and_tasks_per_node_without_nodes_take_the_nodes_they_need() {
        let a = parse_args(&["--ntasks=4", "--ntasks-per-node=2", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!((s.nodes, s.ntasks, s.ntasks_per_node), (2, 4, 2));
        let a = parse_args(&[
            "--ntasks=5",
            "--ntasks-per-node=2",
            "--launch=batch",
            "x.sh",
        ]);
        let s = resolve(&a, Some("#!/bin/sh\ntrue\n".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!((s.nodes, s.ntasks), (3, 5));
        let a = parse_args(&["-N", "1", "--ntasks=4", "--ntasks-per-node=2", "x.sh"]);
        assert!(resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).is_err());
    }

    #[test]
    fn node_counts_to_try_follow_what_fixes_the_count() {
        let tried = |argv: &[&str]| {
            let mut all = argv.to_vec();
            all.push("x.sh");
            let a = parse_args(&all);
            let spec = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
            wider_node_counts(&a, &spec).collect::<Vec<u32>>()
        };
        assert_eq!(
            tried(&["-n", "4"]),
            vec![2, 3, 4],
            "one node per task at most"
        );
        assert!(tried(&["-N", "2", "-n", "4"]).is_empty(), "-N fixes it");
        assert!(tried(&["-c", "8"]).is_empty(), "no tasks asked for");
        assert_eq!(tried(&["-N", "2-4"]), vec![3, 4]);
        assert_eq!(tried(&["-n", "200"]).last(), Some(&64));
    }

    #[test]
    fn abbreviations_and_unknown_options() {
        let a = parse_args(&["--err=e.log", "--job=j", "x.sh"]);
        assert_eq!(a.error.as_deref(), Some("e.log"));
        assert_eq!(a.job_name.as_deref(), Some("j"));
        assert!(SubArgs::try_parse_from(["gsub", "--frobnicate", "x.sh"]).is_err());
    }

    #[test]
    fn bad_values_are_refused_with_the_flag_named() {
        for (argv, needle) in [
            (vec!["-N", "-2", "x.sh"], "negative"),
            (vec!["-N", "two", "x.sh"], "--nodes"),
            (vec!["--time=1:2:3:4", "x.sh"], "--time"),
            (vec!["--mem=lots", "x.sh"], "memory"),
            (vec!["-n", "3", "-N", "2", "x.sh"], "multiple"),
            (
                vec!["--mem=1G", "--mem-per-gpu=1G", "x.sh"],
                "mutually exclusive",
            ),
        ] {
            let a = SubArgs::try_parse_from(std::iter::once("gsub").chain(argv.iter().copied()));
            let err = match a {
                Ok(a) => resolve(&a, Some("true".into()), Some("x.sh"), &ctx())
                    .unwrap_err()
                    .to_string(),
                Err(e) => e.to_string(),
            };
            assert!(err.contains(needle), "{argv:?}: {err}");
        }
    }

    #[test]
    fn export_keeps_explicit_values_apart() {
        let a = parse_args(&["--export=ALL,NCCL_SOCKET_IFNAME=ib0,NCCL_DEBUG", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!(
            s.env_overrides
                .get("NCCL_SOCKET_IFNAME")
                .map(String::as_str),
            Some("ib0")
        );
        assert_eq!(
            s.env_overrides.get("NCCL_DEBUG").map(String::as_str),
            Some("INFO")
        );
        assert!(s.env.contains_key("PATH"));
        let a = parse_args(&["--export=NONE", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert!(!s.env.contains_key("NCCL_DEBUG"));
    }

    #[test]
    fn get_user_env_adds_the_login_environment_under_the_submitting_one() {
        let a = parse_args(&["--get-user-env", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!(s.env["PATH"], "/usr/bin", "sbatch's own variables win");
        assert_eq!(s.env["MODULEPATH"], "/home/alice/modules");
        assert_eq!(s.env_overrides["SLURM_GET_USER_ENV"], "1");
        let a = parse_args(&["--get-user-env=10L", "--uid=bob", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert_eq!(s.env["MODULEPATH"], "/home/bob/modules");
        // Slurm 22.05: --export=NONE ignores --get-user-env.
        let a = parse_args(&["--get-user-env", "--export=NONE", "x.sh"]);
        let s = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap();
        assert!(!s.env.contains_key("MODULEPATH"));
        let a = parse_args(&["--get-user-env=soon", "x.sh"]);
        let e = resolve(&a, Some("true".into()), Some("x.sh"), &ctx()).unwrap_err();
        assert_eq!(e.exit_status(), 255, "{e}");
        let failing = SubmitContext {
            login_env: |_, _| Err("--get-user-env: no shell".into()),
            ..ctx()
        };
        let a = parse_args(&["--get-user-env", "x.sh"]);
        let e = resolve(&a, Some("true".into()), Some("x.sh"), &failing).unwrap_err();
        assert_eq!(
            (e.exit_status(), e.to_string().as_str()),
            (1, "--get-user-env: no shell")
        );
    }
}
