"""The run table: each method a shipped config plus overrides, each table row typed once as a
:class:`Row`, the presets, the run lists (equal epochs, the ablation rows, equal time) built from
them, and what each ablation row is compared with. A run is one call of solo-learn's
``main_pretrain.py``: one row, one seed, one epoch count."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, TypedDict


class Result(TypedDict, total=False):
    """A run's ``result.json``, as the runner writes and the report reads it (records of older
    runners also hold keys no code reads now: config_digest, curve, reused, offline_eff_rank,
    offline_uniformity)."""

    key: str  # its folder under <out>/runs/
    label: str  # its row's label when it trained (the report words it anew: runs.label_of)
    method: str  # a --methods name ("none" for the references)
    comparison: str  # equal-epoch, ablation, equal-time or reference
    seed: int
    epochs: int
    settings: List[str]  # the row's overrides, from which runs.row_of rebuilds its row
    status: str  # ok, failed, skipped, running (killed while training) or incomplete (no result)
    error: str
    matched_to: Optional[str]  # an equal-time run: the row whose time it matches
    epochs_done: int
    wall_seconds: float
    train_seconds: Optional[float]
    seconds_per_epoch: Optional[float]
    peak_mem_mib: Optional[float]
    knn_acc1: Optional[float]  # solo-learn's online kNN and linear at the last epoch
    linear_acc1: Optional[float]
    offline_acc1: float  # benchmarks.probe's, of the last checkpoint
    offline_knn_acc1: float
    offline_l2: float
    cpu: str
    plugin_version: str
    commit: str  # 40 hex digits, "-dirty" where the plugin's tracked code differed
    resumed: Dict[str, Any]  # after_epoch and the commit of the part before
    run_dir: str  # its folder on this machine (empty in the file)


#: The attention off: d -> inf, the mean prototype and plain negatives.
OFF = ("++method_kwargs.d_pos=1000000.0", "++method_kwargs.d_neg=1000000.0")
NO_POSITIVES, LOSS = ("++views.num_positives=0",), "++method_kwargs.loss="
#: ``--methods solo.simclr``: solo-learn's own recipe of a name that is also one of ours.
SOLO = "solo."


@dataclass(frozen=True)
class Method:
    """A row's method: its name in the tables, its config in the data set's family folder, the
    overrides that make it from that config, whether it sees M positive views; ``solo``: the
    config is solo-learn's own (``scripts/pretrain/<family>/``), its recipe as shipped."""

    label: str
    config: str
    overrides: Tuple[str, ...] = ()
    positives: bool = False
    solo: bool = False


#: Ours. SimCLR and MoCo v3 are the AttentionNCE configs with solo-learn's loss, no positives; the
#: two controls: the same 2 + M views without the attention (SimCLR's loss on every view), and OFF.
METHODS: Dict[str, Method] = {
    "simclr": Method("SimCLR", "attentionnce", (LOSS + "simclr", *NO_POSITIVES)),
    "mocov3": Method("MoCo v3", "mocov3_attentionnce", (LOSS + "mocov3", *NO_POSITIVES)),
    "attentionnce": Method("AttentionNCE", "attentionnce", positives=True),
    "mocov3_attentionnce": Method("MoCo v3 + AttentionNCE", "mocov3_attentionnce", positives=True),
    "simclr_views": Method(
        "SimCLR on the same views", "attentionnce", (LOSS + "simclr_all_views",), True
    ),
    "attentionnce_off": Method("AttentionNCE, attention off", "attentionnce", OFF, True),
}


def method_of(name: str) -> Method:
    """Ours, or solo-learn's method ``name`` (``solo.<name>`` where ours has the name too) on its
    own shipped config; ValueError lists the allowed names."""
    if name in METHODS:
        return METHODS[name]
    from solo.methods import METHODS as SOLO_METHODS

    base = name[len(SOLO) :] if name.startswith(SOLO) else name
    if base not in SOLO_METHODS or base in ("base", "linear"):
        theirs = sorted(set(SOLO_METHODS) - set(METHODS) - {"base", "linear"})
        raise ValueError(
            f"--methods: unknown {name!r}; allowed values are ours, {list(METHODS)}, and "
            f"solo-learn's, {theirs} (solo.simclr, solo.mocov3: solo-learn's own recipes)"
        )
    return Method(f"{base} (solo-learn's recipe)", base, solo=True)


#: baseline -> the AttentionNCE method whose training time its equal-time row matches.
TIME_MATCH = {"simclr": "attentionnce", "mocov3": "mocov3_attentionnce"}
#: The reference rows' labels, probed on the same images: the untrained backbone, the raw pixels.
UNTRAINED, PIXELS = "random init (no pretraining)", "raw pixels"


