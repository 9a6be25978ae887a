//! Real-world Slurm scripts, written in the styles of the big public training repositories
//! and run unmodified through Slurm's names on a local two-node cluster: `srun torchrun`
//! with the head node from `scontrol show hostnames`; `srun python` with RANK/WORLD_SIZE/
//! LOCAL_RANK from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID; an `accelerate launch`-style
//! launcher given `--machine_rank $SLURM_NODEID` and `--main_process_ip`; a job array over
//! hyper-parameters; a preprocess → train → eval dependency chain. The PyTorch ones run
//! real `torchrun` (gloo) where PyTorch is installed.

use gsched_tests::{Cluster, success_stdout, torch_available, workspace};
use std::process::Command;
use std::time::Duration;

fn cluster() -> (Cluster, String) {
    let mut c = Cluster::controllers(1, &[]);
    let links = c.slurm_links();
    for n in ["n1", "n2"] {
        c.add_agent(n, "rtx4090-8gpu.json", &["--slurm-names", &links]);
    }
    (c, links)
}

/// `sbatch --parsable ARGS` through the Slurm name; the job id.
fn sbatch(c: &Cluster, links: &str, args: &[&str]) -> u64 {
    let out = Command::new(format!("{links}/sbatch"))
        .arg("--parsable")
        .args(args)
        .current_dir(c.path(""))
        .env("GSCHED_CONTROLLERS", c.controllers_arg())
        .output()
        .unwrap();
    success_stdout(&out, "sbatch")
        .trim()
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The job's output: `sbatch` names it as Slurm does.
fn output(c: &Cluster, id: u64) -> String {
    std::fs::read_to_string(c.path(&format!("slurm-{id}.out"))).unwrap_or_default()
}

/// Debian's PyTorch 1.13 (what CI installs) needs these on current Pythons (its torchrun
/// fails without an explicit --redirects); newer torchruns do not.
const OLD_TORCHRUN: &str = "--redirects 1 --tee 1 --monitor_interval 0.1";

fn allreduce() -> String {
    workspace()
        .join("examples/allreduce.py")
        .to_string_lossy()
        .into_owned()
}

#[test]
fn t10_srun_torchrun_with_the_head_node_from_scontrol() {
    if !torch_available() {
        return;
    }
    let (c, links) = cluster();
    let script = c.script(
        "torchrun.sbatch",
        &format!(
            r#"#!/bin/bash
#SBATCH --job-name=ddp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:2
#SBATCH --time=00:10:00

nodes=( $( scontrol show hostnames $SLURM_JOB_NODELIST ) )
head_node=${{nodes[0]}}
head_node_ip=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address | awk '{{print $1}}')
echo "Node IP: $head_node_ip"
export LOGLEVEL=INFO
export FORCE_GLOO=1
srun bash -c "exec /usr/bin/torchrun \
  --nnodes 2 \
  --nproc_per_node 2 \
  --node_rank \$SLURM_NODEID \
  --master_addr $head_node_ip \
  --master_port {} \
  {} {}"
"#,
            // A port no other test's job uses (the script's own 29500 + job id collided
            // with other clusters' first jobs on a shared host). The static rendezvous
            // (node rank from srun) rather than c10d: here both nodes are one machine, so
            // both of torch 1.13's c10d agents race to host the store, and when the one
            // that wins is not group rank 0 it exits at the end without waiting for the
            // others ("RuntimeError: Broken pipe" in store.get_all, 1 run in 11).
            gsched_tests::free_port(),
            OLD_TORCHRUN,
            allreduce()
        ),
    );
    let id = sbatch(&c, &links, &[&script]);
    let job = c.wait_state(id, &["COMPLETED", "FAILED"], Duration::from_secs(180));
    let out = output(&c, id);
    assert_eq!(job["state"], "COMPLETED", "{job}\n{out}");
    assert_eq!(out.matches("allreduce=6 expected=6 OK").count(), 4, "{out}");
    assert_eq!(
        out.matches("Node IP:").count(),
        1,
        "the script ran once:\n{out}"
    );
}

