"""A tiny PyTorch Lightning run on CPU (DDP over gloo, one process per srun task) with
Lightning's SLURM environment and auto-requeue: the first run is slow until SIGUSR1
arrives, Lightning saves its checkpoint and requeues the job with scontrol; the second
run resumes from that checkpoint and finishes."""
import dataclasses
import glob
import os
import sys
import time


def _debian_torch_on_python_3_11():
    """Debian's torch 1.13 declares a dataclass field with a mutable default, which
    Python 3.11 refuses when torchmetrics imports torch.distributed._shard; give such a
    field a default factory. Only the test's environment needs this, not gsched."""
    original = dataclasses._get_field

    def lenient(cls, name, kind, kw_only):
        try:
            return original(cls, name, kind, kw_only)
        except ValueError:
            default = cls.__dict__[name]
            setattr(cls, name, dataclasses.field(default_factory=lambda: default))
            return original(cls, name, kind, kw_only)

    dataclasses._get_field = lenient


_debian_torch_on_python_3_11()

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
from lightning_fabric.plugins.environments import SLURMEnvironment  # noqa: E402

ROOT = sys.argv[1]


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _):
        if not glob.glob(os.path.join(ROOT, "hpc_ckpt_*.ckpt")):
            time.sleep(0.5)
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main():
    data = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    env = SLURMEnvironment(auto_requeue=True)
    print(
        f"restart={os.environ.get('SLURM_RESTART_COUNT', '0')} rank={env.global_rank()} "
        f"world={env.world_size()} local={env.local_rank()} node={env.node_rank()} "
        f"detected={SLURMEnvironment.detect()}",
        flush=True,
    )
    trainer = pl.Trainer(
        accelerator="cpu", devices=2, num_nodes=1, strategy="ddp", max_epochs=20,
        plugins=[env], default_root_dir=ROOT, enable_progress_bar=False,
        enable_model_summary=False, logger=False, enable_checkpointing=False,
    )
    trainer.fit(Tiny(), loader)
    print(f"finished epoch={trainer.current_epoch} rank={env.global_rank()}", flush=True)


if __name__ == "__main__":
    main()
