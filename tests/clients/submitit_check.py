"""submitit against Slurm's command names: submit, map_array, multi-node multi-task,
cancel, and requeue on timeout. Exits non-zero with what went wrong."""
import os
import sys
import time

import submitit


def add(a, b):
    return a + b


def rank_info():
    env = submitit.JobEnvironment()
    return (env.global_rank, env.num_tasks, env.node, env.num_nodes)


def sleep_long(s):
    time.sleep(s)
    return s


class Checkpointed(submitit.helpers.Checkpointable):
    """Runs past its time limit once; submitit requeues it and the second run finishes."""

    def __call__(self, marker):
        if os.path.exists(marker):
            return "second run"
        open(marker, "w").write("first")
        time.sleep(600)
        return "never"


def sacct_state(job):
    # submitit reads sacct itself; force a fresh read
    job.watcher.update()
    return job.state


def final_state(job, limit_s=60):
    """The job's state once it has ended. A result file is written before the task exits,
    so `result()` returns while sacct (Slurm's as well as gsched's) can still say RUNNING."""
    deadline = time.time() + limit_s
    while sacct_state(job) in ("PENDING", "RUNNING", "COMPLETING", "UNKNOWN") and time.time() < deadline:
        time.sleep(0.2)
    return sacct_state(job)


def main(folder):
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    ex.update_parameters(timeout_min=5, slurm_partition=os.environ.get("CHECK_PARTITION", "gpu"))

    job = ex.submit(add, 2, 3)
    assert job.result() == 5, job.result()
    state = final_state(job)
    print("submit: ok", job.job_id, state)
    assert state == "COMPLETED", state

    jobs = ex.map_array(add, [1, 2, 3], [10, 20, 30])
    results = [j.result() for j in jobs]
    assert results == [11, 22, 33], results
    states = [final_state(j) for j in jobs]
    print("map_array: ok", [j.job_id for j in jobs], states)
    assert all(s == "COMPLETED" for s in states), states

    ex.update_parameters(nodes=2, tasks_per_node=2)
    job = ex.submit(rank_info)
    res = job.results()
    print("multi-task:", res)
    assert sorted(r[0] for r in res) == [0, 1, 2, 3], res
    assert all(r[1] == 4 and r[3] == 2 for r in res), res
    assert sorted(set(r[2] for r in res)) == [0, 1], res
    assert final_state(job) == "COMPLETED", sacct_state(job)

    ex.update_parameters(nodes=1, tasks_per_node=1)
    job = ex.submit(sleep_long, 300)
    deadline = time.time() + 60
    while sacct_state(job) != "RUNNING" and time.time() < deadline:
        time.sleep(0.5)
    job.cancel(check=True)
    deadline = time.time() + 60
    while not sacct_state(job).startswith("CANCELLED") and time.time() < deadline:
        time.sleep(0.5)
    print("cancel:", job.job_id, sacct_state(job))
    assert sacct_state(job).startswith("CANCELLED"), sacct_state(job)
    # Cancelling a job that has ended is not an error (submitit cancels in cleanup paths).
    job.cancel(check=True)

    if os.environ.get("CHECK_REQUEUE", "1") == "1":
        ex.update_parameters(timeout_min=1, slurm_signal_delay_s=40)
        marker = os.path.join(folder, "requeue-marker")
        job = ex.submit(Checkpointed(), marker)
        out = job.result()
        print("requeue on timeout:", out, final_state(job))
        assert out == "second run", out
    print("submitit: all checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
