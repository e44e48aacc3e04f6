"""Checkpoint save time and training stall (sync vs async) against the disk's measured write bandwidth.

    python bench/bench_checkpoint.py                         # CPU, sizes 64,256,1024,2048 MiB, a few minutes
    python bench/bench_checkpoint.py --sizes-mb 512 --device cuda --dtype bf16 --params-b 1.2   # GPU, >=1B params

For each size, in the same run and the same folder:
  baseline   write the model's bytes in 8 MiB blocks to one file, then fsync (dd conv=fsync): the physical limit
  sync       CheckpointManager.save(block=True): the training loop is stopped for the whole save
  async      CheckpointManager(async_save=True).save(): stall = until save() returns (staging copy); durable =
             until the manifest is on disk
  preempt    SIGUSR1 to ourselves -> Preemptible.step_done(): signal to durable checkpoint (sync save + exit)
Each column is the best of --repeat interleaved runs. Ratios are time / baseline time (1.00 = as fast as the disk allows). Target (ARCHITECTURE.md): preemption notice
to durable checkpoint within 1.25x of the bytes at the disk's write bandwidth, plus one step.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from burstd.train import CheckpointManager, Preemptible  # noqa: E402

CHUNK = 8 << 20


def settle() -> None:
    """Flush what earlier steps left dirty (and let the mount's online discard of deleted files finish) so that
    it is not billed to the next measurement."""
    os.sync()
    time.sleep(0.3)


def baseline_write(folder: Path, model: torch.nn.Module) -> float:
    """The physical limit: the model's bytes written sequentially to one file, then fsync (dd conv=fsync of the
    same bytes; the same content, because some virtual disks compress or deduplicate)."""
    path = folder / "baseline.bin"
    cpu = [p.detach().cpu() for p in model.parameters()]  # on GPU, the device-to-host copy is not disk time
    settle()
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for t in cpu:
            view = memoryview(t.view(torch.uint8).numpy()).cast("B")
            for off in range(0, len(view), CHUNK):
                os.write(fd, view[off:off + CHUNK])
        os.fsync(fd)
    finally:
        os.close(fd)
    dt = time.perf_counter() - t0
    path.unlink()
    return dt


class Blob(torch.nn.Module):
    """A model of a chosen byte size: parameters in 64 MiB tensors."""

    def __init__(self, nbytes: int, dtype: torch.dtype, device: str):
        super().__init__()
        per = torch.tensor([], dtype=dtype).element_size()
        n = max(nbytes // per, 1)
        chunk = (64 << 20) // per
        sizes = [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])
        self.params = torch.nn.ParameterList(
            torch.nn.Parameter(torch.empty(s, dtype=dtype, device=device).uniform_(-1, 1)) for s in sizes)

    def nbytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.parameters())


def timed_save(folder: Path, model: torch.nn.Module, *, async_save: bool, threads: int) -> tuple[float, float]:
    shutil.rmtree(folder, ignore_errors=True)
    mgr = CheckpointManager(folder, model, None, keep=1, async_save=async_save, writer_threads=threads)
    settle()
    if model.params[0].is_cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    mgr.save(1)
    stall = time.perf_counter() - t0
    mgr.wait()
    durable = time.perf_counter() - t0
    mgr.close()
    return stall, durable


def timed_preempt(folder: Path, model: torch.nn.Module, threads: int) -> float:
    shutil.rmtree(folder, ignore_errors=True)
    job = Preemptible(folder, model, None, keep=1)
    job.manager.writer_threads = threads
    settle()
    t0 = time.perf_counter()
    os.kill(os.getpid(), signal.SIGUSR1)
    try:
        job.step_done(1)
    except SystemExit:
        pass
    dt = time.perf_counter() - t0
    job.flag.uninstall()
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes-mb", default="64,256,1024,2048", help="checkpoint sizes in MiB, comma-separated")
    ap.add_argument("--params-b", type=float, default=0.0, help="instead of --sizes-mb: one model of N billion params")
    ap.add_argument("--dir", default=None, help="where to write (default: a temp folder under bench/out)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (median reported)")
    ap.add_argument("--threads", type=int, default=1, help="DCP writer threads")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    base = Path(args.dir) if args.dir else Path(__file__).resolve().parent / "out"
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-ckpt-", dir=base))
    per = torch.tensor([], dtype=dtype).element_size()
    sizes = ([int(args.params_b * 1e9 * per)] if args.params_b
             else [int(float(s) * (1 << 20)) for s in args.sizes_mb.split(",")])
    rows = []
    logging.getLogger("burstd.train").setLevel(logging.ERROR)
    warm = Blob(1 << 20, dtype, args.device)  # first DCP call pays one-off imports and set-up
    timed_save(work / "ckpt", warm, async_save=False, threads=args.threads)
    timed_save(work / "ckpt", warm, async_save=True, threads=args.threads)
    print(f"device={args.device} dtype={args.dtype} dir={work} torch={torch.__version__} threads={args.threads}")
    print(f"{'size':>9} {'disk MB/s':>9} {'base s':>7} | {'sync s':>7} {'x':>5} | {'async stall':>11} {'x':>5} "
          f"{'durable':>8} {'x':>5} | {'preempt s':>9} {'x':>5} | stall async/sync")
    try:
        for nbytes in sizes:
            model = Blob(nbytes, dtype, args.device)
            real = model.nbytes()
            base, sync, asy, pre = [], [], [], []
            for _ in range(args.repeat):  # interleaved, so drift in the shared disk hits every column alike
                base.append(baseline_write(work, model))
                sync.append(timed_save(work / "ckpt", model, async_save=False, threads=args.threads))
                asy.append(timed_save(work / "ckpt", model, async_save=True, threads=args.threads))
                pre.append(timed_preempt(work / "ckpt", model, args.threads))
            # Best of N: interference from other tenants of the disk only ever adds time.
            base_s = min(base)
            pre = min(pre)
            sync_s = min(d for _s, d in sync)
            a_stall = min(s for s, _d in asy)
            a_dur = min(d for _s, d in asy)
            row = {"bytes": real, "params": sum(p.numel() for p in model.parameters()), "baseline_s": base_s,
                   "disk_MBps": real / base_s / 1e6, "sync_s": sync_s, "async_stall_s": a_stall,
                   "async_durable_s": a_dur, "preempt_s": pre}
            rows.append(row)
            print(f"{real / (1 << 20):>7.0f}Mi {row['disk_MBps']:>9.0f} {base_s:>7.2f} | {sync_s:>7.2f} "
                  f"{sync_s / base_s:>5.2f} | {a_stall:>11.3f} {a_stall / base_s:>5.2f} {a_dur:>8.2f} "
                  f"{a_dur / base_s:>5.2f} | {pre:>9.2f} {pre / base_s:>5.2f} | {a_stall / sync_s:>6.3f}",
                  flush=True)
            del model
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": args.device, "dtype": args.dtype, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
