"""benchmarks.step_cost: each row is the shipped config with the run table's switches, built as
main_pretrain.py builds it; a tiny CPU run through Lightning times it; a run row is read off a
committed record."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pytest
import torch

from attnce_plugin.install import require_solo
from benchmarks import step_cost

require_solo()  # loudly: the rows are solo-learn methods

RECORDS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "step-cost-cpu"


def _args(**kw) -> argparse.Namespace:
    base = dict(device="cpu", precision="32", size=32, batch_size=4, channels_last=False)
    return argparse.Namespace(**{**base, **kw})


def _build(method: str, tmp_path: Path, args: argparse.Namespace):
    (tmp_path / "data" / "a").mkdir(parents=True, exist_ok=True)
    overrides = step_cost.overrides(args, str(tmp_path / "data"), method)
    return step_cost.build(step_cost.METHODS[method][1], overrides)


@pytest.mark.parametrize("method", list(step_cost.BASELINE))
def test_rows_are_the_shipped_configs_with_the_run_tables_switches(method, tmp_path):
    model, cfg = _build(method, tmp_path, _args())
    loss = {"simclr": "simclr", "mocov3": "mocov3"}.get(method, "attentionnce")
    assert (cfg.method, cfg.method_kwargs.loss) == (step_cost.METHODS[method][1], loss)
    crops = sum(int(p.num_crops) for p in cfg.augmentations)
    assert crops == (2 if loss != "attentionnce" else 6)  # 2 anchors + M = 4
    assert (cfg.accelerator, cfg.devices) == ("cpu", "1") and cfg.performance.disable_channel_last
    assert cfg.optimizer.batch_size == 4 and model.backbone is not None


def test_timing_interleaves_the_calls_and_takes_their_medians():
    order, delay = [], {"a": 0.0, "b": 0.01, "c": 0.03}
    calls = {n: lambda n=n: (order.append(n), time.sleep(delay[n])) for n in delay}
    t = step_cost.time_interleaved(calls, 3, torch.device("cpu"))
    assert "".join(order) == "abcbcacab"  # each round starts at the next call
    assert t["a"] < 0.03 and t["b"] >= 0.01 and t["c"] >= 0.03


@pytest.mark.integration
def test_a_tiny_cpu_run_writes_a_method_row_and_its_bound(tmp_path, capsys):
    out = tmp_path / "step.md"
    argv = ["--methods", "attentionnce", "--batch-size", "4", "--steps", "2", "--warmup", "1"]
    start = time.perf_counter()
    assert step_cost.main([*argv, "--rounds", "2", "--out", str(out)]) == 0
    wall = time.perf_counter() - start
    text = out.read_text()
    assert capsys.readouterr().out == text
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    head, *rows = ([c.strip() for c in ln.strip("|").split("|")] for ln in lines)
    method, plain = (dict(zip(head, row)) for row in rows)
    assert [method[k] for k in ("method", "views", "precision")] == ["attentionnce", "6", "32-true"]
    assert [plain[k] for k in ("method", "views", "peak MiB", "range")] == ["bound", "6", "-", "-"]
    seconds, low, high = float(method["s/step"]), *map(float, method["range"].split("-"))
    assert 0 < low <= seconds <= high and 2 * 2 * low < wall  # 2 fits of 2 steps inside the run
    assert float(method["images/s"]) == pytest.approx(4 / seconds, rel=1e-2)
    assert sum(float(method[k]) for k in ("data", "forward", "backward", "rest")) <= high * 1.01
    assert float(method["peak MiB"]) > 0 and method["to its base"] == "n/a (simclr)"
    assert method["to its bound"] == f"{seconds / float(plain['s/step']):.2f}x"


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["simclr", "mocov3"])
def test_the_bound_trains_copies_of_the_methods_network(method, tmp_path, device):
    """The method's own weights stay as they were; the copies run on the crops' device though the
    model is on the CPU (where Lightning leaves it after a fit); every phase takes time."""
    args = _args(channels_last=True, warmup=1, steps=1, rounds=3)
    model, _ = _build(method, tmp_path, args)
    before = [p.detach().clone() for p in model.parameters()]
    crops = [torch.randn(4, 3, 32, 32, device=device) for _ in range(2)]
    row = step_cost.bound(model, crops, method == "mocov3", args)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert row["s"] > 0 and row["forward"] > 0 and row["optimizer"] > 0


def test_a_run_row_is_the_last_epoch_of_a_committed_record():
    lines = (RECORDS / "runs/equal-epoch/SimCLR/seed0/record.jsonl").read_text().splitlines()
    last = [json.loads(ln) for ln in lines if '"event": "epoch"' in ln][-1]
    row = step_cost.run_row("simclr", RECORDS, _args(batch_size=128))
    assert row["s"] == pytest.approx(last["train_seconds"] / 46)  # 6,000 images // batch 128
    assert row["data"] == pytest.approx(last["data_seconds"] / 46)
    assert row["peak"] == last["peak_rss_mib"]


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--steps", "0"], ["--steps", ">= 1"]),
        (["--rounds", "0"], ["--rounds", ">= 1"]),
        (["--runs", str(RECORDS), "--batch-size", "4"], ["--runs", "(128, 32)", "(4, 32)"]),
        (["--runs", str(RECORDS), "--methods", "mocov3"], ["--runs", "mocov3"]),
    ],
)
def test_bad_settings_are_refused_before_any_fit(argv, words, capsys):
    with pytest.raises(SystemExit) as exit:
        step_cost.main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and all(w in err for w in words), err
