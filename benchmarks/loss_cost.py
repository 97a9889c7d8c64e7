"""The loss alone, forward + backward: AttentionNCE's SimCLR form against solo-learn's SimCLR loss
and against the authors' own function, on the same random projections::

    python3 -m benchmarks.loss_cost --authors <a checkout of github.com/liubin06/AttentioNCE>

Each round times every loss once, in turn (interleaved, so that a slower stretch of the machine
hits them all); a cell is the median of the rounds. The authors' ``AttentioNCE`` and
``get_negative_mask`` are read from their ``image/main.py`` (never copied here) and run as they
are, fed unit vectors as their model gives them; without ``--authors`` their column is empty."""

from __future__ import annotations

import argparse
import ast
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

from benchmarks.report import table

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def authors_loss(checkout: Path, feature_dim: int, tau: float, d_pos: float, d_neg: float) -> Loss:
    """The authors' loss of (anchors [2B, d], positives [B, 4, d]), from their source file."""
    source = (checkout / "image" / "main.py").read_text()
    wanted = {"get_negative_mask", "AttentioNCE"}
    defs = [n for n in ast.parse(source).body if getattr(n, "name", None) in wanted]
    if {n.name for n in defs} != wanted:
        raise ValueError(f"{checkout}/image/main.py: expected the functions {sorted(wanted)}")
    # Their module globals: the feature size and the device, as their script sets them.
    scope = {"torch": torch, "feature_dim": feature_dim, "device": torch.device("cpu")}
    exec(compile(ast.Module(defs, type_ignores=[]), "AttentioNCE/image/main.py", "exec"), scope)

    def loss(anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        b = positives.shape[0]
        a, p = F.normalize(anchors, dim=-1), F.normalize(positives, dim=-1)
        views = [a[:b], a[b:], *p.unbind(1)]
        return scope["AttentioNCE"](*views, b, tau, d_pos, d_neg)

    return loss


def losses(args: argparse.Namespace) -> Dict[str, Loss]:
    from solo.losses.simclr import simclr_loss_func

    from attnce_plugin.losses import attentionnce_loss_func

    tau, d_pos, d_neg = args.temperature, args.d_pos, args.d_neg
    out: Dict[str, Loss] = {
        "solo-learn SimCLR (2 views)": lambda a, p: simclr_loss_func(
            a, torch.arange(len(p)).repeat(2), temperature=tau
        ),
        "AttentionNCE (ours)": lambda a, p: attentionnce_loss_func(
            a, p, torch.arange(len(p)), tau, d_pos, d_neg
        ),
    }
    if args.authors:
        out["AttentionNCE (the authors')"] = authors_loss(args.authors, args.dim, tau, d_pos, d_neg)
    return out


def seconds(loss: Loss, anchors: torch.Tensor, positives: torch.Tensor) -> float:
    a, p = anchors.detach().requires_grad_(), positives.detach().requires_grad_()
    start = time.perf_counter()
    loss(a, p).backward()
    return time.perf_counter() - start


def measure(args: argparse.Namespace) -> List[Dict]:
    """One sitting: per batch size and loss, the median ms over the rounds, their range, and
    the ratios to SimCLR's and of the authors' to this one's (None without theirs)."""
    rows: List[Dict] = []
    gen = torch.Generator().manual_seed(0)
    for b in args.batch_sizes:
        anchors = torch.randn(2 * b, args.dim, generator=gen)
        positives = torch.randn(b, args.num_positives, args.dim, generator=gen)
        funcs = losses(args)
        times: Dict[str, List[float]] = {name: [] for name in funcs}
        for i in range(args.warmup + args.rounds):
            for name, loss in funcs.items():
                took = seconds(loss, anchors, positives)
                if i >= args.warmup:
                    times[name].append(1000 * took)
        ms = {name: statistics.median(t) for name, t in times.items()}
        simclr, authors = ms["solo-learn SimCLR (2 views)"], ms.get("AttentionNCE (the authors')")
        for name, t in ms.items():
            ratios = dict(to_simclr=t / simclr, authors_over=authors / t if authors else None)
            rows.append(dict(b=b, loss=name, ms=t, low=min(times[name]), high=max(times[name])))
            rows[-1].update(ratios)
        print(f"  [B {b}: {', '.join(f'{k} {v:.1f} ms' for k, v in ms.items())}]", file=sys.stderr)
    return rows


KEYS = ("to_simclr", "authors_over")


def _ratio(value: Optional[float]) -> str:
    return "not run" if value is None else f"{value:.2f}x"


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add = p.add_argument
    add("--authors", type=Path, help="a checkout of github.com/liubin06/AttentioNCE")
    add("--batch-sizes", type=int, nargs="+", default=[256, 1024])
    add("--num-positives", type=int, default=4, help="M (the authors' code takes 4 only)")
    add("--dim", type=int, default=128)
    add("--temperature", type=float, default=0.5)
    add("--d-pos", type=float, default=1.0)
    add("--d-neg", type=float, default=1.0)
    add("--threads", type=int, default=2)
    add("--rounds", type=int, default=15)
    add("--warmup", type=int, default=3)
    add("--sittings", type=int, default=1, help="measurements one after the other (median)")
    args = p.parse_args(argv)
    if args.authors and args.num_positives != 4:
        p.error("--authors: the authors' function takes exactly 4 positives")
    torch.set_num_threads(args.threads)
    sittings = [measure(args) for _ in range(args.sittings)]
    head = f"torch {torch.__version__}, CPU, {torch.get_num_threads()} threads, fp32, d {args.dim}"
    head += f", M {args.num_positives}, tau {args.temperature}, d_pos {args.d_pos}, d_neg "
    head += f"{args.d_neg}; forward + backward, median of {args.rounds} interleaved rounds after "
    head += f"{args.warmup} warm-up rounds (range: their min-max)"
    cols = ["B", "loss", "ms", "range", "to SimCLR", "the authors' time over this"]
    out = [f"<!-- {' '.join(['python3 -m benchmarks.loss_cost', *argv])} -->", "", head]
    for i, rows in enumerate(sittings, 1):
        body = [
            [r["b"], r["loss"], f"{r['ms']:.1f}", f"{r['low']:.1f}-{r['high']:.1f}"] for r in rows
        ]
        body = [c + [_ratio(r["to_simclr"]), _ratio(r["authors_over"])] for c, r in zip(body, rows)]
        out += ["", *([f"Sitting {i}:", ""] if len(sittings) > 1 else []), table(cols, body)]
    if len(sittings) > 1:  # each ratio's median over the sittings
        median = [
            [r["b"], r["loss"]]
            + [_ratio(statistics.median(s[i][k] for s in sittings) if r[k] else None) for k in KEYS]
            for i, r in enumerate(sittings[0])
        ]
        cols = ["B", "loss", "to SimCLR", "the authors' time over this"]
        out += ["", f"Median over the {len(sittings)} sittings:", "", table(cols, median)]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
