#!/usr/bin/env python3
"""Forward+backward time and peak memory of the AttentionNCE losses against solo-learn's and the
authors' formulation.

Compared, for each batch size B (images) and number of positive views M, with d-dimensional
projections:

* ``solo_simclr``: ``solo.losses.simclr.simclr_loss_func`` on the 2 anchor views only,
  z [2B, d] (SimCLR has no positive views, so it is not fed the M extra views);
* ``ours``: ``attentionnce_loss_func(anchors [2B, d], positives [B, M, d], indexes [B])``;
* ``ours+attn``: ``attentionnce_loss_with_attention`` followed by ``attention_stats`` (what the
  training method does every step to log the attention);
* ``authors``: a port of the authors' exp-space loss (their ``AttentioNCE`` function: their
  softmaxes, one broadcast over the M views, the position mask; :func:`authors_loss`); it exists
  only in this script;
* ``solo_mocov3``: ``solo.losses.mocov3.mocov3_loss_func(q [B, d], k [B, d])`` (one of the two
  symmetric calls of a MoCo v3 step);
* ``ours_moco``: ``attentionnce_mocov3_loss_func(q [B, d], k [B, d], positive_keys [B, M, d])``.

Time: all losses of one (B, M) cell run interleaved in one process (round-robin, the order rotated
every repeat), each call timed on its own; the table shows medians. Gradients are taken with
``torch.autograd.grad`` with respect to every input that a training step would differentiate
(anchors and positives; queries only for the MoCo forms, keys come from the momentum network).

Peak memory: the largest amount of memory allocated during one forward+backward above what was
allocated before it (inputs excluded, returned gradients included):

* on CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``;
* on CPU: the running sum of the allocation/free events that ``torch.profiler`` records with
  ``profile_memory=True`` (every CPU tensor allocation made while profiling), maximum over time.

Operations: the number of aten operations one forward+backward dispatches (views excluded), at the
smallest B and largest M of the grid. On a GPU each is a kernel launch, and below B = 4096 the
calls are bound by launches and host work rather than arithmetic, so the count says on any machine
what the GPU time ratio is made of. ``--mask`` forces the SimCLR form's non-negatives onto the
dense-mask path (what CUDA uses) or the index-pair path for the timed tables.

Usage::

    python3 -m attnce_bench.cost.bench_loss                 # full grid on CPU
    python3 -m attnce_bench.cost.bench_loss --quick         # B in {64, 256}, M in {1, 4}
    python3 -m attnce_bench.cost.bench_loss --device cuda   # full grid on a GPU
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

# solo-learn, timm and lightning warn about deprecations on import; they do not concern a benchmark.
warnings.filterwarnings("ignore", category=FutureWarning)
warnings.filterwarnings("ignore", category=UserWarning)
warnings.filterwarnings("ignore", category=DeprecationWarning)

import attnce_plugin.attention as head  # noqa: E402
from attnce_plugin.attention import attention_stats  # noqa: E402
from attnce_plugin.losses import (  # noqa: E402
    attentionnce_loss_func,
    attentionnce_loss_with_attention,
    attentionnce_mocov3_loss_func,
)

Grads = Tuple[torch.Tensor, ...]
LossCall = Callable[[], Grads]


# --------------------------------------------------------------------------------------------
# The authors' formulation: a port of ``AttentioNCE`` in their image/main.py (written here, not
# copied), generalised from their fixed 4 positive views to M.
# --------------------------------------------------------------------------------------------


def _authors_negative_mask(batch_size: int, device: torch.device) -> torch.Tensor:
    """[2B, 2B] bool, built on the CPU with a Python loop on every call, then moved to ``device``,
    as in the published code: False on the diagonal and at the other anchor view of the same image
    (by position in the batch, not by dataset index)."""
    mask = torch.ones((batch_size, 2 * batch_size), dtype=torch.bool)
    for i in range(batch_size):
        mask[i, i] = False
        mask[i, i + batch_size] = False
    return torch.cat((mask, mask), dim=0).to(device)


def authors_loss(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    temperature: float,
    d_pos: float,
    d_neg: float,
) -> torch.Tensor:
    """AttentionNCE as the authors compute it, in exp space.

    Their steps: the positive similarities by one broadcast over the M views
    ([2, B, 1, d] * [B, M, d] summed over d), ``alpha = softmax(s / d_pos)``, the positive score
    ``exp(sum_m alpha_m s_m / tau)``; the negatives by the position mask, ``beta = (softmax(n /
    d_neg) + 1e-6) * (2B - 2)`` and the negative scores ``exp(beta * n / tau)``; the loss
    ``-log(pos / (pos + sum neg))``. Their softmaxes are stable; what overflows is
    ``exp(beta * n / tau)``: beta reaches up to 2B - 2 when one negative takes the attention, so
    the exponent reaches hundreds to thousands at tau = 0.05 (fp32's exp overflows above ~88.7).

    Args:
        anchors: [2B, d] the two anchor views (view 1 of every image, then view 2).
        positives: [B, M, d] the M positive views of every image.

    Returns:
        Scalar mean loss (inf/NaN where the exponent overflows).
    """
    batch_size, num_pos, dim = positives.shape
    out = F.normalize(anchors, dim=-1)
    pos_views = F.normalize(positives, dim=-1)
    pos_sim = torch.sum(out.view(2, batch_size, 1, dim) * pos_views, dim=-1).view(-1, num_pos)
    alpha = torch.softmax(pos_sim.detach() / d_pos, dim=-1)
    pos_score = torch.exp(torch.sum(pos_sim * alpha, dim=-1) / temperature)

    sim = torch.mm(out, out.t().contiguous())
    mask = _authors_negative_mask(batch_size, out.device)
    neg_sim = sim.masked_select(mask).view(2 * batch_size, -1)  # [2B, 2B - 2]
    beta = (torch.softmax(neg_sim.detach() / d_neg, dim=-1) + 1e-6) * (2 * batch_size - 2)
    neg_score = torch.exp(neg_sim * beta / temperature)
    return -torch.log(pos_score / (pos_score + neg_score.sum(dim=-1))).mean()


# --------------------------------------------------------------------------------------------
# Measurement.
# --------------------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_calls(
    batch: int,
    num_pos: int,
    dim: int,
    device: torch.device,
    temperature: float,
    d_pos: float,
    d_neg: float,
    seed: int = 0,
) -> Dict[str, LossCall]:
    """One zero-argument forward+backward closure per loss, all on the same random inputs."""
    from solo.losses.mocov3 import mocov3_loss_func
    from solo.losses.simclr import simclr_loss_func

    gen = torch.Generator().manual_seed(seed)
    anchors = torch.randn(2 * batch, dim, generator=gen).to(device).requires_grad_()
    positives = torch.randn(batch, num_pos, dim, generator=gen).to(device).requires_grad_()
    indexes = torch.arange(batch, device=device)
    query = torch.randn(batch, dim, generator=gen).to(device).requires_grad_()
    key = torch.randn(batch, dim, generator=gen).to(device)
    pos_keys = torch.randn(batch, num_pos, dim, generator=gen).to(device)

    def solo_simclr() -> Grads:
        loss = simclr_loss_func(anchors, indexes.repeat(2), temperature)
        return torch.autograd.grad(loss, [anchors])

    def ours() -> Grads:
        loss = attentionnce_loss_func(anchors, positives, indexes, temperature, d_pos, d_neg)
        return torch.autograd.grad(loss, [anchors, positives])

    def ours_attn() -> Grads:
        loss, weights = attentionnce_loss_with_attention(
            anchors, positives, indexes, temperature, d_pos, d_neg
        )
        attention_stats(weights)
        return torch.autograd.grad(loss, [anchors, positives])

    def authors() -> Grads:
        loss = authors_loss(anchors, positives, temperature, d_pos, d_neg)
        return torch.autograd.grad(loss, [anchors, positives])

    def solo_mocov3() -> Grads:
        loss = mocov3_loss_func(query, key, temperature)
        return torch.autograd.grad(loss, [query])

    def ours_moco() -> Grads:
        loss = attentionnce_mocov3_loss_func(query, key, pos_keys, temperature, d_pos, d_neg)
        return torch.autograd.grad(loss, [query])

    return {
        "solo_simclr": solo_simclr,
        "ours": ours,
        "ours+attn": ours_attn,
        "authors": authors,
        "solo_mocov3": solo_mocov3,
        "ours_moco": ours_moco,
    }


def count_ops(call: LossCall) -> int:
    """Number of aten operations one forward+backward dispatches, views excluded.

    Each is one kernel launch on a GPU (a view launches none), and on a GPU at B <= 1024 the calls
    are bound by launches and host work, not by arithmetic, so this count is a device-independent
    indicator of that cost. Counted on the CPU, where backward runs on the calling thread.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if not (func.is_view or func.overloadpacket.__name__ == "_unsafe_view"):
                self.ops += 1
            return func(*args, **(kwargs or {}))

    call()  # first-call caches (the MoCo form's own-key pairs) are not part of a step's cost
    with _Count() as counter:
        call()
    return counter.ops


def time_interleaved(
    calls: Dict[str, LossCall], repeats: int, device: torch.device
) -> Dict[str, float]:
    """Median seconds per forward+backward of each call, interleaved round-robin."""
    names = list(calls)
    for name in names:  # warm-up (allocator, lazy init, kernel selection)
        calls[name]()
    _sync(device)
    samples: Dict[str, List[float]] = {name: [] for name in names}
    for rep in range(repeats):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            _sync(device)
            start = time.perf_counter()
            calls[name]()
            _sync(device)
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(vals) for name, vals in samples.items()}


