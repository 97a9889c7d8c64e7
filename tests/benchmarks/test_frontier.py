"""benchmarks.frontier: the run list and the per-budget verdicts on hand-made results."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import frontier

ALL = ["simclr", "mocov3", "attentionnce", "mocov3_attentionnce"]


def test_runs_cover_every_variant_budget_and_seed_seed_major() -> None:
    runs = frontier.runs(ALL, [4, 2, 4], [0, 1])
    assert len(runs) == 8 * 2 * 2
    assert [r.seed for r in runs] == [0] * 16 + [1] * 16
    assert [(r.label, r.epochs) for r in runs[:4]] == [
        ("SimCLR", 2), ("SimCLR", 4), ("MoCo v3", 2), ("MoCo v3", 4),
    ]  # fmt: skip
    assert len({r.key for r in runs}) == len(runs)  # one folder per run
    assert runs[0].key == "frontier/SimCLR/e2/seed0" and runs[0].settings == ()
    by_label = {r.label: r for r in runs}
    assert by_label["AttentionNCE (M=1)"].settings == ("++views.num_positives=1",)
    batched = by_label["AttentionNCE multicrop (M=4, small, batched)"]
    assert batched.method == "attentionnce_multicrop"
    assert batched.settings == ("++views.num_positives=4", "++method_kwargs.batch_positives=true")
    assert by_label["MoCo v3 + AttentionNCE (M=4)"].method == "mocov3_attentionnce"
    assert {r.comparison for r in runs} == {"frontier"}


def test_methods_select_variants_and_bad_budgets_fail() -> None:
    labels = {r.label for r in frontier.runs(["attentionnce"], [1], [0])}
    assert labels == {
        "AttentionNCE (M=1)", "AttentionNCE (M=2)", "AttentionNCE (M=4)",
        "AttentionNCE multicrop (M=4, small)", "AttentionNCE multicrop (M=4, small, batched)",
    }  # fmt: skip
    with pytest.raises(ValueError, match="--frontier-epochs"):
        frontier.runs(["simclr"], [0], [0])
    with pytest.raises(ValueError, match="no variant"):
        frontier.runs(["byol"], [1], [0])


def _run(label: str, seed: int, secs: float, knn: float, status: str = "ok") -> dict:
    return {
        "comparison": "frontier", "label": label, "epochs": 2, "seed": seed, "status": status,
        "train_seconds": secs, "knn_acc1": knn, "linear_acc1": knn - 1, "offline_acc1": knn + 1,
    }  # fmt: skip


# SimCLR 51 ± 1.41 (10 s), MoCo v3 45 ± 1.41 (12 s), M=1 49.5 ± 0.71 (14 s), the MoCo form
# 53.5 ± 0.71 (20 s), M=4 60.5 ± 0.71 (30 s).
RESULTS = [
    _run("SimCLR", 0, 10, 50.0), _run("SimCLR", 1, 10, 52.0),
    _run("MoCo v3", 0, 12, 44.0), _run("MoCo v3", 1, 12, 46.0),
    _run("AttentionNCE (M=1)", 0, 14, 49.0), _run("AttentionNCE (M=1)", 1, 14, 50.0),
    _run("AttentionNCE (M=4)", 0, 30, 60.0), _run("AttentionNCE (M=4)", 1, 30, 61.0),
    _run("AttentionNCE (M=4)", 2, 0, 0.0, status="failed"),
    _run("MoCo v3 + AttentionNCE (M=4)", 0, 20, 53.0),
    _run("MoCo v3 + AttentionNCE (M=4)", 1, 20, 54.0),
    {"comparison": "reference", "label": "raw pixels", "epochs": 0, "status": "ok"},
]  # fmt: skip


def test_points_group_by_variant_and_epochs_in_table_order() -> None:
    pts = frontier.points(RESULTS)
    assert [p.label for p in pts] == [
        "SimCLR", "MoCo v3", "AttentionNCE (M=1)", "AttentionNCE (M=4)",
        "MoCo v3 + AttentionNCE (M=4)",
    ]  # fmt: skip
    m4 = pts[3]
    assert (m4.seeds, m4.failed, m4.seconds) == (2, 1, (30.0, 0.0))
    assert m4.stats["knn_acc1"][0] == pytest.approx(60.5)
    assert m4.stats["knn_acc1"][1] == pytest.approx(0.7071, abs=1e-4)
    # log-spaced from the fastest (10 s) to the slowest (30 s) point
    assert [round(b, 2) for b in frontier.budgets(pts)] == [10.0, 12.46, 15.52, 19.33, 24.08, 30.0]


def test_best_within_a_budget_by_family() -> None:
    pts = frontier.points(RESULTS)
    assert frontier.best(pts, 9.9, "knn_acc1") is None
    assert frontier.best(pts, 15, "knn_acc1").label == "SimCLR"
    assert frontier.best(pts, 15, "knn_acc1", skip=["SimCLR"]).label == "AttentionNCE (M=1)"
    assert frontier.best(pts, 15, "knn_acc1", baselines=False).label == "AttentionNCE (M=1)"
    # The MoCo form counts as AttentionNCE; the best baseline is SimCLR, not MoCo v3.
    assert frontier.best(pts, 25, "knn_acc1", baselines=False).label.startswith("MoCo v3 +")
    assert frontier.best(pts, 40, "knn_acc1", baselines=True).label == "SimCLR"


def test_markdown_verdicts_follow_the_one_noise_rule() -> None:
    md = frontier.markdown(RESULTS)
    assert "| AttentionNCE (M=4) | 2 | 2 (1 failed) | 30 ± 0 | 60.5 ± 0.7 | 59.5 ± 0.7 |" in md
    # 10 s: SimCLR alone.
    assert (
        "| 10 | SimCLR, 2 ep: 51.0 ± 1.4 | n/a | n/a | SimCLR, 2 ep: 51.0 ± 1.4 | n/a | n/a |" in md
    )
    # 12 s: SimCLR over MoCo v3 by 6.0 > 1.41 + 1.41; no AttentionNCE point yet.
    assert "| 12 | SimCLR, 2 ep: 51.0 ± 1.4 | MoCo v3, 2 ep: 45.0 ± 1.4 | +6.0, clear |" in md
    # 16 s: M=1 is 1.5 behind SimCLR, within 1.41 + 0.71.
    assert (
        "| 16 | SimCLR, 2 ep: 51.0 ± 1.4 | AttentionNCE (M=1), 2 ep: 49.5 ± 0.7 | +1.5, not clear | "
        "SimCLR, 2 ep: 51.0 ± 1.4 | AttentionNCE (M=1), 2 ep: 49.5 ± 0.7 | -1.5, not clear |"
    ) in md
    # 24 s: the MoCo form 2.5 ahead of SimCLR, more than 0.71 + 1.41.
    assert "| MoCo v3 + AttentionNCE (M=4), 2 ep: 53.5 ± 0.7 | +2.5, clear |\n" in md
    assert (
        "| 30 | AttentionNCE (M=4), 2 ep: 60.5 ± 0.7 | MoCo v3 + AttentionNCE (M=4), 2 ep: "
        "53.5 ± 0.7 | +7.0, clear | SimCLR, 2 ep: 51.0 ± 1.4 | AttentionNCE (M=4), 2 ep: "
        "60.5 ± 0.7 | +9.5, clear |"
    ) in md
    assert (
        "Leader changes (curves crossing): between 19 s and 24 s: SimCLR -> MoCo v3 + "
        "AttentionNCE (M=4); between 24 s and 30 s: MoCo v3 + AttentionNCE (M=4) -> "
        "AttentionNCE (M=4)."
    ) in md
    assert md.count("### Best ") == 3 and "### Best offline linear top-1 %" in md
    assert frontier.markdown(RESULTS[-1:]) == ""


def test_one_seed_is_undecided() -> None:
    md = frontier.markdown([_run("SimCLR", 0, 10, 50.0), _run("AttentionNCE (M=2)", 0, 10, 55.0)])
    assert "| +5.0, one seed |" in md


def test_plot_writes_a_png(tmp_path: Path) -> None:
    path = frontier.plot(RESULTS, tmp_path / "frontier.png", "t")
    assert path is not None and path.read_bytes()[:4] == b"\x89PNG"
    assert frontier.plot(RESULTS[-1:], tmp_path / "none.png", "t") is None
