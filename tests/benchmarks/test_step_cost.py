"""benchmarks.step_cost: each row is the shipped config with the run table's switches, built as
main_pretrain.py builds it, and a tiny CPU run through Lightning times it from the recorder."""

from __future__ import annotations

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
def test_a_tiny_cpu_run_writes_one_row(tmp_path, capsys):
    out = tmp_path / "step.md"
    argv = ["--methods", "attentionnce", "--batch-size", "4", "--steps", "2", "--warmup", "1",
            "--rounds", "2", "--small-heads", "--out", str(out)]  # fmt: skip
    assert step_cost.main(argv) == 0
    text = out.read_text()
    assert capsys.readouterr().out == text
    head, row = ([c.strip() for c in ln.strip("|").split("|")]
                 for ln in text.splitlines() if ln.startswith("| "))  # fmt: skip
    cell = dict(zip(head, row))
    assert (cell["method"], cell["views"], cell["precision"]) == ("attentionnce", "6", "32-true")
    seconds, low, high = float(cell["s/step"]), *map(float, cell["range"].split("-"))
    assert 0 < low <= seconds <= high and float(cell["peak MiB"]) > 0
    assert cell["to its base"] == "n/a (simclr)"


def test_zero_steps_are_refused_before_any_fit(capsys):
    assert step_cost.main(["--steps", "0"]) == 2
    assert "--steps and --rounds must be >= 1" in capsys.readouterr().err
