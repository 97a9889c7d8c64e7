"""benchmarks.loss_cost: the authors' two functions read from a checkout's image/main.py and run
as they are, nothing else of that file executed; each sitting's table and the median table."""

from __future__ import annotations

import pytest
import torch

from benchmarks import loss_cost

#: A stand-in for the authors' file: their two functions' names and signatures, a module global
#: they read (feature_dim), and a top level that must not run.
MAIN = """
import this_module_does_not_exist
raise SystemExit("the script's top level ran")
def get_negative_mask(batch_size):
    return torch.ones(batch_size, 2 * batch_size, dtype=bool)
def AttentioNCE(out_1, out_2, out_3, out_4, out_5, out_6, batch_size, temperature, d_pos, d_neg):
    return sum(o.sum() for o in (out_1, out_2, out_3, out_4, out_5, out_6)) * feature_dim
"""


def test_the_authors_functions_run_from_their_file_alone(tmp_path):
    (tmp_path / "image").mkdir()
    (tmp_path / "image" / "main.py").write_text(MAIN)
    loss = loss_cost.authors_loss(tmp_path, 3, 0.5, 1.0, 1.0)
    anchors, positives = torch.ones(4, 3), torch.ones(2, 4, 3)
    unit = 3**-0.5  # their model's outputs are unit vectors
    assert float(loss(anchors, positives)) == pytest.approx(6 * 2 * 3 * unit * 3)


def test_sittings_print_their_tables_and_the_medians(tmp_path, capsys):
    (tmp_path / "image").mkdir()
    (tmp_path / "image" / "main.py").write_text(MAIN)
    argv = ["--authors", str(tmp_path), "--batch-sizes", "8", "--rounds", "2", "--warmup", "0"]
    assert loss_cost.main([*argv, "--sittings", "2", "--dim", "3"]) == 0
    out = capsys.readouterr().out
    assert "Sitting 1:" in out and "Sitting 2:" in out and "Median over the 2 sittings:" in out
    median = out.split("Median over the 2 sittings:")[1]
    assert "| 8 | solo-learn SimCLR (2 views) | 1.00x |" in median
    assert "| 8 | AttentionNCE (the authors') |" in median and median.count("| 8 |") == 3
