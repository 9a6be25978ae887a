"""A GPU fed by an 8-worker DataLoader doing CPU-side augmentation, the usual shape of a
training input pipeline: prints the CPUs the job may use, its OMP threads and the samples
per second that reach the GPU. Shows what a CPU binding does to a 1-GPU job."""
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

WORKERS = int(os.environ.get("FEED_WORKERS", "8"))
BATCHES = int(os.environ.get("FEED_BATCHES", "60"))


class Augmented(Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        img = torch.rand(3, 224, 224, generator=g)
        # Crop, flip, colour jitter and normalise: a few passes over the image on the CPU.
        img = img[:, 8:216, 8:216].flip(-1)
        img = (img * 1.1 - 0.05).clamp(0, 1)
        img = (img - img.mean(dim=(1, 2), keepdim=True)) / (img.std(dim=(1, 2), keepdim=True) + 1e-6)
        return torch.nn.functional.interpolate(img[None], size=224, mode="bilinear")[0]


def main():
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(Augmented(), batch_size=64, num_workers=WORKERS, persistent_workers=True)
    it = iter(loader)
    for _ in range(5):
        next(it)
    w = torch.randn(224 * 224 * 3, 10, device=device)
    start, n = time.time(), 0
    for _ in range(BATCHES):
        x = next(it).to(device, non_blocking=True)
        (x.reshape(x.shape[0], -1) @ w).sum().item()
        n += x.shape[0]
    rate = n / (time.time() - start)
    print(
        f"cpus={len(os.sched_getaffinity(0))} omp={os.environ.get('OMP_NUM_THREADS')} "
        f"workers={WORKERS} device={device} samples_per_s={rate:.0f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