@dataclass(frozen=True)
class Row:
    """A table row: a method at M positives with ``method_kwargs`` (key, value) pairs, in one
    comparison (an equal-time row names the row whose time it matches: not part of its identity,
    which is its method, M, kwargs and comparison)."""

    method: str
    m: int = 0
    kwargs: Tuple[Tuple[str, Any], ...] = ()
    comparison: str = "equal-epoch"
    time_of: Optional["Row"] = field(default=None, compare=False)

    @property
    def label(self) -> str:
        name = method_of(self.method).label
        if self.time_of is not None:
            return f"{name} (time of {method_of(self.time_of.method).label})"
        if not self.m:
            return name
        extra = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.kwargs]
        return f"{name} ({', '.join([f'M={self.m}', *extra])})"

    @property
    def key(self) -> str:
        """Its folder under ``<out>/runs/``, from its identity (a label's wording may change)."""
        words = [self.method, *([f"M{self.m}"] if self.m else [])]
        # No "=" or "+": the folder goes into Hydra overrides (1e+06 is written 1e06).
        words += [
            f"{k}-{v:g}".replace("+", "") if isinstance(v, float) else f"{k}-{v}"
            for k, v in self.kwargs
        ]
        return f"{self.comparison}/{'-'.join(words)}"

    @property
    def overrides(self) -> Tuple[str, ...]:
        out = (f"++views.num_positives={self.m}",) if self.m else ()
        return out + tuple(f"++method_kwargs.{k}={v}" for k, v in self.kwargs)


@dataclass(frozen=True)
class Run:
    """One row on one seed; ``epochs`` is 0 for an equal-time run until timings fix it."""

    row: Row
    seed: int
    epochs: int

    @property
    def key(self) -> str:
        return f"{self.row.key}/seed{self.seed}"


#: The reference preset's rows of its four questions.
ATTN = Row("attentionnce", 4)
MOCO_ATTN = Row("mocov3_attentionnce", 4)
SIMCLR_TIME = Row("simclr", comparison="equal-time", time_of=ATTN)
MOCO_TIME = Row("mocov3", comparison="equal-time", time_of=MOCO_ATTN)
#: A family of comparisons named before its rows trained: (question or "", row a, row b), each
#: line row a minus row b; Holm runs within it.
Comparisons = List[Tuple[str, Row, Row]]
Families = Dict[str, Comparisons]  # by name, the questions first
QUESTIONS: Comparisons = [
    ("Does AttentionNCE beat SimCLR at equal time?", ATTN, SIMCLR_TIME),
    ("Does it beat SimCLR on the same views?", ATTN, Row("simclr_views", 4)),
    ("Is the attention itself responsible?", ATTN, Row("attentionnce_off", 4)),
    ("Does the MoCo form beat MoCo v3 (equal time)?", MOCO_ATTN, MOCO_TIME),
]
QUESTIONS_FAMILY = "the questions"


def row_of(result: Result) -> Row:
    """The :class:`Row` of a ``result.json``, from its method and its row's overrides."""
    m, kwargs = 0, []
    for setting in result.get("settings") or []:
        key, _, value = setting.lstrip("+").partition("=")
        if key == "views.num_positives":
            m = int(value)
        elif key.startswith("method_kwargs."):
            kwargs.append((key.split(".", 1)[1], _value(value)))
    return Row(result["method"], m, tuple(kwargs), result["comparison"])


def identity(result: Result) -> Optional[Tuple[Row, int]]:
    """A trained run's (row, seed), from its record: how a record is found, whatever its folder's
    name (records filed under the older, label-derived keys included); None for the references."""
    if result["comparison"] not in ("equal-epoch", "ablation", "equal-time"):
        return None
    return row_of(result), int(result["seed"])


def label_of(result: Result) -> str:
    """A record's row label as the code words it now (the recorded one where the row is not made
    from its record: equal-time rows, the references, incomplete runs)."""
    if result["comparison"] in ("equal-epoch", "ablation") and result["status"] != "incomplete":
        return row_of(result).label
    return result["label"]


def controls(row: Row) -> List[Row]:
    """An ablation row's controls: SimCLR on the same views and the attention off (at the row's
    temperature), equal-time SimCLR (at the preset's); for the MoCo form the shipped MoCo form and
    MoCo v3; for the ``importance`` form also the same setting in the paper's ``logit`` form."""
    tau = tuple((k, v) for k, v in row.kwargs if k == "temperature")
    out = [Row("simclr_views", row.m, tau), Row("attentionnce_off", row.m, tau)]
    out += [] if tau else [SIMCLR_TIME]
    out = [MOCO_ATTN, Row("mocov3")] if row.method == "mocov3_attentionnce" else out
    if ("neg_weighting", "importance") in row.kwargs:
        logit = tuple(kv for kv in row.kwargs if kv[0] != "neg_weighting")
        out.append(Row(row.method, row.m, logit, "ablation"))
    return [r for r in out if r.label != row.label]


