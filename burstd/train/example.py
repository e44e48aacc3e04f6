"""A small preemptible training script: an MLP on synthetic, deterministic data.

    python -m burstd.train.example --steps 200 --seed 1 --ckpt-dir /shared/ckpt/demo --out final.pt
    torchrun --nproc-per-node 2 --signals-to-handle SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1 \\
        -m burstd.train.example --steps 200 --seed 1 --ckpt-dir /shared/ckpt/demo --out final.pt

It resumes from the newest complete checkpoint in --ckpt-dir, checkpoints every --ckpt-every steps (left out: an
interval chosen from the pool's preemption rate, see burstd.train.interval), and on
SIGUSR1/SIGTERM checkpoints and exits with the requeue code (85 unless BURSTD_REQUEUE_EXIT_CODE says otherwise).
A run that was preempted and resumed ends with the same weights, bit for bit (CPU), as one that never was. On two
or more ranks, a rank lost without notice costs at most the step in flight: the survivors save just in time
(burstd.train.survivor; --no-jit turns it off) within BURSTD_COLLECTIVE_TIMEOUT_S of the loss.

Gradients are averaged with one all-reduce over a flat buffer of fixed layout, so the summation order is the same
every step of every run (DDP's bucket rebuild after the first step can change it with more than two ranks).
"""

from __future__ import annotations

from burstd import start_up
from burstd.train.signals import install_handlers

# Catch the preemption signal from the first moment, before the seconds spent importing torch: a signal that
# arrives before any handler is installed would kill the process without a checkpoint.
EARLY_FLAG = install_handlers() if __name__ == "__main__" else None
if __name__ == "__main__":
    # A rank's start (torch, its checkpointing, the optimizer's torch.compile stack) without the collector's passes
    # over it: a sixth less CPU on the way back from a preemption (burstd.start_up); back on before the first step.
    start_up.pause()

import argparse
import gc
import logging
import os
import random
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from burstd.train.collectives import collective_timeout
from burstd.train.preemptible import Preemptible
from burstd.train.store import CheckpointError


def deterministic_algorithms() -> None:
    """``torch.use_deterministic_algorithms(True)`` without the part this script never uses: the public call
    also sets ``torch._inductor.config.deterministic``, and importing that imports the whole of inductor and
    dynamo, about a CPU-second a rank (a third of its start, docs/testbed.md round ten) for a setting only
    ``torch.compile`` reads. Eager kernels read the flag set here, the same one the public call sets. Where inductor is
    loaded already, or this torch lacks the hook, the public call."""
    set_flag = getattr(torch._C, "_set_deterministic_algorithms", None)
    if set_flag is None or "torch._inductor" in sys.modules:
        torch.use_deterministic_algorithms(True)
    else:
        set_flag(True)


class SyntheticData:
    """Batch ``i`` of rank ``r`` is a pure function of (seed, i, r); ``position`` is the data-loader state."""

    def __init__(self, seed: int, rank: int, batch: int, dim: int):
        self.seed, self.rank, self.batch, self.dim = seed, rank, batch, dim
        self.position = 0
        g = torch.Generator().manual_seed(seed)
        self.teacher = torch.randn(dim, dim, generator=g) / dim**0.5

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.position * 1_009 + self.rank)
        x = torch.randn(self.batch, self.dim, generator=g)
        y = torch.tanh(x @ self.teacher)
        self.position += 1
        return x, y

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = int(state["position"])


def build_model(dim: int, width: int, layers: int) -> nn.Module:
    mods: list[nn.Module] = [nn.Linear(dim, width), nn.GELU()]
    for _ in range(layers - 1):
        mods += [nn.LayerNorm(width), nn.Linear(width, width), nn.GELU(), nn.Dropout(0.1)]
    mods.append(nn.Linear(width, dim))
    return nn.Sequential(*mods)


def average_gradients(params: list[nn.Parameter], world: int) -> None:
    grads = []
    for p in params:
        if p.grad is None:
            raise ValueError("every parameter needs its gradient: call average_gradients after backward()")
        grads.append(p.grad)
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset:offset + n].view_as(g))
        offset += n


