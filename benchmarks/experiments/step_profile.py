"""Where a training step's time goes, at the benchmark's settings, and what cuts it.

SimCLR and AttentionNCE (M = 4) train ``--epochs`` (default 2) epochs of the preset's budget under
each variant below; the last epoch's phases come from the plugin's run recorder
(``diagnostics.record``: loader wait, training_step, backward, the rest of the step, validation
with the online kNN). The loss's own share of training_step is timed apart, forward and backward on
projections of the step's shapes (:func:`loss_seconds`). Every variant trains the same thing; only
how the work is scheduled differs::

    python3 -m benchmarks --experiment step_profile --seeds 0 --out bench_out/step_profile
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, List, Sequence, Tuple

import torch

from attnce_plugin.callbacks.recorder import PHASES
from benchmarks.options import Options
from benchmarks.report import get, table
from benchmarks.runner import read_record
from benchmarks.runs import Run, attention_run

#: (name, overrides): how the same training is scheduled. The first is the benchmark's own.
VARIANTS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("bench (2 workers)", ()),
    ("0 workers (data in the step)", ("++data.num_workers=0",)),
    ("1 worker", ("++data.num_workers=1",)),
    ("2 workers, no channels_last", ("++performance.disable_channel_last=True",)),
)


def runs(seeds: Sequence[int], epochs: int, variants=VARIANTS) -> List[Run]:
    out = []
    for seed in seeds:
        for i, (name, ovr) in enumerate(variants):
            group = f"v{i}"
            out.append(Run(f"SimCLR [{name}]", "simclr", "profile", seed, epochs, ovr, group=group))
            att = attention_run("attentionnce", 4, "profile", seed, epochs)
            out.append(Run(f"{att.label} [{name}]", "attentionnce", "profile", seed, epochs,
                           att.settings + ovr, group=group))  # fmt: skip
    return out


def loss_seconds(method: str, batch: int, m: int = 4, dim: int = 128, repeats: int = 20) -> float:
    """Median seconds of the loss's forward and backward on random projections of one step."""
    from solo.losses.simclr import simclr_loss_func

    from attnce_plugin.losses import attentionnce_loss_func
    from benchmarks.timing import median, time_interleaved

    g = torch.Generator().manual_seed(0)
    z = torch.randn(2 * batch, dim, generator=g, requires_grad=True)
    p = torch.randn(batch, m, dim, generator=g, requires_grad=True)
    idx = torch.arange(batch)

    def call() -> None:
        if method == "simclr":
            loss = simclr_loss_func(z, idx.repeat(2), temperature=0.5)
        else:
            loss = attentionnce_loss_func(z, p, idx, temperature=0.5, d_pos=1.0, d_neg=10.0)
        loss.backward()

    return median(time_interleaved({method: call}, repeats, torch.device("cpu"))[method])


def profile_rows(results: Sequence[Any], batch: int) -> List[List[str]]:
    """One row per run: per-step milliseconds of each phase in its last epoch, images / s."""
    rows, losses = [], {}
    for r in results:
        if get(r, "status") != "ok" or get(r, "comparison") != "profile":
            continue
        record = Path(get(r, "run_dir")) / "record.jsonl"
        last = read_record(record)[-1]
        steps = sum(s["epoch"] == last["epoch"] - 1 for s in read_record(record, "step"))
        method = get(r, "method")
        losses.setdefault(method, loss_seconds(method, batch))
        ms = {p: f"{1000 * last[p + '_seconds'] / steps:.0f}" for p in PHASES}
        rows.append(
            [get(r, "label"), str(steps), ms["data"], ms["forward"], f"{1000 * losses[method]:.0f}",
             ms["backward"], ms["optimizer"], f"{last['train_seconds']:.1f}",
             f"{last['val_seconds']:.1f}", f"{steps * batch / last['train_seconds']:.0f}"]
        )  # fmt: skip
    return rows


HEAD = [
    "run", "steps", "data ms/step", "training_step ms/step", "of which loss ms", "backward ms/step",
    "rest of step ms", "train s/epoch", "validation + kNN s", "images / s",
]  # fmt: skip


def main(opts: Options, command: str) -> int:
    from benchmarks.__main__ import budget, prepare_data, train_and_report
    from benchmarks.experiments import out_dir, write_table

    out = out_dir(opts, "step_profile")
    opts = replace(opts, offline_probe=False)  # timing only
    data = prepare_data(opts, out)
    the_runs = runs(list(opts.seeds or (0,)), opts.epochs or 2)
    results, _ = train_and_report(opts, the_runs, data, out, command, "step_profile")
    if opts.dry_run:
        return 0
    write_table(out, command, table(HEAD, profile_rows(results, budget(opts, data).batch_size)))
    return 0 if all(get(r, "status") == "ok" for r in results) else 1