def _value(text: str) -> Any:
    try:
        return float(text)
    except ValueError:
        return text


def parse_row(text: str, m: int) -> Row:
    """``--row [METHOD:]KEY=VALUE,...``: an ablation row of METHOD (default attentionnce) at M
    positives with these ``method_kwargs`` (numbers as floats), varied around the shipped ones."""
    name, _, pairs = text.rpartition(":")
    name, allowed = name or "attentionnce", [n for n, x in METHODS.items() if x.positives]
    if name not in allowed:
        raise ValueError(f"--row {text!r}: method {name!r}; allowed values are {allowed}")
    kwargs = []
    for pair in filter(None, pairs.split(",")):
        key, eq, value = (x.strip() for x in pair.partition("="))
        if not eq or not key or not value:
            raise ValueError(f"--row {text!r}: expected [METHOD:]KEY=VALUE,... , got {pair!r}")
        kwargs.append((key, _value(value)))
    return Row(name, m, tuple(kwargs), "ablation")


#: The 2x2 of imbalance (R > 1: the negatives' push outweighs the positive's pull) and aim (the
#: push on the nearest negatives), and the same rows with the same-class oracle, at M = 4.
OFF_ROW = Row("attentionnce_off", 4)
IMPORTANCE = parse_row("d_pos=1,d_neg=1,neg_weighting=importance", 4)
UNIFORM_IMBALANCE = parse_row("attentionnce_off:neg_temperature=0.15", 4)
PAPERS_FORM = parse_row("d_pos=1,d_neg=1", 4)
TAU_IMPORTANCE = parse_row("d_pos=1,d_neg=0.4,temperature=0.5,neg_weighting=importance", 4)
TAU_OFF = parse_row("attentionnce_off:temperature=0.5", 4)
ORACLE = ("exclude_same_class", "true")
OFF_ORACLE, IMPORTANCE_ORACLE, PAPERS_ORACLE = (
    Row(r.method, 4, r.kwargs + (ORACLE,), "ablation") for r in (OFF_ROW, IMPORTANCE, PAPERS_FORM)
)
TWO_BY_TWO = {
    "balanced": (OFF_ROW, IMPORTANCE),
    "unbalanced": (UNIFORM_IMBALANCE, PAPERS_FORM),
    "balanced, same class excluded": (OFF_ORACLE, IMPORTANCE_ORACLE),
    "unbalanced, same class excluded": (None, PAPERS_ORACLE),
}
#: The reference preset's families: the questions, the 2x2's and the oracle's (each ablation row's
#: lines against its controls are one family more, named by the report).
FAMILIES: Families = {
    QUESTIONS_FAMILY: QUESTIONS,
    "imbalance": [("", UNIFORM_IMBALANCE, OFF_ROW), ("", PAPERS_FORM, UNIFORM_IMBALANCE)],
    "false negatives": [
        ("", IMPORTANCE_ORACLE, OFF_ORACLE),
        ("", PAPERS_ORACLE, OFF_ORACLE),
        ("", OFF_ORACLE, OFF_ROW),
    ],
    "tau 0.5": [("", TAU_IMPORTANCE, TAU_OFF)],
}
#: The paper presets': the paper's own claim at its equal epochs, then the same-view controls.
PAPER_CLAIM = "Does AttentionNCE beat SimCLR at equal epochs (the paper's claim)?"
PAPER_FAMILIES = {QUESTIONS_FAMILY: [(PAPER_CLAIM, ATTN, Row("simclr")), *QUESTIONS[1:3]]}


