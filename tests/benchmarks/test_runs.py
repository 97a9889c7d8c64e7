"""The run table and the run lists (benchmarks/runs.py), against hand-written expectations."""

from __future__ import annotations

import pytest

from benchmarks.runs import (
    ALL_METHODS,
    BENCH_METHODS,
    PRESETS,
    Grids,
    Run,
    bench_runs,
    matched_epochs,
    reference_parts,
)


def test_default_runs_seed_by_seed_equal_epochs_first() -> None:
    runs = bench_runs(BENCH_METHODS, seeds=[0, 1], epochs=4)
    first = [(r.label, r.comparison, r.epochs, r.settings) for r in runs[:7]]
    assert first == [
        ("SimCLR", "equal-epoch", 4, ()),
        ("MoCo v3", "equal-epoch", 4, ()),
        ("AttentionNCE (M=4)", "equal-epoch", 4, ("++views.num_positives=4",)),
        ("MoCo v3 + AttentionNCE (M=4)", "equal-epoch", 4, ("++views.num_positives=4",)),
        ("AttentionNCE (M=2)", "equal-epoch", 4, ("++views.num_positives=2",)),
        ("SimCLR (time of AttentionNCE)", "equal-time", 0, ()),
        ("MoCo v3 (time of MoCo v3 + AttentionNCE)", "equal-time", 0, ()),
    ]
    assert runs[5].matched_to == "AttentionNCE (M=4)"
    assert runs[6].matched_to == "MoCo v3 + AttentionNCE (M=4)"
    assert len(runs) == 14 and {r.seed for r in runs[7:]} == {1}
    assert runs[2].key == "equal-epoch/AttentionNCE-M-4/seed0"


def test_ablation_varies_one_setting_around_the_shipped_one() -> None:
    grids = Grids(m=(1, 4), d_pos=(1.0, 2.0), d_neg=(10.0, 1.0), anchor=("views", "mean"))
    runs = bench_runs(["attentionnce"], [0], 2, extra_m=(), time_matched=False, grids=grids)
    labels = [r.label for r in runs]
    assert labels == [
        "AttentionNCE (M=4)",  # the base, reused by the ablation table
        "AttentionNCE (M=1, d_pos=1, d_neg=10)",
        "AttentionNCE (M=4, d_pos=2, d_neg=10)",
        "AttentionNCE (M=4, d_pos=1, d_neg=1)",
        "AttentionNCE (M=4, d_pos=1, d_neg=10, anchor=mean)",
    ]
    assert runs[2].settings == (
        "++views.num_positives=4",
        "++method_kwargs.d_pos=2.0",
        "++method_kwargs.d_neg=10.0",
    )
    assert runs[4].settings[-1] == "++method_kwargs.anchor=mean"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(methods=["byol"]), "allowed values"),
        (dict(seeds=[]), "--seeds"),
        (dict(epochs=0), "--epochs"),
        (dict(grids=Grids(method="simclr")), "--ablation-method"),
        (dict(grids=Grids(method="mocov3_attentionnce", anchor=("mean",))), "--anchor-grid"),
    ],
)
def test_bad_plans_are_named(kwargs, message) -> None:
    args = dict(methods=BENCH_METHODS, seeds=[0], epochs=1)
    with pytest.raises(ValueError, match=message):
        bench_runs(**{**args, **kwargs})


def test_matched_epochs_rounds_and_never_cuts_the_budget() -> None:
    assert matched_epochs(4, 10.0, 27.0) == 11  # 10.8 rounds to 11
    assert matched_epochs(4, 10.0, 9.0) == 4  # a faster target never gives fewer epochs
    with pytest.raises(ValueError):
        matched_epochs(4, 0.0, 1.0)


def test_frontier_key_holds_the_epochs() -> None:
    assert Run("SimCLR", "simclr", "frontier", 2, 8).key == "frontier/SimCLR/e8/seed2"
    assert Run("A (M=1)", "attentionnce", "x", 0, 1, group="K2").key == "K2/x/A-M-1/seed0"


def test_the_controls_see_the_same_views() -> None:
    runs = bench_runs(["simclr_views", "attentionnce_off"], [0], 3, extra_m=(), time_matched=False)
    assert [(r.label, r.method, r.settings) for r in runs] == [
        ("SimCLR on the same views (M=4)", "simclr_views", ("++views.num_positives=4",)),
        ("AttentionNCE, attention off (M=4)", "attentionnce_off", ("++views.num_positives=4",)),
    ]


def test_the_reference_parts_cover_every_reference_run_once() -> None:
    preset = PRESETS["reference"]
    runs = bench_runs(preset.methods, preset.seeds, preset.epochs)
    parts = reference_parts(preset.seeds)
    owners = {r.key: [n for n, (s, labels) in parts.items() if s == r.seed and r.label in labels]
              for r in runs}  # fmt: skip
    assert all(len(names) == 1 for names in owners.values()), owners
    assert len(parts) == len(preset.seeds) * 7 and set(preset.methods) == set(ALL_METHODS)
    first = [r.label for r in runs if owners[r.key] == ["seed0-a"]]
    assert "SimCLR" in first and "AttentionNCE (M=4)" in first  # the equal-time rows' timings
