"""attnce-bench --frontier: the plan, the aggregation and the verdict on hand-made results, and
one real run of ``--frontier --preset smoke`` (two variants' worth of methods, two budgets)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnce_bench import frontier
from attnce_bench.__main__ import main


def test_plan_covers_every_variant_budget_and_seed() -> None:
    plan = frontier.build_frontier_plan(
        ["simclr", "mocov3", "attentionnce", "mocov3_attentionnce"], [4, 2], [0, 1]
    )
    assert len(plan) == len(frontier.VARIANTS) * 2 * 2
    assert {(s.label, s.epochs) for s in plan if s.seed == 0} == {
        (v.label, e) for v in frontier.VARIANTS for e in (2, 4)
    }
    assert len({s.key for s in plan}) == len(plan)  # one folder per run
    batched = [s for s in plan if "batched" in s.label]
    assert batched and all(
        dict(s.settings) == {"method_kwargs.batch_positives": True} for s in batched
    )
    # Methods select variants; the multi-crop ones come with attentionnce.
    labels = {s.label for s in frontier.build_frontier_plan(["attentionnce"], [1], [0])}
    assert labels == {
        "AttentionNCE (M=1)",
        "AttentionNCE (M=2)",
        "AttentionNCE (M=4)",
        "AttentionNCE multicrop (M=4, small)",
        "AttentionNCE multicrop (M=4, small, batched)",
    }
    with pytest.raises(ValueError, match="--frontier-epochs"):
        frontier.build_frontier_plan(["simclr"], [0], [0])


def _run(label, epochs, seed, secs, knn):
    return {
        "comparison": "frontier",
        "label": label,
        "epochs": epochs,
        "seed": seed,
        "status": "ok",
        "train_seconds": secs,
        "knn_acc1": knn,
        "linear_acc1": knn - 1,
        "offline_acc1": knn + 1,
    }


def test_verdict_takes_each_variants_best_point_within_the_budget() -> None:
    results = [
        # SimCLR: cheap; AttentionNCE: 3x the time per epoch, better per epoch.
        _run("SimCLR", 2, 0, 10, 50.0),
        _run("SimCLR", 2, 1, 10, 52.0),
        _run("SimCLR", 4, 0, 20, 56.0),
        _run("SimCLR", 4, 1, 20, 58.0),
        _run("AttentionNCE (M=4)", 2, 0, 30, 60.0),
        _run("AttentionNCE (M=4)", 2, 1, 30, 61.0),
    ]
    points = frontier.frontier_points(results)
    assert [(p.label, p.epochs) for p in points] == [
        ("SimCLR", 2),
        ("SimCLR", 4),
        ("AttentionNCE (M=4)", 2),
    ]
    found = frontier.verdicts(points, budgets=[15, 25, 40])
    assert [v.leader.label if v.leader else None for v in found] == [
        "SimCLR",
        "SimCLR",
        "AttentionNCE (M=4)",
    ]
    assert found[0].runner_up is None and found[1].leader.epochs == 4
    last = found[2]
    assert last.runner_up.label == "SimCLR" and last.margin == pytest.approx(60.5 - 57.0)
    # 3.5 points against stds 0.71 + 1.41: clear.
    assert last.is_clear is True
    assert frontier.crossings(found) == ["between 25 s and 40 s: SimCLR -> AttentionNCE (M=4)"]
    md = frontier.markdown(results)
    assert "| AttentionNCE (M=4) | 2 | 2 | 30 ± 0 | 60.5 ± 0.7 |" in md
    assert "Leader changes (curves crossing): between" in md


@pytest.mark.integration
def test_frontier_smoke_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "bench_out"
    code = main(
        [
            "--frontier",
            "--preset",
            "smoke",
            "--methods",
            "simclr,mocov3_attentionnce",
            "--no-references",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err[-3000:]
    md = (out / "results.md").read_text()
    assert "## Accuracy per training time (frontier)" in md
    for label in ("SimCLR", "MoCo v3 + AttentionNCE (M=4)"):
        for epochs in (1, 2):
            assert f"| {label} | {epochs} | 1 |" in md
    assert "- budget: epoch budgets 1, 2 (--frontier), batch" in md
    assert "| SimCLR | `pretrain/cifar/attentionnce.yaml` |" in md
    assert "    ++max_epochs=<epochs>\n" in md and "(`<epochs>`: 1, 2)" in md
    runs = json.loads((out / "results.json").read_text())
    assert len(runs) == 4 and all(r["status"] == "ok" for r in runs)
    assert {r["epochs"] for r in runs} == {1, 2}
    assert (out / "frontier.png").read_bytes()[:4] == b"\x89PNG"


def test_family_verdict_compares_best_attentionnce_with_best_baseline() -> None:
    results = [
        _run("SimCLR", 2, 0, 10, 50.0),
        _run("SimCLR", 2, 1, 10, 52.0),
        _run("MoCo v3", 2, 0, 12, 44.0),
        _run("MoCo v3", 2, 1, 12, 46.0),
        _run("AttentionNCE (M=1)", 2, 0, 14, 49.0),
        _run("AttentionNCE (M=1)", 2, 1, 14, 50.0),
        _run("AttentionNCE (M=4)", 2, 0, 30, 60.0),
        _run("AttentionNCE (M=4)", 2, 1, 30, 61.0),
        _run("MoCo v3 + AttentionNCE (M=4)", 2, 0, 20, 53.0),
        _run("MoCo v3 + AttentionNCE (M=4)", 2, 1, 20, 54.0),
    ]
    points = frontier.frontier_points(results)
    found = frontier.family_verdicts(points, budgets=[11, 15, 25, 40])
    # 11 s: SimCLR only.
    assert found[0].baseline.label == "SimCLR" and found[0].attention is None
    assert found[0].gap is None and found[0].is_clear is None
    # 15 s: M=1 (49.5 ± 0.71) behind SimCLR (51 ± 1.41) by 1.5 < 2.12: baseline ahead, not clear.
    assert found[1].attention.label == "AttentionNCE (M=1)"
    assert found[1].gap == pytest.approx(-1.5) and found[1].is_clear is False
    # 25 s: the MoCo form counts as AttentionNCE: 53.5 against SimCLR's 51: +2.5 > 2.12, clear.
    assert found[2].attention.label == "MoCo v3 + AttentionNCE (M=4)"
    assert found[2].gap == pytest.approx(2.5) and found[2].is_clear is True
    # 40 s: M=4 against the best baseline, SimCLR, not MoCo v3.
    assert found[3].baseline.label == "SimCLR" and found[3].attention.label == "AttentionNCE (M=4)"
    assert found[3].gap == pytest.approx(9.5)
    md = frontier.markdown(results)
    assert "Best AttentionNCE variant against the best of SimCLR and MoCo v3, online kNN" in md
    # The report's own budget grid ends at the slowest point, 30 s.
    assert (
        "| 30 | SimCLR, 2 ep | 51.0 ± 1.4 | AttentionNCE (M=4), 2 ep | 60.5 ± 0.7 | +9.5 | "
        "AttentionNCE ahead, clear |"
    ) in md
