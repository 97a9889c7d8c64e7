"""attnce_bench.experiments.moco_settings: the variants it runs and its verdict on hand-made
results."""

from __future__ import annotations

from pathlib import Path

from attnce_bench.api import BenchOptions
from attnce_bench.experiments import moco_settings as ms


def test_first_benchmark_trains_the_baselines_the_others_only_the_variant(tmp_path: Path) -> None:
    base = BenchOptions(preset="smoke", seeds=[0, 1, 2])
    first = ms.bench_options(base, tmp_path / "base", (), True)
    assert list(first.methods) == ["mocov3", "mocov3_attentionnce"] and first.time_matched
    other = ms.bench_options(base, tmp_path / "x", ms.VARIANTS[1][2], False)
    assert list(other.methods) == ["mocov3_attentionnce"] and not other.time_matched
    assert other.sets == ["mocov3_attentionnce:method_kwargs.temperature=0.5"]
    assert list(other.seeds) == [0, 1, 2] and other.preset == "smoke"
    assert [v[0] for v in ms.VARIANTS] == ["base", "tau_0.5", "d_neg_1", "d_pos_4", "key_out"]


def _runs(label, comparison, knns, epochs=4):
    return [
        {
            "label": label,
            "comparison": comparison,
            "status": "ok",
            "epochs": epochs,
            "knn_acc1": k,
            "linear_acc1": k,
            "offline_acc1": k,
            "seconds_per_epoch": 10.0,
        }
        for k in knns
    ]


def test_a_setting_wins_only_when_clearly_ahead_at_equal_epochs_and_equal_time() -> None:
    moco = ms.stats(_runs(ms.MOCO, "equal-epoch", [50.0, 51.0, 52.0]), ms.MOCO, "equal-epoch")
    moco_time = ms.stats(
        _runs(ms.MOCO_TIME, "equal-time", [53.0, 54.0, 55.0], 6), ms.MOCO_TIME, "equal-time"
    )
    rows = {
        "big gain": ms.stats(
            _runs(ms.FORM, "equal-epoch", [60.0, 61.0, 62.0]), ms.FORM, "equal-epoch"
        ),
        "gain only at equal epochs": ms.stats(
            _runs(ms.FORM, "equal-epoch", [54.0, 55.0, 56.0]), ms.FORM, "equal-epoch"
        ),
    }
    md, winners = ms.summarise(rows, moco, moco_time)
    assert winners == ["big gain"]
    # 55 - 51 = 4 > 1 + 1 (clear); 55 - 54 = 1 < 2 (not clear)
    assert "| gain only at equal epochs | 4 | 3 | 55.0 ± 1.0 |" in md
    assert "+4.0 (clear) | +1.0 (not clear) |" in md
