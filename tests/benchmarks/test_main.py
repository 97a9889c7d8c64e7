"""``python3 -m benchmarks`` end to end: one AttentionNCE run of the smoke preset through
solo-learn's own main_pretrain.py (the run recorder and the validation hook attached by the
benchmark's Hydra callback), the probe, the reference rows and the report; a re-run reuses
everything; the demo preset ends with the committed reference tables; every ``--data`` format,
from small files in its real layout, and a solo-learn method as a row. Needs solo-learn and
Debian's dataset-fashion-mnist: FAILS without."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers.datasets import write_cifar, write_folders, write_stl10

from benchmarks.__main__ import main
from benchmarks.recorder import read_records
from benchmarks.runs import PRESETS

TESTS = Path(__file__).resolve().parents[1]
FORMATS = {
    "cifar10": lambda root: write_cifar(root, "cifar10"),
    "cifar100": lambda root: write_cifar(root, "cifar100"),
    "stl10": write_stl10,
    "imagenet100": write_folders,
    "folder": write_folders,
}


@pytest.mark.integration  # trains through solo-learn
def test_smoke_end_to_end_then_reuse_then_the_reference(tmp_path: Path, capsys) -> None:
    out = tmp_path / "bench_out"
    argv = ["--preset", "smoke", "--methods", "attentionnce", "--extra-m", "", "--out", str(out)]
    argv += ["--", "++limit_train_batches=2"]  # raw Hydra overrides reach every run
    assert main(argv) == 0, capsys.readouterr().err[-3000:]
    md = (out / "results.md").read_text()
    assert md in capsys.readouterr().out
    run = out / "runs" / "equal-epoch" / "attentionnce-M4" / "seed0"
    result = json.loads((run / "result.json").read_text())
    assert result["status"] == "ok" and result["epochs_done"] == 1, result["error"]
    assert 0 <= result["offline_acc1"] <= 100 and result["peak_mem_mib"] > 100
    assert not (run / "ckpt").exists() and (run / "args.json").is_file()
    (epoch,) = read_records(run / "record.jsonl", "epoch")  # written by benchmarks.recorder
    assert epoch["val_knn_acc1"] == result["knn_acc1"] and "train_attn_max_beta" in epoch
    regime = next(ln for ln in md.split("## Regime")[1].splitlines() if "AttentionNCE (M=4)" in ln)
    # batch 16: 2B - 2 = 30 negatives per anchor, 4 positives
    assert " of 4 | " in regime and " of 30 | " in regime
    for label in ("random init (no pretraining)", "raw pixels"):
        assert f"| {label} | 0 | 0 |" in md
    for ref in ("random-init", "raw-pixels"):  # the probes' provenance, as a trained run's
        probed = json.loads(
            (out / "runs" / "reference" / ref / "seed0" / "result.json").read_text()
        )
        assert probed["commit"] and probed["plugin_version"] and probed["cpu"]

    stamp = (run / "train.log").stat().st_mtime_ns
    assert main(argv) == 0  # every run and reference row reused
    assert (run / "train.log").stat().st_mtime_ns == stamp
    assert "reused" in capsys.readouterr().err

    assert main(["--preset", "default", "--report-only", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| AttentionNCE (M=4) | 1 | 0 |" in printed  # the demo's own table
    tail = printed.split("# The real result")[1]  # then the committed reference's answer
    assert "- Is the attention itself responsible? AttentionNCE (M=4) minus" in tail
    assert "| the questions | 8 | 8 |" in tail and "| imbalance |" in tail
    assert len(tail.strip().splitlines()) <= 40  # on one screen


@pytest.mark.parametrize(
    "argv, message",
    [(["--set", "no_equals_sign"], "KEY=VALUE"), (["--row", "simclr:d_neg=1"], "allowed values")],
)
def test_cli_errors_name_the_problem_before_any_training(argv, message, tmp_path, capsys) -> None:
    assert main([*argv, "--out", str(tmp_path)]) == 2
    assert not (tmp_path / "runs").exists()
    assert message in capsys.readouterr().err


@pytest.mark.integration  # trains through solo-learn
def test_a_killed_run_resumes_when_the_same_command_runs_again(tmp_path, monkeypatch, capsys):
    """The training process is SIGKILLed after epoch 1's checkpoint, and the record gets a torn
    line; the same command resumes after epoch 1: each epoch once in the record, the train seconds
    of both parts, and result.json says so."""
    tests = str(Path(__file__).resolve().parents[1])  # helpers.resume, in the training process
    monkeypatch.setenv("PYTHONPATH", tests)
    out, kill = tmp_path / "bench_out", "++diagnostics.callbacks.kill"
    argv = ["--preset", "smoke", "--methods", "attentionnce", "--extra-m", "", "--epochs", "2"]
    argv += ["--no-offline-probe", "--out", str(out), "--", "++limit_train_batches=2"]
    argv += [f"{kill}._target_=helpers.resume.KillOnce", f"{kill}.marker={tmp_path}/killed"]
    assert main(argv) == 1
    run = out / "runs" / "equal-epoch" / "attentionnce-M4" / "seed0"
    first = json.loads((run / "result.json").read_text())
    assert first["status"] == "failed" and first["error"].startswith("exit -9")
    assert "INCOMPLETE" not in capsys.readouterr().out and any((run / "ckpt").rglob("*.ckpt"))
    with (run / "record.jsonl").open("a") as fh:
        fh.write('{"event": "epoch", "epoch": 2, "train_sec')  # a write the kill tore
    with pytest.warns(UserWarning, match="record.jsonl: line 2 is torn"):
        assert main(argv) == 0, capsys.readouterr().err[-3000:]
    result = json.loads((run / "result.json").read_text())
    epochs = read_records(run / "record.jsonl", "epoch")
    assert result["status"] == "ok" and [r["epoch"] for r in epochs] == [1, 2]
    assert result["resumed"] == {"after_epoch": 1, "commit": first["commit"]}
    assert result["train_seconds"] == pytest.approx(sum(r["train_seconds"] for r in epochs))
    assert result["wall_seconds"] > epochs[0]["elapsed_seconds"]
    assert "resuming after epoch 1" in capsys.readouterr().err
    assert not (run / "ckpt").exists()


def _bench_on(data: str, tmp_path: Path) -> tuple:
    """(``python3 -m benchmarks`` on small files of ``data``'s layout, its output folder), in a
    subprocess whose path holds tests/helpers/checksums: torchvision takes the small CIFAR and
    STL-10 files there, and only there. On CIFAR-10 a solo-learn method is a row too."""
    root, out = FORMATS[data](tmp_path / data), tmp_path / f"{data}-out"
    methods = "attentionnce,byol" if data == "cifar10" else "attentionnce"
    argv = ["--preset", "smoke", "--data", data, "--data-dir", str(root), "--methods", methods]
    argv += ["--extra-m", "", "--batch-size", "4", "--out", str(out), "--"]
    argv += ["++limit_train_batches=2"]
    path = str(TESTS / "helpers" / "checksums")
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")  # two at a time
    command = [sys.executable, "-m", "benchmarks", *argv]
    done = subprocess.run(command, cwd=TESTS.parent, env=env, capture_output=True, text=True)
    return done, root, out


@pytest.mark.integration  # trains through solo-learn
def test_every_data_format_trains_probes_and_reports(tmp_path) -> None:
    with ThreadPoolExecutor(2) as pool:
        ran = dict(zip(FORMATS, pool.map(lambda d: _bench_on(d, tmp_path), FORMATS)))
    for data, (done, root, out) in ran.items():
        assert done.returncode == 0, f"--data {data}: {done.stderr[-3000:]}"
        results = [json.loads(p.read_text()) for p in out.glob("runs/*/*/seed0/result.json")]
        trained = {r["label"]: r for r in results if r["comparison"] != "reference"}
        labels = ["AttentionNCE (M=4)"] + ["byol (solo-learn's recipe)"] * (data == "cifar10")
        assert sorted(trained) == sorted(labels) and len(results) == len(labels) + 2, data
        for r in results:  # the trained rows and both references, probed on this data
            assert r["status"] == "ok" and 0 <= r["offline_acc1"] <= 100, (data, r["error"])
        assert all(r["epochs_done"] == 1 and r["knn_acc1"] is not None for r in trained.values())
        md = (out / "results.md").read_text()
        assert f"{data} in {root}" in md and "| raw pixels | 0 | 0 |" in md


def test_a_missing_data_set_is_named_before_any_training(tmp_path, capsys) -> None:
    argv = ["--preset", "smoke", "--data", "cifar10", "--data-dir", str(tmp_path)]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "cifar-10-batches-py/data_batch_1" in err and str(tmp_path) in err
    assert main(["--preset", "paper-stl10", "--out", str(tmp_path / "out")]) == 2
    assert "--data stl10 needs --data-dir" in capsys.readouterr().err
    assert not (tmp_path / "out" / "runs").exists()


def test_the_paper_presets_plan_their_runs_and_cost_without_training(tmp_path, capsys) -> None:
    for name in ("paper-cifar10", "paper-stl10"):
        assert main(["--preset", name, "--plan", "--out", str(tmp_path)]) == 0
        printed = capsys.readouterr().out
        for label in ("SimCLR", "AttentionNCE (M=4, neg_weighting=importance)"):
            assert f"| {label} | 0, 1, 2 | 400 |" in printed
        assert f"15 runs on {name[6:]}, " in printed and "device hours" in printed
        assert PRESETS[name].variant == "_paper"  # the authors' configs, *_paper.yaml
    assert not (tmp_path / "runs").exists()
