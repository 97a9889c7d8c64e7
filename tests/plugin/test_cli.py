"""attnce_plugin/cli.py: the kNN options completed as solo-learn's own parser reads them, and
``attnce-configs``. Needs solo-learn; FAILS, never skips, without it. The runs of the wrapped
scripts on a checkpoint are in the end-to-end tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from attnce_plugin import cli


def _parse(argv):
    from solo.args.knn import parse_args_knn  # ImportError: a failure, not a skip

    saved, sys.argv = sys.argv, ["main_knn.py", *argv]
    try:
        return parse_args_knn()
    finally:
        sys.argv = saved


def _required(tmp_path: Path):
    d = str(tmp_path)
    return ["--pretrained_checkpoint_dir", d, "--dataset", "custom", "--train_data_path", d]


def test_knn_options_absent_get_solo_learns_script_values(tmp_path):
    argv = _required(tmp_path)
    completed = cli.complete_knn_argv(argv)
    assert completed[: len(argv)] == argv
    args = _parse(completed)
    assert args.k == [1, 2, 5, 10, 20, 50, 100, 200]
    assert args.temperature == [0.01, 0.02, 0.05, 0.07, 0.1, 0.2, 0.5, 1.0]
    assert args.feature_type == ["backbone", "projector"]
    assert args.distance_function == ["euclidean", "cosine"]


def test_knn_options_given_are_kept_in_every_argparse_form(tmp_path):
    # "--k=3": the "=" form; "--feature": argparse's abbreviation of --feature_type
    argv = _required(tmp_path) + ["--k=3", "--feature", "backbone", "--temperature", "0.1"]
    completed = cli.complete_knn_argv(argv)
    assert completed == argv + ["--distance_function", "euclidean", "cosine"]
    args = _parse(completed)
    assert (args.k, args.feature_type, args.temperature) == ([3], ["backbone"], [0.1])


def test_configs_prints_the_shipped_folder(capsys):
    shipped = Path(cli.__file__).parent / "configs"
    assert cli.configs([]) == 0
    assert Path(capsys.readouterr().out.strip()) == shipped
    assert cli.configs(["pretrain/cifar"]) == 0
    folder = Path(capsys.readouterr().out.strip())
    assert folder == shipped / "pretrain" / "cifar" and (folder / "attentionnce.yaml").is_file()


def test_configs_unknown_subfolder_returns_2(capsys):
    assert cli.configs(["pretrain/nope"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "no folder 'pretrain/nope'" in out.err


@pytest.mark.parametrize(
    "command,says",
    [
        (cli.configs, ["usage: ", "SUBFOLDER", "--config-path"]),
        (cli.knn, ["attnce-knn", "main_knn.py", "--pretrained_checkpoint_dir", "--k"]),
        (cli.umap, ["attnce-umap", "main_umap.py", "--pretrained_checkpoint_dir"]),
    ],
)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_answers_help(command, says, flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        command([flag])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and all(s in out for s in says), out
