"""dask-jobqueue's SLURMCluster against Slurm's command names: workers start as batch
jobs, run tasks, and are cancelled when the cluster closes."""
import subprocess
import sys
import time

from dask.distributed import Client
from dask_jobqueue import SLURMCluster


def main(folder):
    cluster = SLURMCluster(
        cores=1,
        memory="1GB",
        processes=1,
        walltime="00:10:00",
        log_directory=folder,
        scheduler_options={"host": "127.0.0.1"},
        job_extra_directives=["--gres=gpu:1"],
    )
    print(cluster.job_script())
    cluster.scale(jobs=2)
    client = Client(cluster)
    client.wait_for_workers(2, timeout=120)
    total = client.submit(sum, client.map(lambda x: x * x, range(10))).result()
    assert total == 285, total
    ids = [job.job_id for job in cluster.workers.values()]
    print("dask: workers", ids, "sum", total)
    client.close()
    cluster.close()
    deadline = time.time() + 60
    while True:
        out = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", ",".join(ids)],
            capture_output=True, text=True, check=True,
        ).stdout
        states = dict(line.split("|") for line in out.split())
        if all(s.startswith("CANCELLED") or s == "COMPLETED" for s in states.values()):
            break
        assert time.time() < deadline, states
        time.sleep(0.5)
    print("dask: worker jobs ended", states)
    print("dask: all checks passed")


if __name__ == "__main__":
    main(sys.argv[1])
