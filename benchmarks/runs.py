"""The run table: each benchmark method is a shipped config plus the overrides that make it, and
the run lists of the benchmark (equal epochs, equal time, ablations) built from it.

A *run* is one call of solo-learn's ``main_pretrain.py``: one method, one seed, one number of
epochs. Runs with the same ``label`` form one table row, reported as mean ± std over seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

#: method -> (shipped primary config, in pretrain/<family>/, overrides that make the method). The
#: SimCLR and MoCo v3 baselines are the AttentionNCE configs with solo-learn's own loss and no
#: positive crops (each switch is tested step for step against solo-learn's simclr / mocov3).
METHODS: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "simclr": ("attentionnce", ("++method_kwargs.loss=simclr", "++views.num_positives=0")),
    "mocov3": ("mocov3_attentionnce", ("++method_kwargs.loss=mocov3", "++views.num_positives=0")),
    "attentionnce": ("attentionnce", ()),
    "mocov3_attentionnce": ("mocov3_attentionnce", ()),
    "attentionnce_multicrop": ("attentionnce_multicrop", ()),
    # The two controls of issue 19: the same 2 + M views without the attention (solo-learn's
    # SimCLR loss on every view), and AttentionNCE with its attention switched off (d_pos, d_neg
    # -> inf: alpha uniform to 1e-6, beta = 1 + K * 1e-6: the mean prototype, plain negatives).
    "simclr_views": ("attentionnce", ("++method_kwargs.loss=simclr_all_views",)),
    "attentionnce_off": (
        "attentionnce",
        ("++method_kwargs.d_pos=1000000.0", "++method_kwargs.d_neg=1000000.0"),
    ),
}


def crop_scale_overrides(method: str, scale: float) -> List[str]:
    """A method's full-size crops at RandomResizedCrop scale range [scale, 1]. solo-learn reads
    one ``rrc.crop_min_scale`` per augmentation pipeline: the SimCLR form has the anchors' pipeline
    and the positives' (whose scale is ``views.positive_min_scale``), the MoCo form three. The
    multicrop positives keep their own range, whose maximum is below 1 (small crops)."""
    if METHODS[method][0].startswith("mocov3"):
        return [f"++augmentations.{i}.rrc.crop_min_scale={scale}" for i in range(3)]
    anchors = [f"++augmentations.0.rrc.crop_min_scale={scale}"]
    return (
        anchors
        if method == "attentionnce_multicrop"
        else anchors + [f"++views.positive_min_scale={scale}"]
    )


@dataclass(frozen=True)
class DatasetSpec:
    """A ``--dataset`` choice: the shipped config family, solo-learn's ``data.dataset``, and the
    validation size the benchmark's hook sets for ``custom`` data (0: solo-learn's own)."""

    family: str
    solo_dataset: str
    val_size: int = 0


#: Fashion-MNIST (32 px) runs the CIFAR family's configs as ``custom`` data, so solo-learn gives
#: it ResNet's ImageNet stem (its CIFAR stem is ~6x slower on a CPU).
DATASETS: Dict[str, DatasetSpec] = {
    "fashion_mnist": DatasetSpec("cifar", "custom", val_size=32),
    "cifar10": DatasetSpec("cifar", "cifar10"),
    "cifar100": DatasetSpec("cifar", "cifar100"),
    "stl10": DatasetSpec("stl10", "stl10"),
    "imagenet100": DatasetSpec("imagenet-100", "imagenet100"),
    "custom": DatasetSpec("custom", "custom"),
}

#: The methods ``--methods`` runs by default, in table order.
BENCH_METHODS: Tuple[str, ...] = ("simclr", "mocov3", "attentionnce", "mocov3_attentionnce")
#: Every method ``--methods`` accepts (the controls by name: ``--methods ...,simclr_views``).
ALL_METHODS: Tuple[str, ...] = BENCH_METHODS + ("simclr_views", "attentionnce_off")

DISPLAY = {
    "simclr": "SimCLR",
    "mocov3": "MoCo v3",
    "attentionnce": "AttentionNCE",
    "mocov3_attentionnce": "MoCo v3 + AttentionNCE",
    "attentionnce_multicrop": "AttentionNCE multicrop",
    "simclr_views": "SimCLR on the same views",
    "attentionnce_off": "AttentionNCE, attention off",
}

#: The reference rows, probed on the same images: the untrained backbone, the raw pixels.
REFERENCE_LABELS: Tuple[str, str] = ("random init (no pretraining)", "raw pixels")

#: baseline -> the AttentionNCE method whose training time its equal-time run matches.
TIME_MATCH: Dict[str, str] = {"simclr": "attentionnce", "mocov3": "mocov3_attentionnce"}

#: The AttentionNCE methods (``--ablation-method``).
ATTENTION_METHODS: Tuple[str, ...] = ("attentionnce", "mocov3_attentionnce")
#: Methods whose rows see M positive views (``views.num_positives`` = M).
POSITIVE_METHODS: Tuple[str, ...] = ATTENTION_METHODS + ("simclr_views", "attentionnce_off")


@dataclass(frozen=True)
class Preset:
    """A budget; ``num_train`` / ``num_val`` apply to the embedded Fashion-MNIST data."""

    num_train: int
    num_val: int
    epochs: int
    batch_size: int
    seeds: Tuple[int, ...]
    num_workers: int
    description: str
    frontier_epochs: Tuple[int, ...] = (2, 4, 8)
    methods: Tuple[str, ...] = BENCH_METHODS
    #: every crop's RandomResizedCrop minimum scale (None: the shipped configs' 0.08)
    crop_min_scale: Optional[float] = None
    #: ``--set`` values of the preset: after each run's own settings, before the command line's
    sets: Tuple[str, ...] = ()


PRESETS: Dict[str, Preset] = {
    # No limit_val_batches: solo's kNN takes its class count from the validation targets it saw,
    # and the class-sorted val folder must be read whole to hold every class.
    "smoke": Preset(
        96,
        40,
        1,
        16,
        (0,),
        0,
        "tests: 1 seed, 1 epoch of 6 batches; numbers are meaningless",
        (1, 2),
    ),
    "default": Preset(
        1200, 1000, 4, 64, (0, 1), 2, "the quick demo: 2 seeds, ~13 min on 2 CPU cores"
    ),
    "long": Preset(6000, 2000, 10, 128, (0, 1, 2), 2, "6,000 images, 10 epochs, 3 seeds: hours"),
    # 0 workers: on 2 cores the loader workers slow the step more than they save (step_profile).
    # Our recipe, not the paper's (crop 0.08, temperature 0.5): the milder crop and solo-learn's
    # SimCLR temperature took SimCLR to the edge of step 1 (docs/results.md); 29 epochs of
    # AttentionNCE (M=4) take about the time of that run's 91 SimCLR epochs.
    "reference": Preset(
        6000, 2000, 29, 128, (0, 1, 2), 0,
        "every method and control, 3 seeds, crop scale [0.5, 1], temperature 0.2, at the edge "
        "of the learning regime (docs/results.md); ~40 h on 2 CPU cores, run in parts (--part)",
        methods=ALL_METHODS, crop_min_scale=0.5, sets=("method_kwargs.temperature=0.2",),
    ),  # fmt: skip
}

#: The reference preset's parts, per seed: groups of rows that train in at most about 150
#: minutes on 2 CPU cores (docs/results.md: their seconds per epoch). The equal-time rows take
#: their epochs from the first seed's timings: seed0-a before any "b", seed0-c and -f before "g".
REFERENCE_GROUPS: Tuple[Tuple[str, ...], ...] = (
    ("SimCLR", "AttentionNCE (M=4)"),
    ("SimCLR (time of AttentionNCE)",),
    ("MoCo v3", "AttentionNCE (M=2)"),
    ("SimCLR on the same views (M=4)",),
    ("AttentionNCE, attention off (M=4)",),
    ("MoCo v3 + AttentionNCE (M=4)",),
    ("MoCo v3 (time of MoCo v3 + AttentionNCE)",),
)


def reference_parts(seeds: Sequence[int]) -> Dict[str, Tuple[int, Tuple[str, ...]]]:
    """``--part`` name -> (seed, row labels): ``seed0-a``, ``seed0-b``, ..."""
    return {
        f"seed{seed}-{chr(ord('a') + i)}": (seed, labels)
        for seed in seeds
        for i, labels in enumerate(REFERENCE_GROUPS)
    }


@dataclass(frozen=True)
class Run:
    """One pretraining run.

    Attributes:
        label: its table row, e.g. "AttentionNCE (M=2)".
        method: a :data:`METHODS` key.
        comparison: its table ("equal-epoch", "equal-time", "ablation", "frontier", ...).
        seed: ``seed`` of the config.
        epochs: ``max_epochs``; 0 for an equal-time run until the first seed's timings fix it.
        settings: overrides of this run on top of the method's (``key=value``).
        matched_to: an equal-time run's label of the row whose training time it matches.
        group: a folder level above the comparison (experiments: one per data variant).
    """

    label: str
    method: str
    comparison: str
    seed: int
    epochs: int
    settings: Tuple[str, ...] = ()
    matched_to: Optional[str] = None
    group: str = ""

    @property
    def key(self) -> str:
        """The run's folder under ``<out>/runs/``: unique within a benchmark."""
        safe = "-".join("".join(c if c.isalnum() else " " for c in self.label).split())
        parts = [self.group, self.comparison, safe]
        if self.comparison == "frontier":
            parts.append(f"e{self.epochs}")
        return "/".join(p for p in parts if p) + f"/seed{self.seed}"

    def with_epochs(self, epochs: int) -> "Run":
        return replace(self, epochs=epochs)


