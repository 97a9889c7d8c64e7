"""Run lists of the benchmark and the equal-wall-clock epoch rule."""

from __future__ import annotations

import pytest

from attnce_bench.plan import PlanOptions, build_plan, matched_epochs


def test_default_plan_has_every_comparison() -> None:
    runs = build_plan(PlanOptions(seeds=(0, 1), epochs=3))
    labels = {(r.comparison, r.label) for r in runs}
    assert ("equal-epoch", "SimCLR") in labels
    assert ("equal-epoch", "MoCo v3") in labels
    assert ("equal-epoch", "AttentionNCE (M=4)") in labels
    assert ("equal-epoch", "MoCo v3 + AttentionNCE (M=4)") in labels
    assert ("equal-epoch", "AttentionNCE (M=2)") in labels
    assert ("equal-time", "SimCLR (time of AttentionNCE)") in labels
    assert len(runs) == 2 * 7
    # seed 0's equal-epoch runs come before any equal-time run (they fix its epochs)
    first_time = next(i for i, r in enumerate(runs) if r.comparison == "equal-time")
    assert all(r.seed == 0 for r in runs[:first_time])
    assert len({r.key for r in runs}) == len(runs)


def test_ablation_varies_one_setting_and_reuses_base() -> None:
    runs = build_plan(
        PlanOptions(
            seeds=(0,),
            ablation=True,
            time_matched=False,
            extra_m=(),
            m_grid=(1, 2, 4),
            dpos_grid=(1.0, 2.0),
            dneg_grid=(10.0, 1.0),
            base_d_pos=1.0,
            base_d_neg=10.0,
        )
    )
    abl = [r for r in runs if r.comparison == "ablation"]
    settings = sorted(
        (
            r.num_positives,
            dict(r.settings)["method_kwargs.d_pos"],
            dict(r.settings)["method_kwargs.d_neg"],
        )
        for r in abl
    )
    # (4, 1, 10) is the equal-epoch AttentionNCE run, not repeated
    assert settings == [(1, 1.0, 10.0), (2, 1.0, 10.0), (4, 1.0, 1.0), (4, 2.0, 10.0)]


def test_bad_method_is_named() -> None:
    with pytest.raises(ValueError, match="allowed values"):
        build_plan(PlanOptions(methods=("simclr", "byol")))


def test_matched_epochs() -> None:
    assert matched_epochs(3, 10.0, 28.0) == 8
    assert matched_epochs(3, 10.0, 5.0) == 3  # never below the equal-epoch budget
    with pytest.raises(ValueError):
        matched_epochs(3, 0.0, 1.0)
