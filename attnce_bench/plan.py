"""What the benchmark runs: presets (budgets) and the list of runs they expand to.

A *run* is one call of solo-learn's ``main_pretrain.py``: one method, one seed, one number of
epochs. Runs with the same ``label`` (same method and settings, different seeds) form one table
row, reported as mean +- std over seeds.

Comparisons:

* ``equal-epoch``: every method for the preset's epochs, same backbone, batch size and seeds.
* ``equal-time``: SimCLR and MoCo v3 retrained for as many epochs as fit in the training time
  that AttentionNCE (resp. MoCo v3 + AttentionNCE) took, measured on the first seed's
  equal-epoch runs. AttentionNCE sees 2 + M views per image, the baselines 2; this is the
  comparison the paper's reviewers asked for.
* ``ablation`` (``--ablation``): AttentionNCE with M in a grid, and d_pos / d_neg grids, varied
  one at a time around the base setting; with ``anchor_grid`` (e.g. ``("mean",)``) also the
  anchor-mean variant ("AttentionNCE*", ``method_kwargs.anchor: mean``) at the base setting (SimCLR
  form only: the MoCo form has no ``anchor`` setting).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

#: The bench methods, in table order (each: a shipped config and overrides, see compose.py).
METHODS: Tuple[str, ...] = ("simclr", "mocov3", "attentionnce", "mocov3_attentionnce")

#: Human-readable names for the tables.
DISPLAY = {
    "simclr": "SimCLR",
    "mocov3": "MoCo v3",
    "attentionnce": "AttentionNCE",
    "mocov3_attentionnce": "MoCo v3 + AttentionNCE",
    "attentionnce_multicrop": "AttentionNCE multicrop",
}

#: Which AttentionNCE method each baseline is time-matched to.
TIME_MATCH: Dict[str, str] = {"simclr": "attentionnce", "mocov3": "mocov3_attentionnce"}

#: Methods whose loss uses the M positive views.
ATTENTION_METHODS = ("attentionnce", "mocov3_attentionnce")


@dataclass(frozen=True)
class Preset:
    """A budget. ``num_train``/``num_val`` only apply to the embedded Fashion-MNIST data."""

    name: str
    num_train: int
    num_val: int
    epochs: int
    batch_size: int
    seeds: Tuple[int, ...]
    num_workers: int
    #: Lightning's limit_train_batches / limit_val_batches (None = whole epoch).
    limit_train_batches: Optional[int] = None
    limit_val_batches: Optional[int] = None
    description: str = ""
    #: Epoch budgets of ``--frontier``.
    frontier_epochs: Tuple[int, ...] = (2, 4, 8)


PRESETS: Dict[str, Preset] = {
    # One real end-to-end pass of everything (tests, CI): 1 epoch of 6 batches of 16 images.
    # No limit_val_batches: solo's kNN takes its class count from the validation targets it saw,
    # and the (class-sorted) val folder must be read whole to hold every class.
    "smoke": Preset(
        name="smoke",
        num_train=96,
        num_val=40,
        epochs=1,
        batch_size=16,
        seeds=(0,),
        num_workers=0,
        frontier_epochs=(1, 2),
        description="micro budget for tests: 1 seed, 1 epoch of 6 batches; numbers are meaningless",
    ),
    # The README's quick start: sized for about 15-20 minutes on 2 CPU cores (see docs/results.md).
    "default": Preset(
        name="default",
        num_train=1200,
        num_val=1000,
        epochs=4,
        batch_size=64,
        seeds=(0, 1),
        num_workers=2,
        description="embedded default: Fashion-MNIST subset, 2 seeds, ~15-20 min on 2 CPU cores",
    ),
    # The solo-learn calibration scale (docs/solo-learn.md): hours on a CPU, minutes on a GPU.
    "long": Preset(
        name="long",
        num_train=6000,
        num_val=2000,
        epochs=10,
        batch_size=128,
        seeds=(0, 1, 2),
        num_workers=2,
        description="6,000 images, 10 epochs, 3 seeds: a few hours on 2 CPU cores",
    ),
}


@dataclass(frozen=True)
class RunSpec:
    """One pretraining run.

    Attributes:
        label: table row, e.g. "AttentionNCE (M=2)"; runs sharing it are averaged over seeds.
        method: a bench method (attnce_bench.compose.METHOD_RECIPES).
        comparison: "equal-epoch", "equal-time" or "ablation".
        seed: the run's seed.
        epochs: max_epochs; 0 for equal-time runs until the first seed's timings fix it.
        num_positives: M (0 for SimCLR / MoCo v3).
        settings: extra dotted config values, e.g. {"method_kwargs.d_pos": 2.0}.
        matched_to: for equal-time runs, the label whose training time they match.
    """

    label: str
    method: str
    comparison: str
    seed: int
    epochs: int
    num_positives: int
    settings: Tuple[Tuple[str, object], ...] = ()
    matched_to: Optional[str] = None

    @property
    def key(self) -> str:
        """Folder name of the run: unique within a benchmark (frontier runs differ by epochs)."""
        safe = "".join(ch if ch.isalnum() else "-" for ch in self.label).strip("-")
        while "--" in safe:
            safe = safe.replace("--", "-")
        if self.comparison == "frontier":
            return f"frontier/{safe}/e{self.epochs}/seed{self.seed}"
        return f"{self.comparison}/{safe}/seed{self.seed}"

    def with_epochs(self, epochs: int) -> "RunSpec":
        return RunSpec(
            self.label,
            self.method,
            self.comparison,
            self.seed,
            epochs,
            self.num_positives,
            self.settings,
            self.matched_to,
        )


def _fmt(value: float) -> str:
    return f"{value:g}"


#: Values of ``method_kwargs.anchor`` (methods/attentionnce.py's ANCHOR_MODES; not imported, so
#: that planning needs no solo-learn).
ANCHOR_MODES: Tuple[str, ...] = ("views", "mean")


def attention_label(
    method: str,
    m: int,
    d_pos: Optional[float] = None,
    d_neg: Optional[float] = None,
    anchor: Optional[str] = None,
) -> str:
    parts = [f"M={m}"]
    if anchor is not None:
        parts.append(f"anchor={anchor}")
    if d_pos is not None:
        parts.append(f"d_pos={_fmt(d_pos)}")
    if d_neg is not None:
        parts.append(f"d_neg={_fmt(d_neg)}")
    return f"{DISPLAY[method]} ({', '.join(parts)})"


@dataclass
class PlanOptions:
    """Switches of :func:`build_plan` (from the command line)."""

    methods: Sequence[str] = METHODS
    seeds: Sequence[int] = (0, 1)
    epochs: int = 3
    num_positives: int = 4
    extra_m: Sequence[int] = (2,)
    time_matched: bool = True
    ablation: bool = False
    ablation_method: str = "attentionnce"
    m_grid: Sequence[int] = (1, 2, 4)
    dpos_grid: Sequence[float] = (0.5, 1.0, 2.0, 4.0)
    dneg_grid: Sequence[float] = (0.5, 1.0, 10.0)
    base_d_pos: float = 1.0
    base_d_neg: float = 10.0
    #: ``method_kwargs.anchor`` values to add to the ablation ("views" is the base, not repeated).
    anchor_grid: Sequence[str] = ()
    # Filled by the caller for labels: the d values the method configs use.
    extra: Dict[str, object] = field(default_factory=dict)


def build_plan(opts: PlanOptions) -> List[RunSpec]:
    """Expand the options into the ordered list of runs.

    Order: for each seed, the equal-epoch runs, then (ablation runs,) then the equal-time runs.
    The first seed's equal-epoch runs come first so that the equal-time epochs can be fixed from
    their timings before any equal-time run starts.

    Raises:
        ValueError: unknown method names, or empty seeds.
    """
    unknown = [m for m in opts.methods if m not in METHODS]
    if unknown:
        raise ValueError(f"--methods: unknown {unknown}; allowed values are {list(METHODS)}")
    if opts.ablation_method not in ATTENTION_METHODS:
        raise ValueError(
            f"--ablation-method={opts.ablation_method!r}: allowed values are {list(ATTENTION_METHODS)}"
        )
    if not opts.seeds:
        raise ValueError("--seeds: at least one seed is needed")
    if opts.epochs < 1:
        raise ValueError(f"--epochs={opts.epochs}: must be >= 1")
    if opts.num_positives < 1:
        raise ValueError(f"--num-positives={opts.num_positives}: must be >= 1")
    bad_anchor = [a for a in opts.anchor_grid if a not in ANCHOR_MODES]
    if bad_anchor:
        raise ValueError(
            f"--anchor-grid: unknown {bad_anchor}; allowed values are {list(ANCHOR_MODES)}"
        )
    if opts.ablation and opts.anchor_grid and opts.ablation_method != "attentionnce":
        raise ValueError(
            f"--anchor-grid needs --ablation-method=attentionnce (method_kwargs.anchor is a setting "
            f"of the SimCLR form only), got --ablation-method={opts.ablation_method!r}"
        )

    runs: List[RunSpec] = []
    for seed in opts.seeds:
        seed_runs: List[RunSpec] = []
        for method in opts.methods:
            if method in ATTENTION_METHODS:
                seed_runs.append(
                    RunSpec(
                        attention_label(method, opts.num_positives),
                        method,
                        "equal-epoch",
                        seed,
                        opts.epochs,
                        opts.num_positives,
                    )
                )
            else:
                seed_runs.append(
                    RunSpec(DISPLAY[method], method, "equal-epoch", seed, opts.epochs, 0)
                )
        # AttentionNCE with fewer positive views (the rebuttal's M = 2), SimCLR form.
        if "attentionnce" in opts.methods:
            for m in opts.extra_m:
                if m != opts.num_positives:
                    seed_runs.append(
                        RunSpec(
                            attention_label("attentionnce", m),
                            "attentionnce",
                            "equal-epoch",
                            seed,
                            opts.epochs,
                            m,
                        )
                    )
        if opts.ablation:
            seed_runs.extend(_ablation_runs(opts, seed))
        if opts.time_matched:
            for base, target in TIME_MATCH.items():
                if base in opts.methods and target in opts.methods:
                    seed_runs.append(
                        RunSpec(
                            f"{DISPLAY[base]} (time of {DISPLAY[target]})",
                            base,
                            "equal-time",
                            seed,
                            0,
                            0,
                            matched_to=attention_label(target, opts.num_positives),
                        )
                    )
        runs.extend(seed_runs)
    return runs


def _ablation_runs(opts: PlanOptions, seed: int) -> List[RunSpec]:
    method = opts.ablation_method
    out: List[RunSpec] = []
    seen = set()

    def add(m: int, d_pos: float, d_neg: float) -> None:
        if (m, d_pos, d_neg) in seen:
            return
        if (m, d_pos, d_neg) == (opts.num_positives, opts.base_d_pos, opts.base_d_neg) and (
            method in opts.methods
        ):
            return  # the equal-epoch run of the method is this setting; the report reuses it
        seen.add((m, d_pos, d_neg))
        out.append(
            RunSpec(
                attention_label(method, m, d_pos, d_neg),
                method,
                "ablation",
                seed,
                opts.epochs,
                m,
                (("method_kwargs.d_pos", float(d_pos)), ("method_kwargs.d_neg", float(d_neg))),
            )
        )

    for m in opts.m_grid:
        add(int(m), opts.base_d_pos, opts.base_d_neg)
    for d_pos in opts.dpos_grid:
        add(opts.num_positives, float(d_pos), opts.base_d_neg)
    for d_neg in opts.dneg_grid:
        add(opts.num_positives, opts.base_d_pos, float(d_neg))
    for anchor in dict.fromkeys(opts.anchor_grid):
        if anchor == "views":
            continue  # the base setting (the equal-epoch run or the grids above)
        out.append(
            RunSpec(
                attention_label(
                    method, opts.num_positives, opts.base_d_pos, opts.base_d_neg, anchor
                ),
                method,
                "ablation",
                seed,
                opts.epochs,
                opts.num_positives,
                (
                    ("method_kwargs.d_pos", float(opts.base_d_pos)),
                    ("method_kwargs.d_neg", float(opts.base_d_neg)),
                    ("method_kwargs.anchor", anchor),
                ),
            )
        )
    return out


def matched_epochs(
    base_epochs: int, base_seconds_per_epoch: float, target_seconds_per_epoch: float
) -> int:
    """Epochs a baseline needs to train as long as the target trained in ``base_epochs`` epochs.

    Rounded to the nearest epoch, never fewer than ``base_epochs`` (the baselines are the cheaper
    methods; a noisy timing must not give them less than the equal-epoch budget).
    """
    if base_seconds_per_epoch <= 0 or not math.isfinite(base_seconds_per_epoch):
        raise ValueError(f"baseline seconds per epoch {base_seconds_per_epoch} must be > 0")
    ratio = target_seconds_per_epoch / base_seconds_per_epoch
    return max(base_epochs, int(round(base_epochs * ratio)))
