"""benchmarks.step_cost: each row is the shipped config with the run table's switches, built as
main_pretrain.py builds it; a tiny CPU run through Lightning times it."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pytest
import torch

from benchmarks import step_cost


def _args(**kw) -> argparse.Namespace:
    base = dict(device="cpu", precision="32", size=32, batch_size=4)
    return argparse.Namespace(**{**base, **kw})


def _build(method: str, tmp_path: Path, args: argparse.Namespace):
    (tmp_path / "data" / "a").mkdir(parents=True, exist_ok=True)
    overrides = step_cost.overrides(args, str(tmp_path / "data"), method)
    return step_cost.build(f"pretrain/custom/{step_cost.METHODS[method].config}.yaml", overrides)


@pytest.mark.parametrize("method", list(step_cost.BASELINE))
def test_rows_are_the_shipped_configs_with_the_run_tables_switches(method, tmp_path):
    model, cfg = _build(method, tmp_path, _args())
    loss = {"simclr": "simclr", "mocov3": "mocov3"}.get(method, "attentionnce")
    assert (cfg.method, cfg.method_kwargs.loss) == (step_cost.METHODS[method].config, loss)
    crops = sum(int(p.num_crops) for p in cfg.augmentations)
    assert crops == (2 if loss != "attentionnce" else 6)  # 2 anchors + M = 4
    assert (cfg.accelerator, cfg.devices) == ("cpu", "1")
    assert cfg.optimizer.batch_size == 4 and model.backbone is not None


@pytest.mark.integration
def test_a_tiny_cpu_run_prints_a_row_per_method_beside_its_baseline(capsys):
    argv = ["--methods", "simclr", "attentionnce", "--batch-size", "4", "--steps", "2"]
    argv += ["--warmup", "1", "--multicrop"]
    start = time.perf_counter()
    assert step_cost.main([*argv, "--rounds", "2"]) == 0
    wall = time.perf_counter() - start
    text = capsys.readouterr().out  # the table alone
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    head, *rows = ([c.strip() for c in ln.strip("|").split("|")] for ln in lines)
    base, method = (dict(zip(head, row)) for row in rows)
    got = [method[k] for k in ("method", "config", "views", "precision")]
    assert got == ["attentionnce", "attentionnce_multicrop", "6", "32-true"]
    assert [base[k] for k in ("method", "config", "views")] == ["simclr", "attentionnce", "2"]
    assert base["to its base"] == "1.00x (simclr)"
    seconds, low, high = float(method["s/step"]), *map(float, method["range"].split("-"))
    assert 0 < low <= seconds <= high and 2 * 2 * low < wall  # 2 fits of 2 steps inside the run
    assert float(method["images/s"]) == pytest.approx(4 / seconds, rel=1e-2)
    ratio, base_name = method["to its base"].split("x ")
    assert float(method["peak MiB"]) > 0 and base_name == "(simclr)"
    # the table divides the unrounded seconds: the printed ones agree to their rounding
    assert float(ratio) == pytest.approx(seconds / float(base["s/step"]), rel=0.02)
    # the FLOPs: the backbone's, forward and backward, dominate; 4 positives of 14 px (96 / 224 of
    # 32) beside the 2 anchors of 32 px, against a plain torchvision ResNet-18's forwards
    assert base["FLOPs to simclr"] == "1.00x" and float(base["GFLOP/step"]) > 0
    forward = {s: _resnet18_flops(s) for s in (32, 14)}
    want = (2 * forward[32] + 4 * forward[14]) / (2 * forward[32])
    assert float(method["FLOPs to simclr"].rstrip("x")) == pytest.approx(want, rel=0.05)


def _resnet18_flops(size: int) -> int:
    from torch.utils.flop_counter import FlopCounterMode
    from torchvision.models import resnet18

    with FlopCounterMode(display=False) as counted:
        resnet18().eval()(torch.zeros(1, 3, size, size))
    return counted.get_total_flops()


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--steps", "0"], ["--steps", ">= 1"]),
        (["--rounds", "0"], ["--rounds", ">= 1"]),
        (["--methods", "byol"], ["--methods", "simclr", "mocov3_attentionnce"]),
    ],
)
def test_bad_settings_are_refused_before_any_fit(argv, words, capsys):
    with pytest.raises(SystemExit) as exit:
        step_cost.main(argv)
    err = capsys.readouterr().err
    assert exit.value.code == 2 and all(w in err for w in words), err
