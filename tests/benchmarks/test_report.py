"""The one table writer, noise rule and results.md (benchmarks/report.py), on hand-made results."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.report import aggregate, bench_markdown, clear, fmt, mean_std, table, verdict


def test_table() -> None:
    assert table(["a", "b"], [[1, "x"]]) == "| a | b |\n|---|---|\n| 1 | x |"


def test_mean_std_is_the_sample_std_of_finite_values() -> None:
    assert mean_std([1.0, 3.0, None, float("nan")]) == (2.0, pytest.approx(2**0.5))
    assert mean_std([5.0]) == (5.0, None) and mean_std([]) == (None, None)
    assert (
        fmt((2.0, 1.4142)) == "2.0 ± 1.4"
        and fmt((5.0, None)) == "5.0"
        and fmt((None, None)) == "n/a"
    )


def test_the_noise_rule() -> None:
    assert clear((60.0, 1.0), (57.0, 1.5)) is True  # 3.0 > 2.5
    assert clear((60.0, 1.0), (58.0, 1.5)) is False  # 2.0 < 2.5
    assert clear((60.0, None), (50.0, 1.0)) is None  # one seed decides nothing
    assert verdict((57.0, 1.0), (60.0, 1.5)) == "-3.0, clear"
    assert verdict((60.0, 1.0), (59.0, 1.0)) == "+1.0, not clear"
    assert verdict((60.0, None), (59.0, 1.0)) == "+1.0, one seed"


def _r(label, comparison, seed, knn, status="ok", **kw):
    base = dict(label=label, comparison=comparison, seed=seed, epochs=2, knn_acc1=knn,
                status=status, key=f"{comparison}/{label}/seed{seed}", error="")  # fmt: skip
    return {**base, **kw}


def test_rows_and_results_md(tmp_path: Path) -> None:
    results = [
        _r("SimCLR", "equal-epoch", 0, 50.0, seconds_per_epoch=10.0, train_seconds=20.0),
        _r("SimCLR", "equal-epoch", 1, 52.0, seconds_per_epoch=12.0, train_seconds=24.0),
        _r("AttentionNCE (M=4)", "equal-epoch", 0, 60.0),
        _r("AttentionNCE (M=4)", "equal-epoch", 1, None, status="failed", error="boom\nlast"),
        _r("SimCLR (time of AttentionNCE)", "equal-time", 0, 55.0, matched_to="AttentionNCE (M=4)"),
    ]
    rows = aggregate(results)
    assert [(r.label, r.seeds, r.failed) for r in rows] == [
        ("SimCLR", [0, 1], []),
        ("AttentionNCE (M=4)", [0], [1]),
        ("SimCLR (time of AttentionNCE)", [0], []),
    ]
    assert rows[0].stats["knn_acc1"] == (51.0, pytest.approx(2**0.5))
    assert rows[0].stats["seconds_per_epoch"][0] == 11.0
    md = bench_markdown(results, ["command: `x`"])
    assert "| SimCLR | 2 | 0,1 | 51.0 ± 1.4 | n/a | n/a | n/a | 11.0 | 22 | n/a |" in md
    assert "| AttentionNCE (M=4) | 2 | 0 (failed: 1) | 60.0 |" in md
    wall = md.split("## Equal wall-clock")[1].split("##")[0]
    assert wall.index("SimCLR (time of") < wall.index("AttentionNCE (M=4)")  # matched row under it
    assert "FAILED or skipped: equal-epoch/AttentionNCE (M=4)/seed1: last" in md


def test_the_ablation_table_starts_with_the_shipped_setting() -> None:
    results = [
        _r("AttentionNCE (M=4)", "equal-epoch", 0, 60.0),
        _r("SimCLR", "equal-epoch", 0, 50.0),
        _r("AttentionNCE (M=4, d_pos=2, d_neg=10)", "ablation", 0, 58.0),
    ]
    ablation = bench_markdown(results, []).split("## Ablation")[1].split("\n## ")[0]
    lines = [ln for ln in ablation.splitlines() if ln.startswith("| AttentionNCE")]
    assert [ln.split(" | ")[0] for ln in lines] == [
        "| AttentionNCE (M=4)", "| AttentionNCE (M=4, d_pos=2, d_neg=10)"
    ]  # fmt: skip
    assert "| SimCLR |" not in ablation