#[test]
fn t20_srun_python_with_rank_from_slurm_variables() {
    if !torch_available() {
        return;
    }
    let (c, links) = cluster();
    let script = c.script(
        "ranks.sbatch",
        &format!(
            r#"#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --gres=gpu:2
#SBATCH --cpus-per-task=2

first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR=$(srun -N1 -n1 -w "$first" hostname -i | awk '{{print $1}}')
export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))
export WORLD_SIZE=$SLURM_NTASKS
export FORCE_GLOO=1
srun bash -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID exec /usr/bin/python3 {}'
"#,
            allreduce()
        ),
    );
    let id = sbatch(&c, &links, &[&script]);
    let job = c.wait_state(id, &["COMPLETED", "FAILED"], Duration::from_secs(180));
    let out = output(&c, id);
    assert_eq!(job["state"], "COMPLETED", "{job}\n{out}");
    for rank in 0..4 {
        assert!(
            out.contains(&format!("rank {rank}/4 backend=gloo")),
            "rank {rank}:\n{out}"
        );
    }
    assert_eq!(out.matches("allreduce=6 expected=6 OK").count(), 4, "{out}");
}

#[test]
fn t30_a_launcher_given_machine_rank_and_main_process_ip() {
    let (c, links) = cluster();
    // An accelerate/deepspeed-style launcher: one per node, told its rank and the head.
    c.script(
        "launcher.sh",
        "#!/bin/bash\n\
         while [ $# -gt 0 ]; do case $1 in --machine_rank) rank=$2; shift 2;; --main_process_ip) ip=$2; shift 2;; --num_machines) n=$2; shift 2;; *) shift;; esac; done\n\
         echo \"launcher machine_rank=$rank of $n head=$ip on $SLURMD_NODENAME\"\n",
    );
    let script = c.script(
        "accelerate.sbatch",
        r#"#!/bin/bash
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:1

export MAIN_IP=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
srun bash -c 'bash ./launcher.sh --num_machines $SLURM_NNODES --machine_rank $SLURM_NODEID --main_process_ip $MAIN_IP train.py --lr 3e-4'
"#,
    );
    let id = sbatch(&c, &links, &[&script]);
    let job = c.wait_state(id, &["COMPLETED", "FAILED"], Duration::from_secs(60));
    let out = output(&c, id);
    assert_eq!(job["state"], "COMPLETED", "{job}\n{out}");
    assert!(
        out.contains("launcher machine_rank=0 of 2 head=n1 on n1"),
        "{out}"
    );
    assert!(
        out.contains("launcher machine_rank=1 of 2 head=n1 on n2"),
        "{out}"
    );
}

#[test]
fn t40_a_hyperparameter_array_and_a_dependency_chain() {
    let (c, links) = cluster();
    let sweep = c.script(
        "sweep.sbatch",
        r#"#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --array=0-3
#SBATCH --gres=gpu:1
#SBATCH --output=sweep-%A_%a.out
lrs=(1e-3 3e-4 1e-4 3e-5)
echo "task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID lr=${lrs[$SLURM_ARRAY_TASK_ID]}"
"#,
    );
    let array = sbatch(&c, &links, &[&sweep]);
    // preprocess → train (afterok) → eval (afterok), submitted at once as people do.
    let stage = |name: &str, body: &str| {
        c.script(
            &format!("{name}.sbatch"),
            &format!("#!/bin/bash\n#SBATCH --job-name={name}\n#SBATCH --gres=gpu:1\n{body}\n"),
        )
    };
    let pre = sbatch(
        &c,
        &links,
        &[&stage("pre", "sleep 1; echo data > data.txt")],
    );
    let train = sbatch(
        &c,
        &links,
        &[
            &format!("--dependency=afterok:{pre}"),
            &stage(
                "train",
                "cat data.txt > model.txt; echo trained >> model.txt",
            ),
        ],
    );
    let eval = sbatch(
        &c,
        &links,
        &[
            &format!("--dependency=afterok:{train}"),
            &stage("eval", "grep -c . model.txt > eval.txt"),
        ],
    );
    let j = c.wait_state(
        eval,
        &["COMPLETED", "FAILED", "CANCELLED"],
        Duration::from_secs(90),
    );
    assert_eq!(j["state"], "COMPLETED", "{j}");
    assert_eq!(std::fs::read_to_string(c.path("eval.txt")).unwrap(), "2\n");
    let starts: Vec<u64> = [pre, train, eval]
        .iter()
        .map(|id| c.job(*id).unwrap()["start_ms"].as_u64().unwrap())
        .collect();
    assert!(starts[0] < starts[1] && starts[1] < starts[2], "{starts:?}");
    // The array: four tasks, each its own learning rate, in its own %A_%a file.
    let lrs = ["1e-3", "3e-4", "1e-4", "3e-5"];
    for (task, lr) in lrs.iter().enumerate() {
        let path = c.path(&format!("sweep-{array}_{task}.out"));
        let text =
            gsched_tests::wait_for("the sweep task's output", Duration::from_secs(60), || {
                std::fs::read_to_string(&path)
                    .ok()
                    .filter(|t| t.contains("lr="))
            });
        assert_eq!(text, format!("task {task} of {array} lr={lr}\n"));
    }
}

