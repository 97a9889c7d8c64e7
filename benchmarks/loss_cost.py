"""Forward+backward time and peak memory of the AttentionNCE losses against solo-learn's SimCLR and
MoCo v3 losses (issue 46's bound: within 2x of ``simclr_loss_func`` in both at B = 256 and 1024,
M = 4, on the CPU)::

    python3 -m benchmarks.loss_cost                          # B 256 and 1024, M = 4, CPU
    python3 -m benchmarks.loss_cost --device cuda --batches 256 1024 4096 --views 1 4 8

On fixed random projections: ``solo_simclr`` gets the 2 anchor views [2B, d], ``ours`` also M
positives [B, M, d]; ``solo_mocov3`` and ``ours_moco`` take queries [B, d] against keys (and
positive keys [B, M, d]). Time: medians, the calls interleaved (a slow phase of a shared machine
hits all alike). Peak memory above the level before the call (CUDA ``max_memory_allocated``; CPU:
profiler allocation events summed)."""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import torch

from attnce_plugin import losses
from benchmarks.report import table

Call = Callable[[], object]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(calls: Dict[str, Call], repeats: int, device: torch.device) -> Dict:
    """Median seconds of each call over ``repeats`` rounds after one untimed round; each round
    starts at another call."""
    names = list(calls)
    for name in names:
        calls[name]()
    samples: Dict[str, List[float]] = {name: [] for name in names}
    for rep in range(repeats):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            sync(device)
            start = time.perf_counter()
            calls[name]()
            sync(device)
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


def peak_bytes(call: Call, device: torch.device) -> int:
    """Peak bytes one call allocates above the level before it."""
    if device.type == "cuda":
        sync(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        call()  # its gradients, freed on return, count in the peak
        sync(device)
        return torch.cuda.max_memory_allocated(device) - base
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())  # fmt: skip
    return max([0, *itertools.accumulate(e.nbytes() for e in events)])


def loss_calls(
    b: int, m: int, d: int, device: torch.device, tau: float, d_pos: float, d_neg: float
) -> Dict[str, Call]:
    """One zero-argument forward+backward per loss, on fixed random inputs."""
    from solo.losses.mocov3 import mocov3_loss_func
    from solo.losses.simclr import simclr_loss_func

    gen = torch.Generator().manual_seed(0)

    def rand(*shape: int, grad: bool = False) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(device).requires_grad_(grad)

    anchors, positives = rand(2 * b, d, grad=True), rand(b, m, d, grad=True)
    query, key, pos_keys = rand(b, d, grad=True), rand(b, d), rand(b, m, d)
    idx = torch.arange(b, device=device)

    forms = {
        "solo_simclr": (lambda: simclr_loss_func(anchors, idx.repeat(2), tau), [anchors]),
        "ours": (lambda: losses.attentionnce_loss_func(anchors, positives, idx, tau, d_pos, d_neg),
                 [anchors, positives]),
        "solo_mocov3": (lambda: mocov3_loss_func(query, key, tau), [query]),
        "ours_moco": (lambda: losses.attentionnce_mocov3_loss_func(query, key, pos_keys, tau, d_pos,
                                                            d_neg), [query]),
    }  # fmt: skip
    return {n: (lambda f=f, x=x: torch.autograd.grad(f(), x)) for n, (f, x) in forms.items()}


def parser(doc: Optional[str]) -> argparse.ArgumentParser:
    """The cost scripts' shared flags."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--out", type=Path, help="also write the tables to this file")
    # 1 thread: on a shared machine a 2-thread OpenMP barrier stalls whenever another process
    # holds a core.
    p.add_argument("--threads", type=int, default=1, help="CPU threads (0: torch's default)")
    return p


def start(args: argparse.Namespace) -> bool:
    """Whether the device asked for is there; sets the CPU threads."""
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return False
    if args.device == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    return True


def emit(text: str, out: Optional[Path]) -> int:
    print(text, end="")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = parser(__doc__)
    p.add_argument("--batches", type=int, nargs="+", default=[256, 1024], help="B values")
    p.add_argument("--views", type=int, nargs="+", default=[4], help="M values")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--d-pos", type=float, default=1.0)
    p.add_argument("--d-neg", type=float, default=10.0)
    p.add_argument("--repeats", type=int, help="timed calls per loss (default by B)")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if not start(args):
        return 2
    times, mems = [], []
    for b in args.batches:
        for m in args.views:
            calls = loss_calls(b, m, args.dim, device, args.temperature, args.d_pos, args.d_neg)
            reps = args.repeats or (25 if device.type == "cuda" else 15 if b <= 256 else 5)
            t = time_interleaved(calls, reps, device)
            mem = {name: peak_bytes(call, device) / 2**20 for name, call in calls.items()}
            for rows, v, unit in ((times, t, 1e3), (mems, mem, 1.0)):
                rows.append([b, m, *(f"{v[n] * unit:.3g}" for n in calls),
                             f"{v['ours'] / v['solo_simclr']:.2f}x",
                             f"{v['ours_moco'] / v['solo_mocov3']:.2f}x"])  # fmt: skip
            print(f"  [B={b} M={m} done]", file=sys.stderr)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    cols = ["B", "M", *calls, "ours / solo_simclr", "ours_moco / solo_mocov3"]
    cmd = " ".join(["python3 -m benchmarks.loss_cost", *(sys.argv[1:] if argv is None else argv)])
    text = "\n\n".join([
        f"<!-- {cmd} -->",
        f"device {name}, torch {torch.__version__}, threads {torch.get_num_threads()}, d = "
        f"{args.dim}, tau = {args.temperature}, d_pos = {args.d_pos}, d_neg = {args.d_neg}",
        "### Forward+backward time (ms, median)", table(cols, times),
        "### Peak memory of one forward+backward (MiB)", table(cols, mems),
    ]) + "\n"  # fmt: skip
    return emit(text, args.out)


if __name__ == "__main__":
    sys.exit(main())
