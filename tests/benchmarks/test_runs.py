"""The run table (benchmarks/runs.py): its rows name and file runs exactly as the committed records
and the old harness's ablation layout do, and its run lists come in the documented order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.runs import PRESETS, QUESTIONS, Grids, Row, bench_runs, matched_epochs

REFERENCE = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "reference" / "runs"


def test_the_reference_plan_is_every_committed_record() -> None:
    p = PRESETS["reference"]
    plan = {(r.key, r.row.label, r.row.method, r.row.comparison)
            for r in bench_runs(p.methods, p.seeds, p.epochs)}  # fmt: skip
    committed = [json.loads(path.read_text()) for path in REFERENCE.glob("*/*/seed*/result.json")]
    trained = {(r["key"], r["label"], r["method"], r["comparison"])
               for r in committed if r["comparison"] not in ("reference", "ablation")}  # fmt: skip
    assert len(trained) == 27 and trained == plan
    # issue 47's active-attention row, beside them on the same seeds
    grids = Grids(m=(4,), d_pos=(1.0,), d_neg=(1.0,))
    ablation = {
        (r.key, r.row.label)
        for r in bench_runs(
            ["attentionnce"], p.seeds, p.epochs, extra_m=(4,), time_matched=False, grids=grids
        )
        if r.row.comparison == "ablation"
    }
    assert ablation == {(r["key"], r["label"]) for r in committed if r["comparison"] == "ablation"}
    # the equal-time rows name the row they matched as their records do
    matched = {r["label"]: r["matched_to"] for r in committed if r["matched_to"]}
    assert {r.label: r.time_of.label for r in (q[2] for q in QUESTIONS) if r.time_of} == matched
    assert all(any(q[i].label == r["label"] for r in committed) for q in QUESTIONS for i in (1, 2))


def test_ablation_rows_are_labelled_and_filed_as_the_old_harness_did() -> None:
    grids = Grids(m=(4,), d_pos=(1.0,), d_neg=(1.0, 0.3), anchor=("views", "mean"))
    runs = bench_runs(["attentionnce"], [0], 29, extra_m=(4,), time_matched=False, grids=grids)
    assert [(r.row.label, r.key, r.row.overrides) for r in runs[1:]] == [
        ("AttentionNCE (M=4, d_pos=1, d_neg=1)", "ablation/AttentionNCE-M-4-d-pos-1-d-neg-1/seed0",
         ("++views.num_positives=4", "++method_kwargs.d_pos=1.0", "++method_kwargs.d_neg=1.0")),
        ("AttentionNCE (M=4, d_pos=1, d_neg=0.3)",
         "ablation/AttentionNCE-M-4-d-pos-1-d-neg-0-3/seed0",
         ("++views.num_positives=4", "++method_kwargs.d_pos=1.0", "++method_kwargs.d_neg=0.3")),
        ("AttentionNCE (M=4, d_pos=1, d_neg=10, anchor=mean)",
         "ablation/AttentionNCE-M-4-d-pos-1-d-neg-10-anchor-mean/seed0",
         ("++views.num_positives=4", "++method_kwargs.d_pos=1.0", "++method_kwargs.d_neg=10.0",
          "++method_kwargs.anchor=mean")),
    ]  # fmt: skip
    # the shipped setting (M=4, 1, 10) is the equal-epoch row, not an ablation run
    assert runs[0].row == Row("attentionnce", 4) and len(runs) == 4


def test_runs_go_seed_by_seed_with_the_equal_time_rows_last() -> None:
    runs = bench_runs(["simclr", "mocov3", "attentionnce", "mocov3_attentionnce"], [0, 1], 4)
    assert [(r.row.label, r.epochs) for r in runs[:7]] == [
        ("SimCLR", 4), ("MoCo v3", 4), ("AttentionNCE (M=4)", 4),
        ("MoCo v3 + AttentionNCE (M=4)", 4), ("AttentionNCE (M=2)", 4),
        ("SimCLR (time of AttentionNCE)", 0), ("MoCo v3 (time of MoCo v3 + AttentionNCE)", 0),
    ]  # fmt: skip
    assert len(runs) == 14 and {r.seed for r in runs[7:]} == {1}
    assert runs[5].key == "equal-time/SimCLR-time-of-AttentionNCE/seed0"


@pytest.mark.parametrize(
    "kwargs, message",
    [(dict(methods=["byol"]), "allowed values"), (dict(seeds=[]), "need a seed"),
     (dict(epochs=0), "need a seed"),
     (dict(grids=Grids(method="simclr")), "--ablation-method"),
     (dict(grids=Grids(method="mocov3_attentionnce", anchor=("mean",))), "--anchor-grid")],
)  # fmt: skip
def test_bad_plans_are_named(kwargs, message) -> None:
    args = {"methods": ["attentionnce", "mocov3_attentionnce"], "seeds": [0], "epochs": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        bench_runs(**args)


def test_matched_epochs_rounds_and_never_cuts_the_budget() -> None:
    # the committed reference: SimCLR at 57.7 s/epoch matched AttentionNCE's 29 epochs at 165 s
    assert matched_epochs(29, 60.0, 170.0) == 82
    assert matched_epochs(10, 20.0, 10.0) == 10
    with pytest.raises(ValueError):
        matched_epochs(10, 0.0, 10.0)