def peak_bytes(call: LossCall, device: torch.device) -> int:
    """Peak bytes allocated by one forward+backward above the level before it (see module doc)."""
    if device.type == "cuda":
        _sync(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        grads = call()
        _sync(device)
        peak = torch.cuda.max_memory_allocated(device) - base
        del grads
        return peak
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        grads = call()
        del grads
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    current = peak = 0
    for event in events:
        current += event.nbytes()
        peak = max(peak, current)
    return peak


def loss_value_finite(
    batch: int, num_pos: int, dim: int, device: torch.device, temperature: float, d_neg: float
) -> Dict[str, bool]:
    """Finite loss and gradients at a small temperature / d_neg, for the AttentionNCE losses."""
    from solo.losses.simclr import simclr_loss_func

    gen = torch.Generator().manual_seed(1)
    anchors = torch.randn(2 * batch, dim, generator=gen).to(device).requires_grad_()
    positives = torch.randn(batch, num_pos, dim, generator=gen).to(device).requires_grad_()
    indexes = torch.arange(batch, device=device)
    query = torch.randn(batch, dim, generator=gen).to(device).requires_grad_()
    key = torch.randn(batch, dim, generator=gen).to(device)
    pos_keys = torch.randn(batch, num_pos, dim, generator=gen).to(device)

    def check(loss_fn: Callable[[], torch.Tensor], inputs: Sequence[torch.Tensor]) -> bool:
        loss = loss_fn()
        if not bool(torch.isfinite(loss)):
            return False
        grads = torch.autograd.grad(loss, list(inputs))
        return all(bool(torch.isfinite(g).all()) for g in grads)

    return {
        "solo_simclr": check(
            lambda: simclr_loss_func(anchors, indexes.repeat(2), temperature), [anchors]
        ),
        "ours": check(
            lambda: attentionnce_loss_func(anchors, positives, indexes, temperature, 1.0, d_neg),
            [anchors, positives],
        ),
        "authors": check(
            lambda: authors_loss(anchors, positives, temperature, 1.0, d_neg), [anchors, positives]
        ),
        "ours_moco": check(
            lambda: attentionnce_mocov3_loss_func(query, key, pos_keys, temperature, 1.0, d_neg),
            [query],
        ),
    }


# --------------------------------------------------------------------------------------------
# Tables.
# --------------------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def _mb(num_bytes: float) -> str:
    mb = num_bytes / 2**20
    return f"{mb:.3g}" if mb < 100 else f"{mb:.0f}"


def _ratio(num: float, den: float) -> str:
    return f"{num / den:.2f}x" if den > 0 else "n/a"


def op_count_table(
    batch: int, num_pos: int, dim: int, temperature: float, d_pos: float, d_neg: float
) -> List[str]:
    """Markdown lines: :func:`count_ops` of every loss at one (B, M), ``ours`` on both mask paths."""
    cpu = torch.device("cpu")
    saved = (head.DENSE_MASK_DEVICES, head.DENSE_MASK_MAX_ENTRIES)
    try:
        set_mask_path("dense")
        calls = make_calls(batch, num_pos, dim, cpu, temperature, d_pos, d_neg)
        ops = {name: count_ops(call) for name, call in calls.items()}
        set_mask_path("pairs")
        ops_pairs = count_ops(
            make_calls(batch, num_pos, dim, cpu, temperature, d_pos, d_neg)["ours"]
        )
    finally:
        head.DENSE_MASK_DEVICES, head.DENSE_MASK_MAX_ENTRIES = saved
    return [
        f"### Operations per forward+backward (B = {batch}, M = {num_pos}; aten ops dispatched, "
        "views excluded)",
        "",
        "Each is one kernel launch on a GPU; counted on the CPU. `ours` is counted on both mask "
        "paths (the dense mask is the CUDA path).",
        "",
        "| solo_simclr | ours, dense mask | ours, index pairs | ours+attn | authors | solo_mocov3 | "
        "ours_moco | ours (dense) / solo_simclr | ours_moco / solo_mocov3 |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {ops['solo_simclr']} | {ops['ours']} | {ops_pairs} | {ops['ours+attn']} | "
        f"{ops['authors']} | {ops['solo_mocov3']} | {ops['ours_moco']} | "
        f"{_ratio(ops['ours'], ops['solo_simclr'])} | {_ratio(ops['ours_moco'], ops['solo_mocov3'])} |",
    ]


def set_mask_path(mask: str) -> None:
    """Force the SimCLR form's non-negatives onto one path (``dense`` or ``pairs``), or leave the
    library's choice (``auto``)."""
    if mask == "dense":
        head.DENSE_MASK_DEVICES = ("cpu", "cuda")
    elif mask == "pairs":
        head.DENSE_MASK_DEVICES = ()
        head.DENSE_MASK_MAX_ENTRIES = 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument(
        "--quick", action="store_true", help="small grid: B in {64, 256}, M in {1, 4}"
    )
    parser.add_argument("--batches", type=int, nargs="+", default=None, help="B values (images)")
    parser.add_argument("--views", type=int, nargs="+", default=None, help="M values (positives)")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.5)
    parser.add_argument("--d-pos", type=float, default=1.0)
    parser.add_argument("--d-neg", type=float, default=10.0)
    parser.add_argument(
        "--repeats", type=int, default=None, help="timed calls per loss (default: by B)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads (default 1: on a shared machine a 2-thread OpenMP barrier stalls whenever "
        "another process holds a core, which swamps the comparison; 0 = torch's default)",
    )
    parser.add_argument(
        "--mask",
        choices=["auto", "dense", "pairs"],
        default="auto",
        help="how `ours` marks its non-negatives: auto = as the library chooses (dense [n, N] mask "
        "on CUDA and up to DENSE_MASK_MAX_ENTRIES, index pairs above it on the CPU); dense or "
        "pairs forces one path on every device",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the tables to this file")
    args = parser.parse_args(argv)
    set_mask_path(args.mask)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    if device.type == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    batches = args.batches or ([64, 256] if args.quick else [64, 256, 1024, 4096])
    views = args.views or ([1, 4] if args.quick else [1, 2, 4, 8])

    def repeats_for(batch: int) -> int:
        if args.repeats:
            return args.repeats
        if device.type == "cuda":
            return 25
        return {64: 21, 256: 15, 1024: 7}.get(batch, 3 if batch <= 4096 else 2)

    lines: List[str] = []

    def emit(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    dev_name = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "cpu"
    )
    emit(f"<!-- bench_loss.py {' '.join(sys.argv[1:])} -->")
    emit(
        f"device: {device.type} ({dev_name}), torch {torch.__version__}, threads "
        f"{torch.get_num_threads()}, d = {args.dim}, tau = {args.temperature}, "
        f"d_pos = {args.d_pos}, d_neg = {args.d_neg}, mask {args.mask}"
    )
    emit()
    time_rows: List[str] = []
    mem_rows: List[str] = []
    moco_rows: List[str] = []
    start_all = time.perf_counter()
    for batch in batches:
        for num_pos in views:
            calls = make_calls(
                batch, num_pos, args.dim, device, args.temperature, args.d_pos, args.d_neg
            )
            times = time_interleaved(calls, repeats_for(batch), device)
            mems = {name: peak_bytes(call, device) for name, call in calls.items()}
            t, m = times, mems
            time_rows.append(
                f"| {batch} | {num_pos} | {_ms(t['solo_simclr'])} | {_ms(t['ours'])} | "
                f"{_ms(t['ours+attn'])} | {_ms(t['authors'])} | "
                f"**{_ratio(t['ours'], t['solo_simclr'])}** | {_ratio(t['ours+attn'], t['solo_simclr'])} | "
                f"**{_ratio(t['ours'], t['authors'])}** |"
            )
            mem_rows.append(
                f"| {batch} | {num_pos} | {_mb(m['solo_simclr'])} | {_mb(m['ours'])} | "
                f"{_mb(m['ours+attn'])} | {_mb(m['authors'])} | "
                f"**{_ratio(m['ours'], m['solo_simclr'])}** | {_ratio(m['ours+attn'], m['solo_simclr'])} | "
                f"{_ratio(m['ours'], m['authors'])} |"
            )
            moco_rows.append(
                f"| {batch} | {num_pos} | {_ms(t['solo_mocov3'])} | {_ms(t['ours_moco'])} | "
                f"**{_ratio(t['ours_moco'], t['solo_mocov3'])}** | {_mb(m['solo_mocov3'])} | "
                f"{_mb(m['ours_moco'])} | {_ratio(m['ours_moco'], m['solo_mocov3'])} |"
            )
            print(
                f"  [done B={batch} M={num_pos} at {time.perf_counter() - start_all:.0f}s]",
                file=sys.stderr,
            )
            del calls
            if device.type == "cuda":
                torch.cuda.empty_cache()

    emit("### SimCLR form: forward+backward time (ms, median)")
    emit()
    emit(
        "solo_simclr gets the 2 anchor views only (z [2B, d]); the others also get M positives [B, M, d]."
    )
    emit()
    emit(
        "| B | M | solo_simclr | ours | ours+attn | authors | ours / solo | ours+attn / solo | ours / authors |"
    )
    emit("|---|---|---|---|---|---|---|---|---|")
    for row in time_rows:
        emit(row)
    emit()
    emit(
        f"### SimCLR form: peak memory of one forward+backward (MiB, {'max_memory_allocated' if device.type == 'cuda' else 'profiler allocation events'})"
    )
    emit()
    emit(
        "| B | M | solo_simclr | ours | ours+attn | authors | ours / solo | ours+attn / solo | ours / authors |"
    )
    emit("|---|---|---|---|---|---|---|---|---|")
    for row in mem_rows:
        emit(row)
    emit()
    emit(
        "### MoCo v3 form: one loss call (q [B, d] against gathered keys), time (ms) and peak memory (MiB)"
    )
    emit()
    emit(
        "| B | M | solo_mocov3 ms | ours_moco ms | time ratio | solo_mocov3 MiB | ours_moco MiB | memory ratio |"
    )
    emit("|---|---|---|---|---|---|---|---|")
    for row in moco_rows:
        emit(row)
    emit()

    tau_small, d_neg_small = 0.05, 0.01
    emit(f"### Finite loss and gradients at tau = {tau_small}, d_neg = {d_neg_small} (M = 4)")
    emit()
    emit("| B | solo_simclr | ours | authors | ours_moco |")
    emit("|---|---|---|---|---|")
    for batch in batches:
        ok = loss_value_finite(batch, 4, args.dim, device, tau_small, d_neg_small)
        emit(
            f"| {batch} | {'yes' if ok['solo_simclr'] else 'NO'} | {'yes' if ok['ours'] else 'NO'} | "
            f"{'yes' if ok['authors'] else 'NO'} | {'yes' if ok['ours_moco'] else 'NO'} |"
        )
    emit()
    for line in op_count_table(
        batches[0], views[-1], args.dim, args.temperature, args.d_pos, args.d_neg
    ):
        emit(line)
    emit()
    emit(f"total wall time {time.perf_counter() - start_all:.0f} s")

    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