@dataclass(frozen=True)
class Preset:
    """A preset, or the settings of a command line (the preset with the options it gives): the
    data (``num_train`` / ``num_val``: class-stratified subsets of its splits, None for all), the
    budget and the rows."""

    num_train: Optional[int]
    num_val: Optional[int]
    epochs: int
    batch_size: int
    seeds: Tuple[int, ...]
    description: str = ""
    methods: Tuple[str, ...] = ("simclr", "mocov3", "attentionnce", "mocov3_attentionnce")
    num_positives: int = 4  # M of the AttentionNCE rows
    extra_m: Tuple[int, ...] = (2,)  # more M rows of attentionnce
    rows: Tuple[str, ...] = ()  # the ablation rows, as --row gives them
    time_matched: bool = True
    data: str = "fashion-mnist"  # a benchmarks.data.DATASETS name
    variant: str = ""  # our configs' name suffix: "_paper" is the authors' recipe
    crop_min_scale: Optional[float] = None  # our methods' crops' RandomResizedCrop minimum scale
    recipe: Tuple[str, ...] = ()  # Hydra overrides of our methods' configs
    sets: Tuple[str, ...] = ()  # --set and raw: Hydra overrides of every run, after its own
    warmup_epochs: Optional[int] = 1  # solo's 10 is longer than a CPU budget's whole run
    show_reference: bool = False  # end by printing the committed reference tables
    # its verdicts' families, named before its runs (each ablation row's come on top)
    families: Families = field(default_factory=lambda: FAMILIES)

    def runs(self) -> List[Run]:
        """Seed by seed: the equal-epoch rows, the ablation rows, then the equal-time rows (last:
        their timings must exist when they start). ValueError names a bad setting."""
        methods = {x: method_of(x) for x in self.methods}
        m = self.num_positives
        if not self.seeds or min(self.epochs, m) < 1:
            got = f"--seeds {list(self.seeds)}, --epochs {self.epochs}, --num-positives {m}"
            raise ValueError(f"{got}: need a seed, and epochs and M of at least 1")
        rows = [Row(x, m if spec.positives else 0) for x, spec in methods.items()]
        if "attentionnce" in self.methods:
            rows += [Row("attentionnce", k) for k in self.extra_m if k != m]
        rows += [r for r in (parse_row(text, m) for text in self.rows) if r not in rows]
        if self.time_matched:
            rows += [
                Row(base, comparison="equal-time", time_of=Row(target, m))
                for base, target in TIME_MATCH.items()
                if base in self.methods and target in self.methods
            ]
        return [Run(r, s, 0 if r.time_of else self.epochs) for s in self.seeds for r in rows]


#: Our recipe on Fashion-MNIST: a milder crop and temperature 0.2, screened on SimCLR.
RECIPE = dict(crop_min_scale=0.5, recipe=("++method_kwargs.temperature=0.2",))
DEMO = "the demo (~5 min on 2 CPU cores, below the learning regime), then the reference's "
DEMO += "committed tables"
EVERY = "every method and control, 3 seeds: ~40 h on 2 CPU cores, run in parts (--methods, --seeds;"
EVERY += " finished runs are reused)"
SMOKE = "tests: 1 epoch of 6 batches, numbers meaningless"
#: The authors' recipe (our ``*_paper.yaml``: ResNet-50, CIFAR stem, 400 epochs, batch 256) with
#: its controls on the same views, seeds declared here; GPU-scale (``--plan`` says how long).
PAPER = dict(num_train=None, num_val=None, epochs=400, batch_size=256, seeds=(0, 1, 2))
PAPER.update(methods=("simclr", "attentionnce", "attentionnce_off", "simclr_views"), extra_m=())
PAPER.update(rows=("neg_weighting=importance",), time_matched=False, variant="_paper")
PAPER.update(warmup_epochs=None, families=PAPER_FAMILIES)
PAPER_TEXT = "the authors' recipe on {}, 5 rows x 3 seeds x 400 epochs (GPU; see --plan)"
PRESETS: Dict[str, Preset] = {
    # No limit_val_batches: solo's kNN counts the classes it saw, and the val folder is sorted.
    "smoke": Preset(96, 40, 1, 16, (0,), SMOKE, sets=("++limit_train_batches=6",)),
    # The reference recipe on a fifth of its images, a seventh of its epochs, one seed.
    "default": Preset(
        1200, 1000, 4, 64, (0,), DEMO, extra_m=(), time_matched=False, show_reference=True, **RECIPE
    ),
    "reference": Preset(6000, 2000, 29, 128, (0, 1, 2), EVERY, tuple(METHODS), **RECIPE),
    "paper-cifar10": Preset(description=PAPER_TEXT.format("CIFAR-10"), data="cifar10", **PAPER),
    "paper-stl10": Preset(description=PAPER_TEXT.format("STL-10"), data="stl10", **PAPER),
}


def matched_epochs(epochs: int, base_s_per_epoch: float, target_s_per_epoch: float) -> int:
    """Epochs a baseline needs to train as long as the target did in ``epochs``: rounded, never
    fewer than ``epochs`` (a noisy timing must not cut the equal-epoch budget)."""
    if not base_s_per_epoch > 0 or not math.isfinite(base_s_per_epoch):
        raise ValueError(f"baseline seconds per epoch {base_s_per_epoch} must be > 0")
    return max(epochs, int(round(epochs * target_s_per_epoch / base_s_per_epoch)))
