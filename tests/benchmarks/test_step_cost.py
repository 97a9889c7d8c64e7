"""benchmarks.step_cost: each row's config is the shipped one with the documented switches, and a
tiny CPU run through Lightning writes one table row per method."""

from __future__ import annotations

import pytest

from attnce_plugin.solo_compat import require_solo
from benchmarks import step_cost

require_solo()  # loudly: the benchmark builds solo-learn's methods


def _cfg(method, tmp_path, *argv):
    args = step_cost.build_parser().parse_args(["--precision", "32", "--size", "32", *argv])
    args.batch_size = 4
    (tmp_path / "data" / "a").mkdir(parents=True, exist_ok=True)
    ovr = step_cost.overrides(args, str(tmp_path / "data"), tmp_path / "r.jsonl", method)
    return step_cost.build(step_cost.METHODS[method][0], ovr)[1]


@pytest.mark.parametrize(
    "method,loss,crops",
    [("simclr", "simclr", 2), ("attentionnce", "attentionnce", 6), ("mocov3", "mocov3", 2)],
)
def test_rows_are_the_shipped_configs_with_the_documented_switches(method, loss, crops, tmp_path):
    cfg = _cfg(method, tmp_path)
    assert cfg.method_kwargs.loss == loss
    assert cfg.data.num_large_crops == 2
    assert cfg.data.num_large_crops + cfg.data.num_small_crops == crops
    # trainer=cpu: one CPU process, fp32, no SyncBatchNorm
    assert (cfg.accelerator, cfg.devices, cfg.sync_batchnorm) == ("cpu", "1", False)
    assert cfg.diagnostics.record == str(tmp_path / "r.jsonl")
    assert cfg.performance.disable_channel_last is False


def test_no_channels_last_and_compile_reach_the_config(tmp_path):
    cfg = _cfg("attentionnce", tmp_path, "--no-channels-last", "--compile")
    assert cfg.performance.disable_channel_last is True and cfg.method_kwargs.compile is True


@pytest.mark.integration
def test_tiny_cpu_run_writes_one_row_per_method(tmp_path, capsys):
    out = tmp_path / "step.md"
    argv = ["--methods", "simclr", "mocov3_attentionnce", "--batch-size", "4", "--steps", "2"]
    argv += ["--warmup", "1", "--rounds", "3", "--small-heads", "--precision", "bf16-mixed"]
    argv += ["--out", str(out)]
    assert step_cost.main(argv) == 0
    text = out.read_text()
    assert capsys.readouterr().out == text
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| ")]
    head, rows = [c.strip() for c in rows[0]], [[c.strip() for c in r] for r in rows[1:]]
    assert [r[0] for r in rows] == ["simclr", "mocov3_attentionnce"]
    col = {name: i for i, name in enumerate(head)}
    for r in rows:
        assert r[col["precision"]] == "bf16-mixed"  # what Lightning used, from the recorder
        seconds, per_s = float(r[col["s/step"]]), float(r[col["images/s"]])
        assert seconds > 0 and per_s == pytest.approx(4 / seconds, rel=0.02, abs=0.1)
        low, high = map(float, r[col["range"]].split("-"))
        assert low <= seconds <= high  # the median of the three fits lies within their range
        assert float(r[col["peak MiB"]]) > 0
    assert rows[1][col["views"]] == "6" and rows[1][col["to its base"]] == "n/a (mocov3)"


@pytest.mark.parametrize("flag", ["--rounds", "--steps"])
def test_zero_rounds_or_steps_is_refused_before_any_fit(flag, capsys):
    assert step_cost.main([flag, "0"]) == 2
    assert "--steps and --rounds must be >= 1" in capsys.readouterr().err
