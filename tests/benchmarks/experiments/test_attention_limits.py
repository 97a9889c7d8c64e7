"""benchmarks.experiments.attention_limits prints the analytic limits of the attention
diagnostics."""

from __future__ import annotations

import math

import pytest

from benchmarks.experiments import attention_limits
from benchmarks.options import parse


def _rows(text: str):
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    return {
        cells[0]: dict(zip(head[1:], map(float, cells[1:])))
        for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])
    }


def test_limits_match_closed_forms(capsys: pytest.CaptureFixture) -> None:
    argv = ["--experiment", "attention_limits", "--images", "16", "--num-positives", "3"]
    assert attention_limits.main(parse(argv + ["--dim", "32"]), "cmd") == 0
    rows = _rows(capsys.readouterr().out)
    k = 2 * 16 - 2
    uniform_alpha = rows["random, d_pos -> inf (1e6)"]
    assert uniform_alpha["eff_num_positives"] == pytest.approx(3.0, abs=1e-4)
    assert uniform_alpha["alpha_entropy"] == pytest.approx(math.log(3), abs=1e-4)
    assert rows["random, d_pos -> 0 (1e-3)"]["eff_num_positives"] < 1.1
    plain = rows["random, d_neg -> inf (1e6)"]
    assert plain["max_beta"] == pytest.approx(1 + k * 1e-6, abs=1e-6)
    assert plain["eff_num_negatives"] == pytest.approx(k, abs=1e-4)
    assert rows["random, d_neg -> 0 (1e-3)"]["max_beta"] == pytest.approx(k, rel=1e-3)
    collapsed = rows["collapsed, d_pos=1, d_neg=10"]
    assert collapsed["uniformity"] == pytest.approx(0.0, abs=1e-3)
    assert collapsed["variance"] < 1e-4
    assert rows["2-dim collapse, d_pos=1, d_neg=10"]["eff_rank"] <= 2.0 + 1e-6


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="--images=1"):
        attention_limits.main(parse(["--experiment", "attention_limits", "--images", "1"]), "c")
