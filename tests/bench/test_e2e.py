"""One real end-to-end run of ``attnce-bench --preset smoke``, from a wheel of this repository
installed (not editable) in a fresh virtual environment, run from a folder outside the repository.

It trains every method (SimCLR and MoCo v3, AttentionNCE and MoCo v3 + AttentionNCE, AttentionNCE
with M = 2, the two equal-wall-clock baselines) for one epoch of 6 batches of 16 images through
solo-learn's main_pretrain.py, each from a shipped config plus overrides, then probes, adds the
reference rows and reports. A few minutes on a 2-core CPU. The numbers are meaningless; the test
checks that everything runs from the installed package and lands where the report says. Needs
solo-learn and Debian's dataset-fashion-mnist; FAILS, never skips, without them.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.scripts import REPO_ROOT  # noqa: E402

from attnce_bench.data import fashion_mnist_dir
from attnce_plugin.solo_compat import require_solo

pytestmark = pytest.mark.integration  # trains through solo-learn or runs its scripts


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv (seeing this Python's packages: torch, solo-learn) with a wheel of this repository
    installed into it; returns its ``attnce-bench`` command."""
    require_solo()
    assert (
        fashion_mnist_dir() / "train-images-idx3-ubyte.gz"
    ).is_file(), "Fashion-MNIST missing: apt-get install dataset-fashion-mnist"
    root = tmp_path_factory.mktemp("wheel_install")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(root / "dist"),
            str(REPO_ROOT),
        ],
        check=True,
        capture_output=True,
    )
    wheel = next((root / "dist").glob("attnce_plugin-*.whl"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
    )
    return venv / "bin" / "attnce-bench"


def _env() -> dict:
    # No PYTHONPATH into the checkout: the installed package must do everything by itself.
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_installed_package_imports_from_site_packages(installed: Path) -> None:
    code = "import attnce_bench, attnce_plugin.configs as c; print(attnce_bench.__file__, c.config_dir())"
    out = subprocess.run(
        [str(installed.parent / "python"), "-c", code],
        cwd=installed.parent,
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(REPO_ROOT) not in out and "site-packages" in out, out


def test_bench_smoke_end_to_end(installed: Path, tmp_path: Path) -> None:
    out = tmp_path / "bench_out"
    proc = subprocess.run(
        [str(installed), "--preset", "smoke", "--out", str(out)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    md = (out / "results.md").read_text()
    for label in (
        "SimCLR",
        "MoCo v3",
        "AttentionNCE (M=4)",
        "MoCo v3 + AttentionNCE (M=4)",
        "AttentionNCE (M=2)",
        "SimCLR (time of AttentionNCE)",
        "MoCo v3 (time of MoCo v3 + AttentionNCE)",
        "random init (no pretraining)",
        "raw pixels",
    ):
        assert f"| {label} |" in md, label
    assert "## Equal wall-clock" in md and md in proc.stdout  # the summary is printed too

    runs = list(csv.DictReader((out / "runs.csv").open()))
    assert len(runs) == 9 and all(r["status"] == "ok" for r in runs), runs
    for r in runs:
        assert 0 <= float(r["offline_knn_acc1"]) <= 100 and 0 <= float(r["offline_acc1"]) <= 100
    trained = [r for r in runs if r["comparison"] != "reference"]
    for r in trained:
        assert float(r["seconds_per_epoch"]) > 0 and float(r["peak_rss_mib"]) > 100
        assert 0 <= float(r["knn_acc1"]) <= 100 and 0 <= float(r["offline_acc1"]) <= 100
        run_dir = Path(r["run_dir"])
        assert (run_dir / "command.sh").is_file() and (run_dir / "epochs.jsonl").is_file()
        assert not (run_dir / "ckpt").exists()  # removed after the probe by default
        # The run is a shipped config plus overrides, all named in its config.yaml.
        head = (run_dir / "config.yaml").read_text().splitlines()[0]
        assert head.startswith("# pretrain/cifar/") and "from attnce_plugin.configs" in head
        assert "--config-path pkg://attnce_plugin.configs" in (run_dir / "command.sh").read_text()
    assert (out / "results.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "summary.csv").is_file()

    # A second invocation reuses every finished run instead of training again.
    logs_before = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("train.log")}
    again = subprocess.run(
        [str(installed), "--preset", "smoke", "--out", str(out)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    equal_epochs = (out / "results.md").read_text().split("## Equal epochs")[1].split("\n## ")[0]
    assert equal_epochs.count("| SimCLR | 1 | 1 |") == 1
    with open(out / "runs.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 9
    assert logs_before and logs_before == {
        p: p.stat().st_mtime_ns for p in (out / "runs").rglob("train.log")
    }


def test_cli_errors_name_the_problem(capsys: pytest.CaptureFixture) -> None:
    from attnce_bench.__main__ import main

    assert main(["--dataset", "cifar10", "--out", "/nonexistent/x"]) == 2
    assert "--train-path" in capsys.readouterr().err
    assert main(["--set", "no_equals_sign"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main(["--set", "byol:optimizer.lr=1"]) == 2
    assert "allowed values" in capsys.readouterr().err


def test_usage_commands_run_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    """docs/solo-learn-usage.md's two ways to name a config, from the wheel's site-packages:
    the folder printed by attnce-configs, and pkg://attnce_plugin.configs (2 CPU steps each)."""
    from helpers.images import make_image_folder

    from attnce_plugin.solo_compat import solo_checkout_dir

    train = make_image_folder(tmp_path / "train", num_classes=2, per_class=4)
    folder = subprocess.run(
        [str(installed.parent / "attnce-configs"), "pretrain/custom"],
        env=_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert "site-packages" in folder and str(REPO_ROOT) not in folder
    cpu = [
        "data.num_workers=0",
        f"data.train_path={train}",
        "~data.val_path",
        "views.crop_size=32",
        "accelerator=cpu",
        "precision=32",
        "strategy=auto",
        "sync_batchnorm=False",
        'devices="1"',
        "optimizer.batch_size=4",
        "max_epochs=1",
        "++limit_train_batches=2",
        "++scheduler.warmup_epochs=0",
        "auto_resume.enabled=False",
        "method_kwargs.proj_hidden_dim=32",
        "method_kwargs.proj_output_dim=16",
    ]
    for i, naming in enumerate(
        (
            ["--config-path", folder, "--config-name", "attentionnce.yaml"],
            [
                "--config-path",
                "pkg://attnce_plugin.configs",
                "--config-name",
                "pretrain/custom/attentionnce.yaml",
            ],
        )
    ):
        ckpt = tmp_path / f"ckpt{i}"
        proc = subprocess.run(
            [
                str(installed.parent / "python"),
                str(solo_checkout_dir() / "main_pretrain.py"),
                *naming,
                *cpu,
                f"checkpoint.dir={ckpt}",
            ],
            cwd=tmp_path,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert list(ckpt.rglob("*.ckpt")), naming
