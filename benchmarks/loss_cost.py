"""Forward+backward time and peak memory of the AttentionNCE losses against solo-learn's SimCLR and
MoCo v3 losses and the authors' formulation, over batch sizes B and positive views M.

Losses compared at each (B, M), with d-dimensional projections:

* ``solo_simclr``: ``solo.losses.simclr.simclr_loss_func`` on the 2 anchor views, z [2B, d]
  (SimCLR has no positive views);
* ``ours``: ``attentionnce_loss_func(anchors [2B, d], positives [B, M, d], indexes [B])``;
* ``ours+attn``: ``attentionnce_loss_with_attention`` + ``attention_stats`` (a logging step);
* ``authors``: the authors' exp-space formulation (:func:`authors_loss`, written here);
* ``solo_mocov3``: ``solo.losses.mocov3.mocov3_loss_func(q [B, d], k [B, d])``;
* ``ours_moco``: ``attentionnce_mocov3_loss_func(q, k, positive_keys [B, M, d])``.

Time: the calls of one cell interleaved (:func:`benchmarks.timing.time_interleaved`), medians.
Gradients with respect to what a training step differentiates (anchors and positives; queries only
for the MoCo forms). Peak memory: above what was allocated before the call, returned gradients
included (CUDA: ``max_memory_allocated``; CPU: the running sum of ``torch.profiler``'s allocation
events). Operations: aten ops one forward+backward dispatches, views excluded (one kernel launch
each on a GPU), counted on the CPU at the smallest B and largest M.

    python3 -m benchmarks.loss_cost --device cpu --out bench_out/loss_cpu.md   # full grid
    python3 -m benchmarks.loss_cost --quick                                     # B 64/256, M 1/4
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

import attnce_plugin.attention as head
from attnce_plugin.attention import attention_stats
from attnce_plugin.losses import (
    attentionnce_loss_func,
    attentionnce_loss_with_attention,
    attentionnce_mocov3_loss_func,
)
from benchmarks.report import table
from benchmarks.timing import median, sync, time_interleaved

Grads = Tuple[torch.Tensor, ...]
LossCall = Callable[[], Grads]


def authors_loss(
    anchors: torch.Tensor, positives: torch.Tensor, temperature: float, d_pos: float, d_neg: float
) -> torch.Tensor:
    """AttentionNCE as the authors compute it (their ``AttentioNCE``, image/main.py), in exp
    space, generalised from their 4 positive views to M.

    Positive similarities by one broadcast over the M views, ``alpha = softmax(s / d_pos)``, score
    ``exp(sum_m alpha_m s_m / tau)``; negatives by a [2B, 2B] position mask rebuilt with a Python
    loop on the CPU every call, ``beta = (softmax(n / d_neg) + 1e-6) * (2B - 2)``, scores
    ``exp(beta * n / tau)``; loss ``-log(pos / (pos + sum neg))``. ``exp(beta * n / tau)``
    overflows fp32 (above ~88.7) when one negative takes the attention at a small tau.

    Args:
        anchors: [2B, d], view 1 of every image then view 2.
        positives: [B, M, d].

    Returns:
        The scalar mean loss (inf/NaN where the exponent overflows).
    """
    b, m, d = positives.shape
    out = F.normalize(anchors, dim=-1)
    pos_sim = (out.view(2, b, 1, d) * F.normalize(positives, dim=-1)).sum(-1).view(-1, m)
    alpha = torch.softmax(pos_sim.detach() / d_pos, dim=-1)
    pos_score = torch.exp((pos_sim * alpha).sum(-1) / temperature)
    mask = torch.ones((b, 2 * b), dtype=torch.bool)
    for i in range(b):
        mask[i, i] = mask[i, i + b] = False
    mask = torch.cat((mask, mask)).to(out.device)
    neg_sim = (out @ out.t()).masked_select(mask).view(2 * b, -1)  # [2B, 2B - 2]
    beta = (torch.softmax(neg_sim.detach() / d_neg, dim=-1) + 1e-6) * (2 * b - 2)
    neg_score = torch.exp(neg_sim * beta / temperature)
    return -torch.log(pos_score / (pos_score + neg_score.sum(-1))).mean()


def loss_forms(
    b: int, m: int, d: int, device: torch.device, tau: float, d_pos: float, d_neg: float, seed=0
) -> Dict[str, Tuple[Callable[[], torch.Tensor], List[torch.Tensor]]]:
    """Per loss: (the loss on fixed random inputs, the inputs a training step differentiates)."""
    from solo.losses.mocov3 import mocov3_loss_func
    from solo.losses.simclr import simclr_loss_func

    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int, grad: bool = False) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(device).requires_grad_(grad)

    anchors, positives = rand(2 * b, d, grad=True), rand(b, m, d, grad=True)
    query, key, pos_keys = rand(b, d, grad=True), rand(b, d), rand(b, m, d)
    idx = torch.arange(b, device=device)

    def ours_attn() -> torch.Tensor:
        loss, weights = attentionnce_loss_with_attention(anchors, positives, idx, tau, d_pos, d_neg)
        attention_stats(weights)
        return loss

    both = [anchors, positives]
    return {
        "solo_simclr": (lambda: simclr_loss_func(anchors, idx.repeat(2), tau), [anchors]),
        "ours": (lambda: attentionnce_loss_func(anchors, positives, idx, tau, d_pos, d_neg), both),
        "ours+attn": (ours_attn, both),
        "authors": (lambda: authors_loss(anchors, positives, tau, d_pos, d_neg), both),
        "solo_mocov3": (lambda: mocov3_loss_func(query, key, tau), [query]),
        "ours_moco": (
            lambda: attentionnce_mocov3_loss_func(query, key, pos_keys, tau, d_pos, d_neg),
            [query],
        ),
    }


def make_calls(*args, **kwargs) -> Dict[str, LossCall]:
    """One zero-argument forward+backward per loss (:func:`loss_forms`' arguments)."""

    def call(fn: Callable[[], torch.Tensor], inputs: List[torch.Tensor]) -> LossCall:
        return lambda: torch.autograd.grad(fn(), inputs)

    return {name: call(*form) for name, form in loss_forms(*args, **kwargs).items()}


def count_ops(call: Callable[[], object]) -> int:
    """Aten operations one call dispatches, views excluded, after one uncounted call (caches)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if not (func.is_view or func.overloadpacket.__name__ == "_unsafe_view"):
                self.ops += 1
            return func(*args, **(kwargs or {}))

    call()
    with _Count() as counter:
        call()
    return counter.ops


def peak_bytes(call: LossCall, device: torch.device) -> int:
    """Peak bytes one forward+backward allocates above the level before it."""
    if device.type == "cuda":
        sync(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        grads = call()
        sync(device)
        del grads
        return torch.cuda.max_memory_allocated(device) - base
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        grads = call()
        del grads
    events = sorted(
        (e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
        key=lambda e: e.start_ns(),
    )
    current = peak = 0
    for event in events:
        current += event.nbytes()
        peak = max(peak, current)
    return peak


def finite(b: int, m: int, d: int, device: torch.device, tau: float, d_neg: float) -> List[str]:
    """``yes``/``NO`` per loss: finite loss and gradients (solo_simclr, ours, authors, ours_moco)."""
    forms = loss_forms(b, m, d, device, tau, 1.0, d_neg, seed=1)
    out = []
    for name in ("solo_simclr", "ours", "authors", "ours_moco"):
        fn, inputs = forms[name]
        loss = fn()
        ok = bool(torch.isfinite(loss)) and all(
            bool(torch.isfinite(g).all()) for g in torch.autograd.grad(loss, inputs)
        )
        out.append("yes" if ok else "NO")
    return out


def set_mask_path(mask: str) -> None:
    """Force the SimCLR form's non-negatives onto the ``dense`` mask or the index ``pairs``, or
    leave the library's choice (``auto``)."""
    if mask == "dense":
        head.DENSE_MASK_DEVICES = ("cpu", "cuda")
    elif mask == "pairs":
        head.DENSE_MASK_DEVICES = ()
        head.DENSE_MASK_MAX_ENTRIES = 0


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g}" if seconds < 0.1 else f"{seconds * 1e3:.0f}"