def _num(value: float) -> str:
    return f"{value:g}"


def attention_run(
    method: str, m: int, comparison: str, seed: int, epochs: int, **settings: object
) -> Run:
    """An AttentionNCE run with M positives and ``method_kwargs`` settings (label lists them)."""
    extra = [f"{k}={_num(v) if isinstance(v, float) else v}" for k, v in settings.items()]
    label = f"{DISPLAY[method]} ({', '.join([f'M={m}', *extra])})"
    overrides = (f"++views.num_positives={m}",) + tuple(
        f"++method_kwargs.{k}={str(v).lower() if isinstance(v, bool) else v}"
        for k, v in settings.items()
    )
    return Run(label, method, comparison, seed, epochs, overrides)


@dataclass(frozen=True)
class Grids:
    """The ablation's grids, each varied alone around the shipped setting (``--ablation``)."""

    method: str = "attentionnce"
    m: Tuple[int, ...] = (1, 2, 4)
    d_pos: Tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    d_neg: Tuple[float, ...] = (0.5, 1.0, 10.0)
    anchor: Tuple[str, ...] = ()


def bench_runs(
    methods: Sequence[str],
    seeds: Sequence[int],
    epochs: int,
    num_positives: int = 4,
    extra_m: Sequence[int] = (2,),
    time_matched: bool = True,
    grids: Optional[Grids] = None,
    base: Tuple[float, float] = (1.0, 10.0),
) -> List[Run]:
    """The benchmark's runs, seed by seed: equal epochs, (the ablation,) equal time.

    The first seed's equal-epoch runs come first: their timings fix the equal-time epochs.
    ``base`` is the shipped (d_pos, d_neg) that the ablation varies around.

    Raises:
        ValueError: an unknown method or ablation method, no seeds, epochs or M below 1.
    """
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown:
        raise ValueError(f"--methods: unknown {unknown}; allowed values are {list(ALL_METHODS)}")
    if grids is not None and grids.method not in ATTENTION_METHODS:
        raise ValueError(
            f"--ablation-method={grids.method!r}: allowed values are {list(ATTENTION_METHODS)}"
        )
    if grids is not None and grids.anchor and grids.method != "attentionnce":
        raise ValueError("--anchor-grid: method_kwargs.anchor is a setting of attentionnce only")
    if not seeds:
        raise ValueError("--seeds: at least one seed is needed")
    if epochs < 1 or num_positives < 1:
        raise ValueError(f"--epochs={epochs}, --num-positives={num_positives}: must be >= 1")
    runs: List[Run] = []
    for seed in seeds:
        for method in methods:
            if method in POSITIVE_METHODS:
                runs.append(attention_run(method, num_positives, "equal-epoch", seed, epochs))
            else:
                runs.append(Run(DISPLAY[method], method, "equal-epoch", seed, epochs))
        if "attentionnce" in methods:
            for m in extra_m:
                if m != num_positives:
                    runs.append(attention_run("attentionnce", m, "equal-epoch", seed, epochs))
        if grids is not None:
            runs += _ablation(grids, seed, epochs, num_positives, base, methods)
        if time_matched:
            for baseline, target in TIME_MATCH.items():
                if baseline in methods and target in methods:
                    matched = attention_run(target, num_positives, "", 0, 0).label
                    label = f"{DISPLAY[baseline]} (time of {DISPLAY[target]})"
                    runs.append(Run(label, baseline, "equal-time", seed, 0, matched_to=matched))
    return runs