/// A sweep inside one allocation, as people run it (`srun --exact --gres=gpu:1 ... &` per
/// run, then `wait`): each run gets a GPU of its own, a step wanting more GPUs than are
/// free waits for them as srun does, an `--overlap` step sees them all at once, and one
/// asking for more than the job has is refused with a message.
#[test]
fn t50_concurrent_steps_each_take_their_own_gpus() {
    let (c, links) = cluster();
    let script = c.script(
        "sweep-steps.sbatch",
        r#"#!/bin/bash
#SBATCH -N 1
#SBATCH -n 4
#SBATCH --gres=gpu:4
echo "job gpus $SLURM_JOB_GPUS"
for i in 0 1 2 3; do
    srun --exact -n1 --gres=gpu:1 bash -c "echo \$CUDA_VISIBLE_DEVICES > run$i.gpu; sleep 3; date +%s.%N > run$i.end" &
done
sleep 1.5
srun --exact -n1 --gres=gpu:2 bash -c 'echo $CUDA_VISIBLE_DEVICES > pair.gpu; date +%s.%N > pair.start' 2> pair.err &
srun --overlap -n1 bash -c 'echo $CUDA_VISIBLE_DEVICES > overlap.gpu; date +%s.%N > overlap.start'
srun -n1 --gres=gpu:5 true 2> five.err; echo "five exit $?"
wait
"#,
    );
    let id = sbatch(&c, &links, &[&script]);
    let j = c.wait_state(
        id,
        &["COMPLETED", "FAILED", "CANCELLED"],
        Duration::from_secs(90),
    );
    assert_eq!(j["state"], "COMPLETED", "{j}\n{}", output(&c, id));
    let read = |f: &str| std::fs::read_to_string(c.path(f)).unwrap_or_default();
    let num = |f: &str| read(f).trim().parse::<f64>().unwrap_or(f64::NAN);
    let job_gpus = output(&c, id)
        .lines()
        .find_map(|l| l.strip_prefix("job gpus "))
        .unwrap_or_default()
        .to_string();
    let mut runs: Vec<String> = (0..4)
        .map(|i| read(&format!("run{i}.gpu")).trim().into())
        .collect();
    runs.sort();
    let mut all: Vec<String> = job_gpus.split(',').map(String::from).collect();
    all.sort();
    assert_eq!(runs, all, "each run its own GPU; job has {job_gpus}");
    // The pair waited for two runs to end, and said so as srun does.
    let last_run_end = (0..4)
        .map(|i| num(&format!("run{i}.end")))
        .fold(f64::MIN, f64::max);
    let first_run_end = (0..4)
        .map(|i| num(&format!("run{i}.end")))
        .fold(f64::MAX, f64::min);
    assert!(
        num("pair.start") >= first_run_end,
        "pair started before any run ended"
    );
    assert!(
        read("pair.err")
            .contains("step creation temporarily disabled, retrying (Requested nodes are busy)"),
        "{}",
        read("pair.err")
    );
    assert_eq!(read("pair.gpu").trim().split(',').count(), 2);
    // The overlapping step did not wait, and saw every GPU of the job.
    assert!(num("overlap.start") < first_run_end, "overlap waited");
    assert_eq!(read("overlap.gpu").trim(), job_gpus);
    assert!(last_run_end.is_finite());
    assert!(output(&c, id).contains("five exit 1"), "{}", output(&c, id));
    assert!(
        read("five.err").contains("at most 4"),
        "{}",
        read("five.err")
    );
}
