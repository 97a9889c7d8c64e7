"""The anchor-mean ablation entry of the benchmark plan (method_kwargs.anchor: mean)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnce_bench.compose import Budget, run_config
from attnce_bench.plan import PlanOptions, build_plan


def _opts(**kw) -> PlanOptions:
    base = dict(
        seeds=(0,),
        ablation=True,
        time_matched=False,
        extra_m=(),
        m_grid=(4,),
        dpos_grid=(1.0,),
        dneg_grid=(10.0,),
        base_d_pos=1.0,
        base_d_neg=10.0,
    )
    base.update(kw)
    return PlanOptions(**base)


def test_anchor_grid_adds_one_mean_run_and_composes(tmp_path: Path) -> None:
    assert not [r for r in build_plan(_opts()) if r.comparison == "ablation"]  # default: none
    abl = [
        r
        for r in build_plan(_opts(anchor_grid=("views", "mean", "mean")))
        if r.comparison == "ablation"
    ]
    assert [r.label for r in abl] == ["AttentionNCE (M=4, anchor=mean, d_pos=1, d_neg=10)"]
    assert dict(abl[0].settings) == {
        "method_kwargs.d_pos": 1.0,
        "method_kwargs.d_neg": 10.0,
        "method_kwargs.anchor": "mean",
    }
    budget = Budget("fashion_mnist", 8, 0, str(tmp_path), None)
    cfg = run_config(abl[0], budget, tmp_path / "run").resolved
    assert cfg.method == "attentionnce" and cfg.method_kwargs.anchor == "mean"


def test_anchor_grid_refusals() -> None:
    with pytest.raises(
        ValueError,
        match=r"--anchor-grid: unknown \['avg'\]; allowed values are \['views', 'mean'\]",
    ):
        build_plan(_opts(anchor_grid=("avg",)))
    with pytest.raises(ValueError, match="--ablation-method=attentionnce"):
        build_plan(_opts(anchor_grid=("mean",), ablation_method="mocov3_attentionnce"))