def _ablation(
    grids: Grids,
    seed: int,
    epochs: int,
    num_positives: int,
    base: Tuple[float, float],
    methods: Sequence[str],
) -> List[Run]:
    points = [(int(m), *base) for m in grids.m]
    points += [(num_positives, float(d), base[1]) for d in grids.d_pos]
    points += [(num_positives, base[0], float(d)) for d in grids.d_neg]
    out: List[Run] = []
    for m, d_pos, d_neg in dict.fromkeys(points):
        if (m, d_pos, d_neg) == (num_positives, *base) and grids.method in methods:
            continue  # the method's equal-epoch run is this setting; the report reuses it
        out.append(
            attention_run(grids.method, m, "ablation", seed, epochs, d_pos=d_pos, d_neg=d_neg)
        )
    for anchor in dict.fromkeys(a for a in grids.anchor if a != "views"):
        out.append(
            attention_run(
                grids.method, num_positives, "ablation", seed, epochs,
                d_pos=base[0], d_neg=base[1], anchor=anchor,
            )
        )  # fmt: skip
    return out


def matched_epochs(epochs: int, baseline_s_per_epoch: float, target_s_per_epoch: float) -> int:
    """Epochs a baseline needs to train as long as the target trained in ``epochs`` epochs:
    rounded, never fewer than ``epochs`` (a noisy timing must not cut the equal-epoch budget)."""
    if not baseline_s_per_epoch > 0 or not math.isfinite(baseline_s_per_epoch):
        raise ValueError(f"baseline seconds per epoch {baseline_s_per_epoch} must be > 0")
    return max(epochs, int(round(epochs * target_s_per_epoch / baseline_s_per_epoch)))
