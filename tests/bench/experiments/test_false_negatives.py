"""attnce_bench.experiments.false_negatives: SimCLR vs AttentionNCE at K = 2 / 5 classes.

One real end-to-end smoke run on fake Fashion-MNIST IDX files (the bench and solo-learn's
main_pretrain.py underneath, 4 pretraining runs of 2 batches each), the pure aggregation and
table code on hand-made results, and refused inputs.
"""

from __future__ import annotations

import csv
import importlib
import json
import math
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
from helpers.images import write_fake_fashion_mnist
from helpers.scripts import run_script
from omegaconf import OmegaConf


@pytest.fixture(scope="module")
def fnr() -> Any:
    """The experiment's module."""
    return importlib.import_module("attnce_bench.experiments.false_negatives")


def _table_rows(md: str) -> List[Dict[str, str]]:
    lines = [line for line in md.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(head, (c.strip() for c in line.strip("|").split("|")))) for line in lines[1:]]


@pytest.mark.integration
def test_smoke_end_to_end(tmp_path: Path) -> None:
    # Smoke preset: batch 16 and 1 epoch. 32 training images give 2 batches at every K (solo drops
    # incomplete ones), so each K's classes (K=2: coat, shirt) need 16 training images; 10
    # validation images hold every class at K <= 5. 20 / 10 per class in the fake files.
    source = write_fake_fashion_mnist(tmp_path / "idx", train_per_class=20, test_per_class=10)
    out = tmp_path / "fnr"
    argv = [
        "-m",
        "attnce_bench.experiments.false_negatives",
        "--preset",
        "smoke",
        "--classes",
        "2,5",
        "--num-train",
        "32",
        "--num-val",
        "10",
        "--data-source",
        str(source),
        "--out",
        str(out),
    ]
    # One thread per process: the compute is tiny, and 2-thread OpenMP pools slow down many
    # times over when other jobs share the 2 cores.
    proc = run_script(argv, cwd=tmp_path, timeout=600, threads=1)  # fails loudly, also without solo

    md = (out / "table.md").read_text()
    assert md.startswith("<!-- python3 -m attnce_bench.experiments.false_negatives ")
    assert "--classes 2,5" in md.splitlines()[0]
    assert md in proc.stdout  # printed as well
    rows = _table_rows(md)
    attention = "AttentionNCE (M=4, d_pos=1, d_neg=10)"
    assert [(r["K"], r["method"]) for r in rows] == [
        ("2", "SimCLR"),
        ("2", attention),
        ("2", "random init (no pretraining)"),
        ("2", "raw pixels"),
        ("5", "SimCLR"),
        ("5", attention),
        ("5", "random init (no pretraining)"),
        ("5", "raw pixels"),
    ]
    for r in rows:
        k = int(r["K"])
        assert r["false-neg. rate"] == f"1/{k} = {1 / k:.2f}" and float(r["chance %"]) == 100 / k
        assert 0 <= float(r["offline linear top-1 %"]) <= 100
        assert 0 <= float(r["offline kNN top-1 %"]) <= 100
        if r["method"] not in ("random init (no pretraining)", "raw pixels"):
            assert r["epochs"] == "1" and r["seeds"] == "1"
            assert (
                0 <= float(r["kNN top-1 %"]) <= 100
                and 0 <= float(r["online linear top-1 %"]) <= 100
            )
    by = {(r["K"], r["method"]): r for r in rows}
    for k in ("2", "5"):
        gap = float(by[(k, attention)]["kNN gap vs SimCLR (points)"])
        assert gap == pytest.approx(
            float(by[(k, attention)]["kNN top-1 %"]) - float(by[(k, "SimCLR")]["kNN top-1 %"]),
            abs=0.11,
        )

    with open(out / "table.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(rows)
    assert (out / "plot.png").read_bytes()[:4] == b"\x89PNG"
    # solo-learn sizes its online classifier by the class folders of data.train_path, and its kNN
    # by the validation classes: both hold exactly the K classes (checked by hand: classifier
    # weight [5, 512] at K=5).
    for k in (2, 5):
        runs = json.loads((out / f"K{k}" / "results.json").read_text())
        assert all(r["status"] == "ok" for r in runs), runs
        data = OmegaConf.load(Path(runs[0]["run_dir"]) / "config.yaml").data
        assert len([p for p in Path(data.train_path).iterdir() if p.is_dir()]) == k
        assert len({p.parent.name for p in Path(data.val_path).glob("*/*.png")}) == k


def test_rows_gap_and_table_from_hand_made_results(fnr: Any, tmp_path: Path) -> None:
    def run(
        label: str,
        method: str,
        seed: int,
        knn: float,
        settings: Optional[Dict[str, float]] = None,
        status: str = "ok",
        comparison: str = "equal-epoch",
    ) -> Dict[str, Any]:
        return {
            "label": label,
            "method": method,
            "comparison": comparison,
            "seed": seed,
            "epochs": 4,
            "num_positives": 4 if method == "attentionnce" else 0,
            "status": status,
            "knn_acc1": knn,
            "linear_acc1": knn - 5,
            "offline_acc1": None,
            "settings": settings or {},
            "run_dir": str(tmp_path / "base"),
        }

    # The base AttentionNCE run has no plan settings: its d values come from its config.yaml.
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.yaml").write_text("method_kwargs:\n  d_pos: 1.0\n  d_neg: 10.0\n")
    grid = {"method_kwargs.d_pos": 1.0, "method_kwargs.d_neg": 1.0}
    results = {
        5: [
            run("SimCLR", "simclr", 0, 40.0),
            run("AttentionNCE (M=4)", "attentionnce", 0, 50.0),
            run("SimCLR", "simclr", 1, 44.0),
            run("AttentionNCE (M=4)", "attentionnce", 1, 53.0, status="failed"),
        ],
        2: [
            run("SimCLR", "simclr", 0, 60.0),
            run("AttentionNCE (M=4)", "attentionnce", 0, 70.0),
            run(
                "AttentionNCE (M=4, d_pos=1, d_neg=1)",
                "attentionnce",
                0,
                62.0,
                grid,
                comparison="ablation",
            ),
            run("SimCLR", "simclr", 1, 64.0),
            run("AttentionNCE (M=4)", "attentionnce", 1, 73.0),
            run(
                "AttentionNCE (M=4, d_pos=1, d_neg=1)",
                "attentionnce",
                1,
                66.0,
                grid,
                comparison="ablation",
            ),
        ],
    }
    rows = fnr.build_rows(results)
    assert [(r.k, r.label) for r in rows] == [
        (2, "SimCLR"),
        (2, "AttentionNCE (M=4, d_pos=1, d_neg=10)"),
        (2, "AttentionNCE (M=4, d_pos=1, d_neg=1)"),
        (5, "SimCLR"),
        (5, "AttentionNCE (M=4, d_pos=1, d_neg=10)"),
    ]
    simclr2, base2, grid2, simclr5, base5 = rows
    assert [r.d_neg for r in rows] == [None, 10.0, 1.0, None, 10.0]
    s = math.sqrt(8.0)  # sample std of (60, 64) and of (62, 66)
    assert simclr2.stats["knn_acc1"] == pytest.approx((62.0, s))
    # Gap: difference of the means, std sqrt(std_A^2 + std_SimCLR^2).
    assert base2.knn_gap == pytest.approx((9.5, math.hypot(math.sqrt(4.5), s)))
    assert grid2.knn_gap == pytest.approx((2.0, math.hypot(s, s)))
    assert simclr2.knn_gap is None and simclr5.knn_gap is None
    # K=5: one AttentionNCE seed failed, so one seed and no std; the gap has no std either.
    assert (base5.seeds, base5.failed_seeds) == (1, 1)
    assert base5.knn_gap == (pytest.approx(50.0 - 42.0), None)
    assert base5.chance == 20.0

    table = fnr.markdown_table(rows)
    assert (
        "| 2 | 1/2 = 0.50 | 50.0 | AttentionNCE (M=4, d_pos=1, d_neg=10) | 4 | 2 | 71.5 ± 2.1 "
        "| 66.5 ± 2.1 | n/a | n/a | +9.5 ± 3.5 |"
    ) in table
    assert (
        "| 5 | 1/5 = 0.20 | 20.0 | AttentionNCE (M=4, d_pos=1, d_neg=10) | 4 | 1 (1 failed) |"
        in table
    )
    assert (
        "| 5 | 1/5 = 0.20 | 20.0 | SimCLR | 4 | 2 | 42.0 ± 2.8 | 37.0 ± 2.8 | n/a | n/a | — |"
        in table
    )

    path = fnr.write_csv(rows, tmp_path / "t.csv", {2: [4, 6], 5: [2, 3, 4, 6, 7]})
    with open(path) as fh:
        lines = list(csv.DictReader(fh))
    assert lines[1]["classes"] == "4 6" and float(lines[1]["knn_gap_mean"]) == 9.5
    assert lines[0]["knn_gap_mean"] == "" and float(lines[4]["false_negative_rate"]) == 0.2


def test_classes_are_nested_and_seeded(fnr: Any) -> None:
    order = fnr.class_order(0)
    assert sorted(order) == list(range(10)) and order == fnr.class_order(0)
    k2, k5, k10 = (set(fnr.classes_for(k, order)) for k in (2, 5, 10))
    assert k2 < k5 < k10 == set(range(10))


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--classes", "1"], "--classes=1: allowed values are K in 2..10"),
        (["--classes", "2,11"], "--classes=2,11: allowed values are K in 2..10"),
        (["--classes", "2,5,2"], "--classes=2,5,2: each K at most once"),
        (["--dneg-grid", "0"], "--dneg-grid: 0.0 is not allowed"),
        (["--", "--out", "x"], "--out after '--'"),
    ],
)
def test_refuses_bad_input_before_training(
    fnr: Any, tmp_path: Path, capsys: pytest.CaptureFixture, argv: List[str], needle: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        fnr.main(["--preset", "smoke", "--out", str(tmp_path / "out"), *argv])
    assert exit_info.value.code == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing prepared, nothing trained


def test_each_k_is_the_bench_on_a_class_subset(fnr: Any, tmp_path: Path) -> None:
    """The options of one K: the bench's own Fashion-MNIST runs (shipped configs and overrides),
    on the K classes, SimCLR and AttentionNCE only, and one ablation run per --dneg-grid value;
    bench flags after '--' (and raw overrides after a second '--') are kept."""
    budget = fnr.Budget(
        preset="smoke",
        seeds=(0, 1),
        epochs=2,
        batch_size=16,
        num_train=32,
        num_val=10,
        num_workers=0,
    )
    opts = fnr.bench_options(
        budget,
        [4, 6],
        tmp_path / "K2",
        tmp_path / "data",
        [1.0],
        ["--accelerator", "gpu", "--", "++trainer_flag=1"],
    )
    assert opts.dataset == "fashion_mnist" and list(opts.classes) == [4, 6]
    assert list(opts.methods) == ["simclr", "attentionnce"] and not opts.time_matched
    assert opts.ablation and list(opts.m_grid) == [] and list(opts.dpos_grid) == []
    assert list(opts.dneg_grid) == [1.0] and list(opts.seeds) == [0, 1] and opts.epochs == 2
    assert opts.accelerator == "gpu" and list(opts.overrides) == ["++trainer_flag=1"]
    assert opts.out == str(tmp_path / "K2") and opts.data_cache == str(tmp_path / "data")
