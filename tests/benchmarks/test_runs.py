"""The run table (benchmarks/runs.py): its rows are the committed records' (found by what they
are, labelled as they were), solo-learn's methods are rows beside ours, folders are named from a
row's identity, and its run lists come in the documented order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.runs import PRESETS, QUESTIONS, Preset, Run, identity, label_of, parse_row, row_of
from benchmarks.runs import matched_epochs as matched

REFERENCE = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "reference" / "runs"


def test_the_reference_plan_is_every_committed_record() -> None:
    p = PRESETS["reference"]

    def plan_of(seeds) -> set:
        runs = Preset(1, 1, p.epochs, 1, tuple(seeds), methods=p.methods).runs()
        return {(r.row, r.seed, r.row.label) for r in runs}

    plan = plan_of(p.seeds)
    committed = [json.loads(path.read_text()) for path in REFERENCE.glob("*/*/seed*/result.json")]
    ids = [(*identity(r), r["label"]) for r in committed if r["comparison"] != "reference"]
    trained = {i for i in ids if i[0].comparison != "ablation"}
    # the preset's runs, and more seeds of them
    assert len(plan) == 27 and plan <= trained <= plan_of(range(5))
    # every trained record (all result folders) is filed and labelled as the row its recorded
    # overrides make, in the folder of its key
    for path in REFERENCE.parents[1].glob("*/runs/*/*/seed*/result.json"):
        r = json.loads(path.read_text())
        if r["comparison"] in ("equal-epoch", "ablation"):
            assert row_of(r).label == r["label"] == label_of(r)
            assert path.parent.relative_to(path.parents[3]).as_posix() == r["key"]
    # the equal-time rows name the row they matched as their records do
    matched = {r["label"]: r["matched_to"] for r in committed if r["matched_to"]}
    assert {r.label: r.time_of.label for r in (q[2] for q in QUESTIONS) if r.time_of} == matched
    assert all(any(q[i].label == r["label"] for r in committed) for q in QUESTIONS for i in (1, 2))


def test_ablation_rows_are_filed_by_what_they_are() -> None:
    rows = ("d_pos=1,d_neg=1", "d_pos=1,d_neg=0.3,neg_weighting=importance")
    rows += ("attentionnce_off:temperature=0.5",)
    runs = Preset(1, 1, 29, 1, (0,), methods=("attentionnce",), extra_m=(4,), rows=rows).runs()
    assert [r.key for r in runs] == [
        "equal-epoch/attentionnce-M4/seed0",
        "ablation/attentionnce-M4-d_pos-1-d_neg-1/seed0",
        "ablation/attentionnce-M4-d_pos-1-d_neg-0.3-neg_weighting-importance/seed0",
        "ablation/attentionnce_off-M4-temperature-0.5/seed0",
    ]
    # no "=" or "+" (the folder is in Hydra overrides), and 1e+06 and 1e-06 file apart
    keys = [Run(parse_row(f"d_neg={v}", 4), 0, 1).key.split("/")[1] for v in (1e6, 1e-6, -1)]
    assert keys == [f"attentionnce-M4-d_neg-{v}" for v in ("1e06", "1e-06", "-1")]


def test_runs_go_seed_by_seed_with_the_equal_time_rows_last() -> None:
    runs = Preset(1, 1, 4, 1, (0, 1)).runs()
    labels = "SimCLR|MoCo v3|AttentionNCE (M=4)|MoCo v3 + AttentionNCE (M=4)|AttentionNCE (M=2)|"
    labels += "SimCLR (time of AttentionNCE)|MoCo v3 (time of MoCo v3 + AttentionNCE)"
    assert [r.row.label for r in runs[:7]] == labels.split("|")
    assert [r.epochs for r in runs[:7]] == [4] * 5 + [0] * 2
    assert len(runs) == 14 and {r.seed for r in runs[7:]} == {1}
    assert runs[5].key == "equal-time/simclr/seed0"


def test_solo_learns_methods_are_rows_in_their_own_recipe() -> None:
    runs = Preset(1, 1, 1, 1, (0,), methods=("attentionnce", "byol", "solo.simclr"), extra_m=())
    runs = runs.runs()
    assert [r.row.label for r in runs] == [
        "AttentionNCE (M=4)",
        "byol (solo-learn's recipe)",
        "simclr (solo-learn's recipe)",
    ]
    assert [r.row.m for r in runs] == [4, 0, 0] and runs[1].key == "equal-epoch/byol/seed0"


def test_matched_epochs_rounds_and_never_cuts_the_budget() -> None:
    # the committed reference: SimCLR at 57.7 s/epoch matched AttentionNCE's 29 epochs at 165 s
    assert matched(29, 60.0, 170.0) == 82
    assert matched(10, 20.0, 10.0) == 10


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: Preset(1, 1, 1, 1, (0,), methods=("byl",)).runs(), "unknown 'byl'.*'byol'"),
        (lambda: Preset(1, 1, 1, 1, (0,), methods=("linear",)).runs(), "unknown 'linear'"),
        (lambda: Preset(1, 1, 1, 1, ()).runs(), "need a seed"),
        (lambda: Preset(1, 1, 0, 1, (0,)).runs(), "need a seed"),
        (lambda: Preset(1, 1, 1, 1, (0,), rows=("d_neg",)).runs(), "--row .*KEY=VALUE"),
        (lambda: parse_row("simclr:d_neg=1", 4), "--row .*allowed values"),
        (lambda: parse_row("d_neg", 4), "--row .*KEY=VALUE"),
        (lambda: parse_row("d_neg=1,=2", 4), "--row .*KEY=VALUE"),
        (lambda: matched(10, 0.0, 10.0), "must be > 0"),
    ],
)
def test_bad_plans_rows_and_timings_are_named(call, message) -> None:
    with pytest.raises(ValueError, match=message):
        call()
