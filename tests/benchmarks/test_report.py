"""The one table writer, noise rule and results.md (benchmarks/report.py), on hand-made results."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.report import (
    aggregate,
    bench_markdown,
    clear,
    curve_markdown,
    curve_plot,
    extrapolate,
    fmt,
    mean_std,
    regime_markdown,
    table,
    trained_on,
    verdict,
    verdicts_markdown,
)
from benchmarks.runner import Result


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


def test_learning_curve_gaps_and_the_regimes_two_bars(tmp_path: Path) -> None:
    def point(n: int, seconds: float, lin: float, knn: float) -> dict:
        return {"epochs": n, "train_seconds": seconds, "offline_acc1": lin, "offline_knn_acc1": knn}

    def run(seed: int, curve: list) -> dict:
        return {"label": "SimCLR", "comparison": "equal-epoch", "seed": seed, "status": "ok",
                "epochs": 21, "curve": curve}  # fmt: skip

    def ref(label: str, seed: int, lin: float, knn: float) -> dict:
        return {"label": label, "comparison": "reference", "seed": seed, "status": "ok",
                "epochs": 0, "offline_acc1": lin, "offline_knn_acc1": knn}  # fmt: skip

    results = [
        run(0, [point(1, 10.0, 70.0, 60.0), point(21, 200.0, 83.0, 82.0)]),
        run(1, [point(1, 12.0, 72.0, 62.0), point(21, 220.0, 85.0, 80.0)]),
        ref("random init (no pretraining)", 0, 79.0, 78.0),
        ref("random init (no pretraining)", 1, 81.0, 78.0),
        ref("raw pixels", 0, 81.5, 80.0),
    ]
    md = curve_markdown(results)
    # epoch 21: linear 84.0 (untrained 80.0, pixels 81.5), kNN 81.0 (untrained 78.0): +4.0 and
    # +3.0 pass step 1; +2.5 over the pixels passes step 2. Epoch 1 passes neither.
    assert (
        "| SimCLR (21-epoch run) | 21 | 2 | 210 | 84.0 ± 1.4 | 81.0 ± 1.4 | +4.00 | +3.00 | +2.50 | yes | yes |"
        in md
    )
    assert (
        "| SimCLR (21-epoch run) | 1 | 2 | 11 | 71.0 ± 1.4 | 61.0 ± 1.4 | -9.00 | -17.00 | -10.50 | no | no |"
        in md
    )
    assert (
        "- SimCLR (21-epoch run): linear >= untrained + 3 (83.0) passed at 210 s; kNN >= untrained"
        " + 3 (81.0) passed at 210 s; linear >= pixels + 2 (83.5) passed at 210 s."
    ) in md
    secs = (10.0, 20.0, 40.0, 80.0, 160.0, 320.0)
    rising = [run(0, [point(i + 1, x, 50.0 + 5 * math.log(x), 50.0) for i, x in enumerate(secs)])]
    md = curve_markdown(rising + results[2:])
    # linear = 50 + 5 ln(s): 78.8 at 320 s; the line through the last 3 points reaches 83.0 at
    # exp(33 / 5) = 735 s. The flat kNN never rises.
    assert (
        "linear >= untrained + 3 (83.0) not passed by 320 s; a log-linear fit of the last 3 "
        "points reaches it at ~735 s"
    ) in md
    assert "kNN >= untrained + 3 (81.0) not passed by 320 s; the last 3 points do not rise" in md
    assert "## Learning curves" in bench_markdown(results, [])
    assert curve_markdown(results[2:]) == ""  # no run kept a curve: no section
    path = curve_plot(results, tmp_path / "curves.png", "t")
    assert path is None or path.read_bytes()[:4] == b"\x89PNG"


def test_the_regime_table_places_each_rows_means_against_the_references() -> None:
    def r(label: str, comparison: str, seed: int, lin: float, knn: float, **kw) -> dict:
        return {"label": label, "comparison": comparison, "seed": seed, "status": "ok",
                "epochs": 0 if comparison == "reference" else 29, "offline_acc1": lin,
                "offline_knn_acc1": knn, **kw}  # fmt: skip

    # A recorded pair (the MoCo form's seed 2, the raw pixels): float32 84.0 and 82.0.
    lin84, lin82 = 83.99999737739563, 81.99999928474426
    curve = [
        {"epochs": 29, "train_seconds": 100.0, "offline_acc1": lin84, "offline_knn_acc1": 81.0}
    ]
    trained = [
        r("MoCo v3", "equal-epoch", 0, lin84, 81.0, curve=curve),
        r("MoCo v3", "equal-epoch", 1, lin84, 82.0),
        r("SimCLR", "equal-time", 0, 83.0, 80.0),
    ]
    references = [
        r("random init (no pretraining)", "reference", 0, 79.0, 78.0),
        r("random init (no pretraining)", "reference", 1, 81.0, 78.0),
        r("raw pixels", "reference", 0, lin82, 80.0),
    ]
    md = regime_markdown(trained + references)
    # MoCo v3 (seeds 0, 1; untrained 80.0 / 78.0 over them): linear +4.0 and kNN 81.5 - 78 = +3.5
    # pass step 1; 84 - 82 = +2.0 passes step 2, though the recorded values differ by 1.999998.
    # SimCLR (seed 0; untrained 79.0 / 78.0): kNN +2.0 fails step 1, linear +1.0 over the pixels
    # fails step 2.
    assert (
        "| MoCo v3 | 29 | 0,1 | 84.00 ± 0.00 | 81.50 ± 0.71 | +4.00 | +3.50 | +2.00 | yes | yes |"
        in md
    )
    assert "| SimCLR | 29 | 0 | 83.00 | 80.00 | +4.00 | +2.00 | +1.00 | no | no |" in md
    assert "| random init" not in md
    assert "(over all seeds: linear 80.00 ± 1.41, kNN 78.00 ± 0.00) and the raw pixels" in md
    # The curve table and its bars apply the same rule to the same values.
    curves = curve_markdown(trained + references)
    assert "| 84.0 | 81.0 | +4.00 | +3.00 | +2.00 | yes | yes |" in curves  # untrained: 80 / 78
    assert "linear >= pixels + 2 (84.0) passed at 100 s" in curves
    # Without reference rows every gap and step is n/a, not a guess.
    assert "| MoCo v3 | 29 | 0,1 | 84.00 ± 0.00 | 81.50 ± 0.71 | n/a | n/a | n/a | n/a | n/a |" in (
        regime_markdown(trained)
    )


def test_extrapolate_follows_a_log_linear_rise() -> None:
    points = [(math.exp(1.0), 1.0), (math.exp(2.0), 2.0), (math.exp(3.0), 3.0)]
    assert extrapolate(points, 4.0) == pytest.approx(math.exp(4.0))
    assert extrapolate([(1.0, 5.0), (2.0, 5.0), (3.0, 4.0)], 6.0) is None  # falling
    assert extrapolate(points[:2], 4.0) is None


def test_the_four_verdicts_apply_the_noise_rule_to_both_probes() -> None:
    def r(label: str, seed: int, lin: float, knn: float) -> dict:
        return {"label": label, "comparison": "x", "seed": seed, "status": "ok", "epochs": 1,
                "offline_acc1": lin, "offline_knn_acc1": knn}  # fmt: skip

    results = [r("AttentionNCE (M=4)", 0, 80.0, 70.0), r("AttentionNCE (M=4)", 1, 82.0, 72.0),
               r("SimCLR (time of AttentionNCE)", 0, 76.0, 71.0),
               r("SimCLR (time of AttentionNCE)", 1, 78.0, 73.0)]  # fmt: skip
    md = verdicts_markdown(results)
    # linear: 81 - 77 = +4.0 > 1.41 + 1.41, clear; kNN: 71 - 72 = -1.0, not clear.
    assert (
        "- Does AttentionNCE beat SimCLR at equal time? AttentionNCE (M=4) minus SimCLR (time of "
        "AttentionNCE): offline linear +4.0, clear; offline kNN -1.0, not clear (seeds 0,1 / 0,1)."
    ) in md
    assert "- Is the attention itself responsible? Not run yet ('AttentionNCE, attention off" in md
    skipped = {"label": "MoCo v3 (time of MoCo v3 + AttentionNCE)", "comparison": "equal-time",
               "seed": 0, "status": "skipped", "epochs": 0, "error": "timed on two CPUs"}  # fmt: skip
    failed = dict(r("AttentionNCE (M=4)", 2, None, None), status="failed", error="Traceback")
    md = verdicts_markdown([*results, skipped, failed])
    assert "(time of MoCo v3 + AttentionNCE)' have no record: timed on two CPUs)." in md
    # A present row's failed seed does not become the reason another row is missing.
    assert "('AttentionNCE, attention off (M=4)' has no record)." in md
    table = bench_markdown([*results, skipped], ["command: `x`"])
    assert "| MoCo v3 (time of MoCo v3 + AttentionNCE) | - | - (skipped: 0) |" in table


def test_trained_on_names_each_cpu_with_its_rows():
    done = [
        Result("a", "SimCLR", "simclr", "equal-epoch", 0, 29, cpu="AMD EPYC"),
        Result("b", "SimCLR", "simclr", "equal-epoch", 1, 29, cpu="AMD EPYC"),
        {"label": "MoCo v3", "comparison": "equal-epoch", "status": "ok", "cpu": "Xeon"},
        Result("c", "SimCLR (time of X)", "simclr", "equal-time", 0, 82),  # before the field
        Result("d", "failed", "simclr", "equal-epoch", 0, 29, status="failed", cpu="Xeon"),
        Result("e", "random init", "random", "reference", 0, 0, cpu="Xeon"),
    ]
    assert trained_on(done) == (
        "AMD EPYC: SimCLR (equal-epoch); Xeon: MoCo v3 (equal-epoch); "
        "not recorded: SimCLR (time of X) (equal-time)"
    )