def say(line: str) -> None:
    """One line of the job's output in one write. torchrun runs each rank unbuffered (``python -u``), where
    ``print`` writes the text and its newline apart, so two ranks printing at once shared a line."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m burstd.train.example", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, required=True, help="total optimizer steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ckpt-dir", required=True, help="checkpoint folder or fsspec URL (shared by all nodes)")
    ap.add_argument("--out", required=True, help="where rank 0 writes the final state_dict (torch.save)")
    ap.add_argument("--ckpt-every", type=int, default=None,
                    help="periodic checkpoint every K steps (0: only on signal; default: Young/Daly from "
                         "BURSTD_PREEMPT_RATE_PER_HOUR and the measured save, 0 without it)")
    ap.add_argument("--keep", type=int, default=3, help="complete checkpoints to keep")
    ap.add_argument("--size", type=int, default=64, help="hidden width of the MLP")
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--dim", type=int, default=16, help="input/output width")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--ddp", action="store_true",
                    help="wrap the model in DistributedDataParallel instead of averaging gradients by hand")
    ap.add_argument("--async-save", action="store_true", help="write periodic checkpoints in the background")
    ap.add_argument("--sync-every", type=int, default=1, help="agree on stopping every K steps")
    ap.add_argument("--no-jit", action="store_true",
                    help="no just-in-time save from the surviving ranks when a peer is lost (burstd.train.survivor)")
    ap.add_argument("--step-sleep", type=float, default=0.0, help="seconds to sleep per step (demos and tests)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    deterministic_algorithms()
    distributed = "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1
    if distributed:
        # a short collective timeout: a peer that vanished is noticed in that time at most (train.collectives)
        dist.init_process_group("gloo", timeout=collective_timeout())
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1

    # Same initial weights on every rank; per-rank RNG streams afterwards (dropout, noise).
    torch.manual_seed(args.seed)
    model = build_model(args.dim, args.size, args.layers)
    torch.manual_seed(args.seed * 7919 + rank)
    random.seed(args.seed * 31 + rank)
    np.random.seed(args.seed * 131 + rank)
    if distributed and args.ddp:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(args.steps, 1))
    data = SyntheticData(args.seed, rank, args.batch, args.dim)

    try:
        job = Preemptible(args.ckpt_dir, model, optimizer, stateful={"scheduler": scheduler, "data": data},
                          every=args.ckpt_every, keep=args.keep, async_save=args.async_save,
                          sync_every=args.sync_every, flag=EARLY_FLAG, jit=False if args.no_jit else None)
        start = job.resume()
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    if data.position != start:
        print(f"error: data position {data.position} != resumed step {start}", file=sys.stderr, flush=True)
        return 2
    start_up.done()  # started: torch, the optimizer, the checkpoint read back

    params = list(model.parameters())
    model.train()
    noticed = False

    def tell_signal() -> bool:
        """Print when this rank's signal came (the tests' mark), if one came; say whether it did."""
        came = job.flag.requested  # read once: a signal may land while this runs
        if came:
            say(f"rank={rank} signal={job.flag.signum} received_at={job.flag.received_at:.6f}")
        return came

    with job:  # a peer lost without notice: a survivor saves the last completed step (train.survivor)
        for step in range(start, args.steps):
            x, y = data.next()
            x = x + torch.from_numpy(np.random.normal(0.0, 0.01, size=tuple(x.shape))).to(x.dtype)
            loss = nn.functional.mse_loss(model(x), y) * (1.0 + 0.01 * random.random())
            optimizer.zero_grad(set_to_none=False)
            loss.backward()
            if distributed and not args.ddp:
                average_gradients(params, world)
            optimizer.step()
            scheduler.step()
            if args.step_sleep:
                time.sleep(args.step_sleep)
            say(f"rank={rank} step={step + 1} t={time.time():.6f} loss={loss.item():.6f}")
            noticed = noticed or tell_signal()
            try:
                job.step_done(step + 1)
            except SystemExit:
                noticed = noticed or tell_signal()  # the signal landed after the look above, before the stop
                raise

    job.finish()
    if rank == 0:
        tmp = args.out + ".tmp"
        plain = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
        torch.save({"model": plain.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "steps": args.steps}, tmp)
        os.replace(tmp, args.out)
        say(f"rank=0 done steps={args.steps} out={args.out}")
    if distributed:
        # Let go of DDP (its reducer holds the process group) while the group is still up: freed after
        # destroy_process_group, when main() returns, it can hang this rank forever (gloo, torch 2.13; about
        # 1 run in 10 on 2 busy cores, faulthandler showing no Python frame below this module's last line).
        del job, model, optimizer, scheduler, params
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