def _mb(num_bytes: float) -> str:
    mb = num_bytes / 2**20
    return f"{mb:.3g}" if mb < 100 else f"{mb:.0f}"


def _x(num: float, den: float, bold: bool = False) -> str:
    text = f"{num / den:.2f}x" if den > 0 else "n/a"
    return f"**{text}**" if bold else text


def op_counts(b: int, m: int, d: int, tau: float, d_pos: float, d_neg: float) -> str:
    """The operation-count table at one (B, M), ``ours`` on both mask paths."""
    cpu = torch.device("cpu")
    saved = (head.DENSE_MASK_DEVICES, head.DENSE_MASK_MAX_ENTRIES)
    try:
        set_mask_path("dense")
        ops = {n: count_ops(c) for n, c in make_calls(b, m, d, cpu, tau, d_pos, d_neg).items()}
        set_mask_path("pairs")
        pairs = count_ops(make_calls(b, m, d, cpu, tau, d_pos, d_neg)["ours"])
    finally:
        head.DENSE_MASK_DEVICES, head.DENSE_MASK_MAX_ENTRIES = saved
    head_ = ["solo_simclr", "ours, dense mask", "ours, index pairs", "ours+attn", "authors"]
    head_ += ["solo_mocov3", "ours_moco", "ours (dense) / solo_simclr", "ours_moco / solo_mocov3"]
    row = [ops["solo_simclr"], ops["ours"], pairs, ops["ours+attn"], ops["authors"]]
    row += [ops["solo_mocov3"], ops["ours_moco"], _x(ops["ours"], ops["solo_simclr"])]
    row += [_x(ops["ours_moco"], ops["solo_mocov3"])]
    return table(head_, [row])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--out", type=Path, default=None, help="also write the tables to this file")
    p.add_argument("--quick", action="store_true", help="B in {64, 256}, M in {1, 4}")
    p.add_argument("--batches", type=int, nargs="+", default=None, help="B values (images)")
    p.add_argument("--views", type=int, nargs="+", default=None, help="M values (positives)")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.5)
    p.add_argument("--d-pos", type=float, default=1.0)
    p.add_argument("--d-neg", type=float, default=10.0)
    p.add_argument("--repeats", type=int, default=None, help="timed calls per loss (default by B)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads (default 1: on a shared machine a 2-thread OpenMP barrier stalls whenever "
        "another process holds a core; 0 = torch's default)",
    )
    p.add_argument(
        "--mask",
        choices=["auto", "dense", "pairs"],
        default="auto",
        help="how `ours` marks its non-negatives: auto = the library's choice; dense or pairs "
        "forces one path on every device",
    )
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    if device.type == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")  # solo-learn's and Lightning's import-time deprecations
    set_mask_path(args.mask)
    batches = args.batches or ([64, 256] if args.quick else [64, 256, 1024, 4096])
    views = args.views or ([1, 4] if args.quick else [1, 2, 4, 8])
    cuda = device.type == "cuda"
    tau, dp, dn, dim = args.temperature, args.d_pos, args.d_neg, args.dim

    def repeats(b: int) -> int:
        return args.repeats or (25 if cuda else {64: 21, 256: 15, 1024: 7}.get(b, 3))

    start = time.perf_counter()
    times, mems, mocos = [], [], []
    for b in batches:
        for m in views:
            calls = make_calls(b, m, dim, device, tau, dp, dn)
            t = {n: median(s) for n, s in time_interleaved(calls, repeats(b), device).items()}
            mm = {name: peak_bytes(call, device) for name, call in calls.items()}
            for rows, fmt in ((times, _ms), (mems, _mb)):
                v = t if fmt is _ms else mm
                rows.append(
                    [b, m, *(fmt(v[n]) for n in ("solo_simclr", "ours", "ours+attn", "authors"))]
                    + [_x(v["ours"], v["solo_simclr"], True), _x(v["ours+attn"], v["solo_simclr"])]
                    + [_x(v["ours"], v["authors"], fmt is _ms)]
                )
            mocos.append(
                [b, m, _ms(t["solo_mocov3"]), _ms(t["ours_moco"])]
                + [_x(t["ours_moco"], t["solo_mocov3"], True), _mb(mm["solo_mocov3"])]
                + [_mb(mm["ours_moco"]), _x(mm["ours_moco"], mm["solo_mocov3"])]
            )
            print(f"  [B={b} M={m} at {time.perf_counter() - start:.0f}s]", file=sys.stderr)
            del calls
            if cuda:
                torch.cuda.empty_cache()

    name = torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu"
    cols = ["B", "M", "solo_simclr", "ours", "ours+attn", "authors"]
    cols += ["ours / solo", "ours+attn / solo", "ours / authors"]
    mem_how = "max_memory_allocated" if cuda else "profiler allocation events"
    tau_s, dn_s = 0.05, 0.01
    parts = [
        f"<!-- python3 -m benchmarks.loss_cost {' '.join(sys.argv[1:] if argv is None else argv)} -->",
        f"device: {device.type} ({name}), torch {torch.__version__}, threads "
        f"{torch.get_num_threads()}, d = {dim}, tau = {tau}, d_pos = {dp}, d_neg = {dn}, "
        f"mask {args.mask}",
        "### SimCLR form: forward+backward time (ms, median)",
        "solo_simclr gets the 2 anchor views only (z [2B, d]); the others also get M positives "
        "[B, M, d].",
        table(cols, times),
        f"### SimCLR form: peak memory of one forward+backward (MiB, {mem_how})",
        table(cols, mems),
        "### MoCo v3 form: one loss call (q [B, d] against gathered keys), time (ms) and peak "
        "memory (MiB)",
        table(
            ["B", "M", "solo_mocov3 ms", "ours_moco ms", "time ratio", "solo_mocov3 MiB"]
            + ["ours_moco MiB", "memory ratio"],
            mocos,
        ),
        f"### Finite loss and gradients at tau = {tau_s}, d_neg = {dn_s} (M = 4)",
        table(
            ["B", "solo_simclr", "ours", "authors", "ours_moco"],
            [[b, *finite(b, 4, dim, device, tau_s, dn_s)] for b in batches],
        ),
        f"### Operations per forward+backward (B = {batches[0]}, M = {views[-1]}; aten ops "
        "dispatched, views excluded)",
        "Each is one kernel launch on a GPU; counted on the CPU. `ours` is counted on both mask "
        "paths (the dense mask is the CUDA path).",
        op_counts(batches[0], views[-1], dim, tau, dp, dn),
        f"total wall time {time.perf_counter() - start:.0f} s",
    ]
    text = "\n\n".join(parts) + "\n"
    print(text, end="")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
