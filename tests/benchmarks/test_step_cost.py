"""benchmarks.step_cost: each row is the shipped config with the run table's switches, built as
main_pretrain.py builds it, and a tiny CPU run through Lightning times it from the recorder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnce_plugin.seam import require_solo
from benchmarks import step_cost

require_solo()  # loudly: the rows are solo-learn methods


@pytest.mark.parametrize("method, loss, crops", [("simclr", "simclr", 2),
                                                 ("attentionnce", "attentionnce", 6),
                                                 ("mocov3", "mocov3", 2)])  # fmt: skip
def test_rows_are_the_shipped_configs_with_the_run_tables_switches(method, loss, crops, tmp_path):
    (tmp_path / "data" / "a").mkdir(parents=True)
    args = step_cost.argparse.Namespace(device="cpu", precision="32", size=32, batch_size=4,
                                        channels_last=False, small_heads=True)  # fmt: skip
    overrides = step_cost.overrides(args, str(tmp_path / "data"), method)
    model, cfg = step_cost.build(step_cost.METHODS[method][1], overrides)
    assert cfg.method == step_cost.METHODS[method][1] and cfg.method_kwargs.loss == loss
    assert sum(int(p.num_crops) for p in cfg.augmentations) == crops
    assert (cfg.accelerator, cfg.devices, cfg.performance.disable_channel_last) == (
        "cpu",
        "1",
        True,
    )
    assert model.backbone is not None


@pytest.mark.integration
def test_a_tiny_cpu_run_writes_a_method_row_and_its_bound(tmp_path, capsys):
    out = tmp_path / "step.md"
    argv = ["--methods", "attentionnce", "--batch-size", "4", "--steps", "2", "--warmup", "1",
            "--rounds", "2", "--small-heads", "--out", str(out)]  # fmt: skip
    assert step_cost.main(argv) == 0
    text = out.read_text()
    assert capsys.readouterr().out == text
    head, *rows = ([c.strip() for c in ln.strip("|").split("|")]
                   for ln in text.splitlines() if ln.startswith("| "))  # fmt: skip
    method, plain = (dict(zip(head, row)) for row in rows)
    assert (method["method"], method["views"], method["precision"]) == (
        "attentionnce",
        "6",
        "32-true",
    )
    assert (plain["method"], plain["views"], plain["peak MiB"]) == ("bound", "6", "-")
    seconds, low, high = float(method["s/step"]), *map(float, method["range"].split("-"))
    assert 0 < low <= seconds <= high and plain["range"] == "-"
    assert sum(float(method[k]) for k in ("data", "forward", "backward", "rest")) <= high * 1.01
    assert sum(float(plain[k]) for k in ("forward", "backward", "rest")) == pytest.approx(
        float(plain["s/step"]), abs=2e-4
    )  # the bound's phases: its step split
    assert float(method["peak MiB"]) > 0 and method["to its base"] == "n/a (simclr)"
    ratio = float(method["s/step"]) / float(plain["s/step"])
    assert method["to its bound"] == f"{ratio:.2f}x"


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["simclr", "mocov3"])
def test_the_bound_trains_copies_of_the_methods_network(method, tmp_path, device):
    """The method's own weights stay as they were; the copies run on the crops' device though the
    model is on the CPU (where Lightning leaves it after a fit); every phase takes time."""
    (tmp_path / "data" / "a").mkdir(parents=True)
    args = step_cost.argparse.Namespace(device="cpu", precision="32", size=32, batch_size=4,
                                        channels_last=True, small_heads=True, warmup=1, steps=1,
                                        rounds=3)  # fmt: skip
    ovr = step_cost.overrides(args, str(tmp_path / "data"), method)
    model, _ = step_cost.build(step_cost.METHODS[method][1], ovr)
    before = [p.detach().clone() for p in model.parameters()]
    crops = [step_cost.torch.randn(4, 3, 32, 32, device=device) for _ in range(2)]
    row = step_cost.bound(model, crops, method == "mocov3", args)
    assert all(step_cost.torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert row["s"] > 0 and row["forward"] > 0 and row["optimizer"] > 0


def test_zero_steps_are_refused_before_any_fit(capsys):
    assert step_cost.main(["--steps", "0"]) == 2
    assert "--steps and --rounds must be >= 1" in capsys.readouterr().err


def test_a_run_row_is_the_last_epoch_of_a_committed_record(capsys):
    out = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "step-cost-cpu"
    lines = (out / "runs/equal-epoch/SimCLR/seed0/record.jsonl").read_text().splitlines()
    last = [json.loads(ln) for ln in lines if '"event": "epoch"' in ln][-1]
    row = step_cost.run_row("simclr", out, step_cost.argparse.Namespace(batch_size=128, size=32))
    assert row["s"] == pytest.approx(last["train_seconds"] / 46)  # 6,000 images, batch 128
    assert row["data"] == pytest.approx(last["data_seconds"] / 46)
    # a run of another batch size is refused before anything is timed
    assert step_cost.main(["--runs", str(out), "--batch-size", "4"]) == 2
    assert "trained at (batch, px) (128, 32), not (4, 32)" in capsys.readouterr().err
