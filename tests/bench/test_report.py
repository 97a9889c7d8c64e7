"""Report formatting from fake result rows (formatter only; real numbers come from real runs)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from attnce_bench import report


def _row(label, seed, knn, comparison="equal-epoch", status="ok", method="simclr", **kw):
    base = dict(
        comparison=comparison,
        label=label,
        method=method,
        num_positives=0,
        seed=seed,
        epochs=3,
        status=status,
        knn_acc1=knn,
        linear_acc1=knn - 1,
        offline_acc1=knn + 1,
        offline_knn_acc1=knn + 2,
        seconds_per_epoch=10.0 + seed,
        train_seconds=30.0,
        peak_rss_mib=900.0,
        peak_pss_mib=800.0 + seed,
        matched_to=None,
    )
    base.update(kw)
    return base


def test_mean_std() -> None:
    assert report.mean_std([1.0, 3.0]) == (2.0, pytest.approx(2**0.5))
    assert report.mean_std([5.0, None]) == (5.0, None)
    assert report.mean_std([]) == (None, None)


def test_markdown_and_csv(tmp_path: Path) -> None:
    results = [
        _row("SimCLR", 0, 70.0),
        _row("SimCLR", 1, 72.0),
        _row("AttentionNCE (M=4)", 0, 75.0, method="attentionnce"),
        _row("AttentionNCE (M=4)", 1, 0.0, method="attentionnce", status="failed"),
        _row(
            "SimCLR (time of AttentionNCE)",
            0,
            74.0,
            comparison="equal-time",
            matched_to="AttentionNCE (M=4)",
            epochs=8,
        ),
    ]
    rows = report.aggregate(results)
    md = report.render_markdown(rows, "# header", ["a note"])
    assert (
        "| SimCLR | 3 | 2 | 71.0 ± 1.4 | 70.0 ± 1.4 | 73.0 ± 1.4 | 72.0 ± 1.4 | 10.5 | 30 | 801 |"
        in md
    )
    assert "| AttentionNCE (M=4) | 3 | 1 (1 failed) | 75.0 |" in md
    # the equal-time section pairs the baseline with the row it was matched to
    section = md.split("## Equal wall-clock")[1]
    assert section.index("SimCLR (time of AttentionNCE) | 8") < section.index("AttentionNCE (M=4)")
    assert "- a note" in md

    runs_csv, summary_csv = report.write_csvs(results, rows, tmp_path)
    lines = list(csv.DictReader(summary_csv.open()))
    simclr = next(line for line in lines if line["label"] == "SimCLR")
    assert float(simclr["knn_acc1_mean"]) == 71.0 and simclr["seeds"] == "0 1"
    assert len(list(csv.DictReader(runs_csv.open()))) == 5


def test_plot_writes_png(tmp_path: Path) -> None:
    rows = report.aggregate([_row("SimCLR", 0, 70.0), _row("SimCLR", 1, 72.0)])
    path = report.plot(rows, tmp_path / "r.png", "t")
    assert path is not None and path.read_bytes()[:4] == b"\x89PNG"


def _run_dir(out: Path, label: str, epochs: int, seed: int, data_seed: int = 0) -> Path:
    """A run folder with the header of config.yaml as compose.py writes it."""
    run_dir = out / "runs" / "frontier" / label / f"e{epochs}" / f"seed{seed}"
    run_dir.mkdir(parents=True)
    data = out / "data" / f"fashion-mnist_32px_train1200_val1000_seed{data_seed}"
    (run_dir / "config.yaml").write_text(
        "\n".join(
            [
                "# pretrain/cifar/attentionnce.yaml from pkg://attnce_plugin.configs, overrides:",
                f"#   ++data.train_path={data}/train",
                f"#   ++seed={seed}",
                f"#   ++max_epochs={epochs}",
                f"#   ++name=simclr-fashion_mnist-seed{seed}",
                f"#   ++checkpoint.dir={run_dir}/ckpt",
                "method: attentionnce",
            ]
        )
        + "\n"
    )
    return run_dir


def test_overrides_keep_the_data_seed_and_show_several_budgets(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    results = [
        _row(
            "SimCLR",
            seed,
            50.0,
            comparison="frontier",
            epochs=epochs,
            run_dir=str(_run_dir(out, "SimCLR", epochs, seed)),
        )
        for epochs in (2, 4)
        for seed in (1, 2)
    ] + [
        _row(
            "MoCo v3",
            1,
            50.0,
            comparison="frontier",
            epochs=4,
            run_dir=str(_run_dir(out, "MoCo-v3", 4, 1)),
        )
    ]
    text = report.overrides_section(results)
    # The data subset's seed is not a run's seed: it stays as written.
    assert "<out>/data/fashion-mnist_32px_train1200_val1000_seed0/train" in text
    assert "++seed=<seed>" in text and "simclr-fashion_mnist-seed<seed>" in text
    simclr = next(line for line in text.splitlines() if line.startswith("| SimCLR |"))
    assert "`++max_epochs=<epochs>`" in simclr and "(`<epochs>`: 2, 4)" in simclr
    assert "/runs/frontier/SimCLR/e<epochs>/seed<seed>/ckpt" in simclr
    moco = next(line for line in text.splitlines() if line.startswith("| MoCo v3 |"))
    # One budget: the value itself, and no budget list.
    assert "`++max_epochs=4`" in moco and "<epochs>" not in moco
