"""``attnce-knn`` (attnce_plugin/cli/knn.py): solo-learn's kNN options completed from the table
before ``main_knn.py`` runs, and a torchmetrics that breaks solo-learn's kNN refused, naming the
fix. The end-to-end runs on a real checkpoint are in ``tests/plugin/solo/test_scripts.py``.

Needs solo-learn >= 1.0.6; FAILS (not skips) without it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, List

import pytest

from attnce_plugin.solo_compat import require_solo

require_solo()


import attnce_plugin.cli.knn as knn_cli  # noqa: E402


@pytest.fixture
def ckpt_dir(tmp_path: Path) -> Path:
    """A folder shaped like a pretraining run's (nothing here reads the files)."""
    (tmp_path / "args.json").write_text(json.dumps({"method": "attentionnce"}))
    (tmp_path / "run-ep=0.ckpt").write_bytes(b"")
    return tmp_path


def _parse(argv: List[str]):
    """``argv`` as main_knn.py reads it (solo-learn's own parser)."""
    from solo.args.knn import parse_args_knn

    saved, sys.argv = sys.argv, ["main_knn.py", *argv]
    try:
        return parse_args_knn()
    finally:
        sys.argv = saved


def _required(ckpt_dir: Path) -> List[str]:
    return [
        "--pretrained_checkpoint_dir",
        str(ckpt_dir),
        "--dataset",
        "custom",
        "--train_data_path",
        str(ckpt_dir),
    ]


def test_knn_options_get_solo_defaults_when_absent(ckpt_dir):
    argv = _required(ckpt_dir)
    completed = knn_cli.complete_knn_argv(argv)
    assert completed[: len(argv)] == argv
    args = _parse(completed)
    # solo-learn's own scripts/knn/imagenet-100/knn.sh values.
    assert args.k == [1, 2, 5, 10, 20, 50, 100, 200]
    assert args.temperature == [0.01, 0.02, 0.05, 0.07, 0.1, 0.2, 0.5, 1.0]
    assert args.feature_type == ["backbone", "projector"]
    assert args.distance_function == ["euclidean", "cosine"]


def test_knn_options_given_are_kept_in_every_argparse_form(ckpt_dir):
    # "--feature" is argparse's abbreviation of --feature_type; "--k=3" the "=" form.
    argv = _required(ckpt_dir) + ["--k=3", "--feature", "backbone", "--temperature", "0.1"]
    completed = knn_cli.complete_knn_argv(argv)
    assert completed == argv + ["--distance_function", "euclidean", "cosine"]
    args = _parse(completed)
    assert args.k == [3] and args.feature_type == ["backbone"] and args.temperature == [0.1]
    assert args.distance_function == ["euclidean", "cosine"]


def test_knn_main_runs_solo_script_with_completed_argv(ckpt_dir, monkeypatch):
    calls: List[Any] = []
    monkeypatch.setattr(
        knn_cli, "run_solo_script", lambda script, argv: calls.append((script, argv))
    )
    knn_cli.main(_required(ckpt_dir) + ["--k", "3"])
    assert calls and calls[0][0] == "main_knn.py"
    args = _parse(calls[0][1])
    assert args.k == [3] and args.feature_type == ["backbone", "projector"]


def test_knn_wrapper_refuses_new_torchmetrics_before_running(ckpt_dir, monkeypatch):
    import torchmetrics

    monkeypatch.setattr(torchmetrics, "__version__", "1.9.0")
    monkeypatch.setattr(knn_cli, "run_solo_script", lambda *a: pytest.fail("main_knn.py was run"))
    with pytest.raises(SystemExit) as err:
        knn_cli.main(_required(ckpt_dir))
    assert "attnce-knn" in str(err.value) and "pip install torchmetrics==0.11.4" in str(err.value)
