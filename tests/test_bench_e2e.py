"""One real end-to-end run of the benchmark command with its micro budget (--preset smoke).

It trains every method (solo-learn's SimCLR and MoCo v3, the plugin's AttentionNCE and MoCo v3 +
AttentionNCE, AttentionNCE with M = 2, the two equal-wall-clock baselines) for one epoch of 6
batches of 16 images through solo-learn's main_pretrain.py, then probes and reports. About a
minute on an idle 2-core CPU (several times longer on a busy one). The numbers are meaningless;
the test checks that everything runs and lands where the report says.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnce_plugin.bench.data import fashion_mnist_dir

REPO_ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    not (fashion_mnist_dir() / "train-images-idx3-ubyte.gz").is_file(),
    reason="Fashion-MNIST missing: apt-get install dataset-fashion-mnist",
)


def test_bench_smoke_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("solo")
    out = tmp_path / "bench_out"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run(
        [sys.executable, "-m", "attnce_plugin.bench", "--preset", "smoke", "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    md = (out / "results.md").read_text()
    for label in ("SimCLR", "MoCo v3", "AttentionNCE (M=4)", "MoCo v3 + AttentionNCE (M=4)",
                  "AttentionNCE (M=2)", "SimCLR (time of AttentionNCE)",
                  "MoCo v3 (time of MoCo v3 + AttentionNCE)", "random init (no pretraining)"):
        assert f"| {label} |" in md, label
    assert "## Equal wall-clock" in md and md in proc.stdout  # the summary is printed too

    runs = list(csv.DictReader((out / "runs.csv").open()))
    assert len(runs) == 8 and all(r["status"] == "ok" for r in runs), runs
    trained = [r for r in runs if r["comparison"] != "reference"]
    for r in trained:
        assert float(r["seconds_per_epoch"]) > 0 and float(r["peak_rss_mib"]) > 100
        assert 0 <= float(r["knn_acc1"]) <= 100 and 0 <= float(r["offline_acc1"]) <= 100
        run_dir = Path(r["run_dir"])
        assert (run_dir / "command.sh").is_file() and (run_dir / "epochs.jsonl").is_file()
        assert not (run_dir / "ckpt").exists()  # removed after the probe by default
    assert (out / "results.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "summary.csv").is_file()

    # A second invocation reuses every finished run instead of training again.
    logs_before = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("train.log")}
    again = subprocess.run(
        [sys.executable, "-m", "attnce_plugin.bench", "--preset", "smoke", "--out", str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    equal_epochs = (out / "results.md").read_text().split("## Equal epochs")[1].split("\n## ")[0]
    assert equal_epochs.count("| SimCLR | 1 | 1 |") == 1
    with open(out / "runs.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 8
    assert logs_before and logs_before == {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("train.log")}


def test_cli_errors_name_the_problem(capsys: pytest.CaptureFixture) -> None:
    from attnce_plugin.bench.__main__ import main

    assert main(["--dataset", "cifar10", "--out", "/nonexistent/x"]) == 2
    assert "--train-path" in capsys.readouterr().err
    assert main(["--set", "no_equals_sign"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main(["--set", "byol:optimizer.lr=1"]) == 2
    assert "allowed values" in capsys.readouterr().err
