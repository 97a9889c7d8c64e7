"""The run table: each method a shipped config plus overrides, each table row typed once as a
:class:`Row`, the presets, and the run lists (equal epochs, the ablation, equal time) built from
them. A run is one call of solo-learn's ``main_pretrain.py``: one row, one seed, one epoch count."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

#: method -> (its name in the tables, shipped config in pretrain/<family>/, the overrides that
#: make it). SimCLR and MoCo v3 are the AttentionNCE configs with solo-learn's loss, no positives;
#: the two controls are the same 2 + M views without the attention (solo-learn's SimCLR loss on
#: every view), and the attention off (d -> inf: the mean prototype, plain negatives).
METHODS: Dict[str, Tuple[str, str, Tuple[str, ...]]] = {
    "simclr": ("SimCLR", "attentionnce",
               ("++method_kwargs.loss=simclr", "++views.num_positives=0")),
    "mocov3": ("MoCo v3", "mocov3_attentionnce",
               ("++method_kwargs.loss=mocov3", "++views.num_positives=0")),
    "attentionnce": ("AttentionNCE", "attentionnce", ()),
    "mocov3_attentionnce": ("MoCo v3 + AttentionNCE", "mocov3_attentionnce", ()),
    "simclr_views": ("SimCLR on the same views", "attentionnce",
                     ("++method_kwargs.loss=simclr_all_views",)),
    "attentionnce_off": ("AttentionNCE, attention off", "attentionnce",
                         ("++method_kwargs.d_pos=1000000.0", "++method_kwargs.d_neg=1000000.0")),
}  # fmt: skip
#: The methods whose rows see M positive views; the first two are the AttentionNCE forms.
POSITIVE_METHODS = ("attentionnce", "mocov3_attentionnce", "simclr_views", "attentionnce_off")
#: baseline -> the AttentionNCE method whose training time its equal-time row matches.
TIME_MATCH = {"simclr": "attentionnce", "mocov3": "mocov3_attentionnce"}
#: The reference rows' labels, probed on the same images: the untrained backbone, the raw pixels.
UNTRAINED, PIXELS = "random init (no pretraining)", "raw pixels"


@dataclass(frozen=True)
class Row:
    """A table row: a method with M positives and ``method_kwargs`` settings (as (key, value)
    pairs), in one comparison; an equal-time row names the row whose training time it matches.
    Its label and folder follow from it (the committed records' labels are these)."""

    method: str
    m: int = 0
    kwargs: Tuple[Tuple[str, Any], ...] = ()
    comparison: str = "equal-epoch"
    time_of: Optional["Row"] = None

    @property
    def label(self) -> str:
        if self.time_of is not None:
            return f"{METHODS[self.method][0]} (time of {METHODS[self.time_of.method][0]})"
        if not self.m:
            return METHODS[self.method][0]
        extra = [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.kwargs]
        return f"{METHODS[self.method][0]} ({', '.join([f'M={self.m}', *extra])})"

    @property
    def overrides(self) -> Tuple[str, ...]:
        out = (f"++views.num_positives={self.m}",) if self.m else ()
        return out + tuple(f"++method_kwargs.{k}={str(v).lower() if isinstance(v, bool) else v}"
                           for k, v in self.kwargs)  # fmt: skip


@dataclass(frozen=True)
class Run:
    """One row on one seed; ``epochs`` is 0 for an equal-time run until timings fix it."""

    row: Row
    seed: int
    epochs: int

    @property
    def key(self) -> str:  # its folder under <out>/runs/
        safe = "-".join("".join(c if c.isalnum() else " " for c in self.row.label).split())
        return f"{self.row.comparison}/{safe}/seed{self.seed}"


#: The reference preset's rows and its four questions (row a minus row b).
ATTN = Row("attentionnce", 4)
MOCO_ATTN = Row("mocov3_attentionnce", 4)
QUESTIONS: Tuple[Tuple[str, Row, Row], ...] = (
    ("Does AttentionNCE beat SimCLR at equal time?",
     ATTN, Row("simclr", comparison="equal-time", time_of=ATTN)),
    ("Does it beat SimCLR on the same views?", ATTN, Row("simclr_views", 4)),
    ("Is the attention itself responsible?", ATTN, Row("attentionnce_off", 4)),
    ("Does the MoCo form beat MoCo v3 (equal time)?",
     MOCO_ATTN, Row("mocov3", comparison="equal-time", time_of=MOCO_ATTN)),
)  # fmt: skip


@dataclass(frozen=True)
class Preset:
    """A budget (``num_train`` / ``num_val``: of the embedded Fashion-MNIST) and its rows."""

    num_train: int
    num_val: int
    epochs: int
    batch_size: int
    seeds: Tuple[int, ...]
    description: str
    methods: Tuple[str, ...] = ("simclr", "mocov3", "attentionnce", "mocov3_attentionnce")
    extra_m: Tuple[int, ...] = (2,)
    time_matched: bool = True
    crop_min_scale: Optional[float] = None  # every crop's RandomResizedCrop minimum scale
    sets: Tuple[str, ...] = ()  # --set values: after the run's own, before the command line's
    show_reference: bool = False  # end by printing the committed reference tables


PRESETS: Dict[str, Preset] = {
    # No limit_val_batches: solo's kNN counts the classes it saw, and the val folder is sorted.
    "smoke": Preset(96, 40, 1, 16, (0,), "tests: 1 epoch of 6 batches, numbers meaningless"),
    # The reference recipe on a fifth of its images, a seventh of its epochs, one seed.
    "default": Preset(
        1200, 1000, 4, 64, (0,), "the demo (~10 min on 2 CPU cores, below the learning regime), "
        "then the reference's committed tables", extra_m=(), time_matched=False,
        crop_min_scale=0.5, sets=("method_kwargs.temperature=0.2",), show_reference=True,
    ),
    # Our recipe (milder crop, temperature 0.2), screened on SimCLR.
    "reference": Preset(
        6000, 2000, 29, 128, (0, 1, 2), "every method and control, 3 seeds: ~40 h on 2 CPU cores, "
        "run in parts (--methods, --seeds; finished runs are reused)", methods=tuple(METHODS),
        crop_min_scale=0.5, sets=("method_kwargs.temperature=0.2",),
    ),
}  # fmt: skip


@dataclass(frozen=True)
class Grids:
    """The ablation: each setting varied alone around the shipped (d_pos, d_neg) ``base``."""

    method: str = "attentionnce"
    m: Tuple[int, ...] = (1, 2, 4)
    d_pos: Tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
    d_neg: Tuple[float, ...] = (0.5, 1.0, 10.0)
    anchor: Tuple[str, ...] = ()
    base: Tuple[float, float] = (1.0, 10.0)

    def rows(self, m_default: int, skip_base: bool) -> List[Row]:
        d_pos, d_neg = self.base
        points = [(int(m), d_pos, d_neg) for m in self.m]
        points += [(m_default, float(d), d_neg) for d in self.d_pos]
        points += [(m_default, d_pos, float(d)) for d in self.d_neg]
        out = [
            Row(self.method, m, (("d_pos", dp), ("d_neg", dn)), "ablation")
            for m, dp, dn in dict.fromkeys(points)
            if not (skip_base and (m, dp, dn) == (m_default, d_pos, d_neg))  # the equal-epoch row
        ]
        kw = (("d_pos", d_pos), ("d_neg", d_neg))
        anchors = dict.fromkeys(a for a in self.anchor if a != "views")
        return out + [
            Row(self.method, m_default, kw + (("anchor", a),), "ablation") for a in anchors
        ]


def parse_row(text: str, m: int, method: str = "attentionnce") -> Row:
    """``--row [METHOD:]KEY=VALUE,...``: an ablation row of METHOD (default ``method``) at M
    positives with these ``method_kwargs`` (numbers as floats)."""
    name, _, pairs = text.rpartition(":")
    name = name or method
    if name not in POSITIVE_METHODS:
        raise ValueError(f"--row {text!r}: method {name!r}; allowed values are {POSITIVE_METHODS}")
    kwargs = []
    for pair in filter(None, pairs.split(",")):
        key, eq, value = (x.strip() for x in pair.partition("="))
        if not eq or not key or not value:
            raise ValueError(f"--row {text!r}: expected [METHOD:]KEY=VALUE,... , got {pair!r}")
        try:
            kwargs.append((key, float(value)))
        except ValueError:
            kwargs.append((key, value))
    return Row(name, m, tuple(kwargs), "ablation")


def bench_runs(
    methods: Sequence[str],
    seeds: Sequence[int],
    epochs: int,
    m: int = 4,
    extra_m: Sequence[int] = (2,),
    time_matched: bool = True,
    grids: Optional[Grids] = None,
    extra_rows: Sequence[Row] = (),
) -> List[Run]:
    """Seed by seed: the equal-epoch rows, the ablation (the grids, then ``extra_rows``), then the
    equal-time rows (last: their timings must exist when they start). ValueError names a bad
    method, seed, epochs, M or grid."""
    unknown = [x for x in methods if x not in METHODS]
    if unknown:
        raise ValueError(f"--methods: unknown {unknown}; allowed values are {list(METHODS)}")
    if grids is not None and grids.method not in POSITIVE_METHODS[:2]:
        raise ValueError(f"--ablation-method={grids.method!r}: allowed {POSITIVE_METHODS[:2]}")
    if grids is not None and grids.anchor and grids.method != "attentionnce":
        raise ValueError("--anchor-grid: method_kwargs.anchor is a setting of attentionnce only")
    if not seeds or epochs < 1 or m < 1:
        raise ValueError(f"--seeds {list(seeds)}, --epochs {epochs}, --num-positives {m}: need "
                         "a seed, and epochs and M of at least 1")  # fmt: skip
    rows = [Row(x, m if x in POSITIVE_METHODS else 0) for x in methods]
    if "attentionnce" in methods:
        rows += [Row("attentionnce", k) for k in extra_m if k != m]
    if grids is not None:
        rows += grids.rows(m, skip_base=grids.method in methods)
    rows += [r for r in extra_rows if r not in rows]
    if time_matched:
        rows += [
            Row(base, comparison="equal-time", time_of=Row(target, m))
            for base, target in TIME_MATCH.items()
            if base in methods and target in methods
        ]
    return [Run(r, s, 0 if r.time_of else epochs) for s in seeds for r in rows]


def matched_epochs(epochs: int, base_s_per_epoch: float, target_s_per_epoch: float) -> int:
    """Epochs a baseline needs to train as long as the target did in ``epochs``: rounded, never
    fewer than ``epochs`` (a noisy timing must not cut the equal-epoch budget)."""
    if not base_s_per_epoch > 0 or not math.isfinite(base_s_per_epoch):
        raise ValueError(f"baseline seconds per epoch {base_s_per_epoch} must be > 0")
    return max(epochs, int(round(epochs * target_s_per_epoch / base_s_per_epoch)))
