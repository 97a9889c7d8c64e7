"""``python3 -m benchmarks`` end to end: one AttentionNCE run of the smoke preset through
solo-learn's own main_pretrain.py (the run recorder attached by ``diagnostics.callbacks``, the
validation hook), the probe, the reference rows and the report; a re-run reuses everything; the
demo preset ends with the committed reference tables. Needs solo-learn and Debian's
dataset-fashion-mnist: FAILS without."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnce_plugin.install import require_solo
from benchmarks.__main__ import main
from benchmarks.recorder import read_records


@pytest.mark.integration  # trains through solo-learn
def test_smoke_end_to_end_then_reuse_then_the_reference(tmp_path: Path, capsys) -> None:
    require_solo()
    out = tmp_path / "bench_out"
    argv = ["--preset", "smoke", "--methods", "attentionnce", "--extra-m", "", "--out", str(out)]
    argv += ["--", "++limit_train_batches=2"]  # raw Hydra overrides reach every run
    assert main(argv) == 0, capsys.readouterr().err[-3000:]
    md = (out / "results.md").read_text()
    assert md in capsys.readouterr().out
    run = out / "runs" / "equal-epoch" / "AttentionNCE-M-4" / "seed0"
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
    assert "| the four questions | 8 | 8 |" in tail and "| imbalance |" in tail
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
    require_solo()
    tests = str(Path(__file__).resolve().parents[1])  # helpers.resume, in the training process
    monkeypatch.setenv("PYTHONPATH", tests)
    out, kill = tmp_path / "bench_out", "++diagnostics.callbacks.kill"
    argv = ["--preset", "smoke", "--methods", "attentionnce", "--extra-m", "", "--epochs", "2"]
    argv += ["--no-offline-probe", "--out", str(out), "--", "++limit_train_batches=2"]
    argv += [f"{kill}._target_=helpers.resume.KillOnce", f"{kill}.marker={tmp_path}/killed"]
    assert main(argv) == 1
    run = out / "runs" / "equal-epoch" / "AttentionNCE-M-4" / "seed0"
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
