"""attnce_plugin/cli.py: the kNN options completed as solo-learn's own parser reads them, and
``attnce-configs``. Needs solo-learn; FAILS, never skips, without it. The runs of the wrapped
scripts on a checkpoint are in the end-to-end tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from attnce_plugin import cli


def _parse(argv, monkeypatch):
    from solo.args.knn import parse_args_knn  # ImportError: a failure, not a skip

    monkeypatch.setattr(sys, "argv", ["main_knn.py", *argv])
    return parse_args_knn()


def _required(tmp_path: Path):
    d = str(tmp_path)
    return ["--pretrained_checkpoint_dir", d, "--dataset", "custom", "--train_data_path", d]


def _knn_argv(argv, monkeypatch):
    """The command line ``attnce-knn argv`` hands to solo-learn's main_knn.py."""
    ran = []
    monkeypatch.setattr(cli, "run_solo_script", lambda script, argv: ran.append((script, argv)))
    cli.knn(argv)
    ((script, completed),) = ran
    assert script == "main_knn.py" and completed[: len(argv)] == argv
    return completed


def test_knn_options_absent_get_solo_learns_script_values(tmp_path, monkeypatch):
    args = _parse(_knn_argv(_required(tmp_path), monkeypatch), monkeypatch)
    assert args.k == [1, 2, 5, 10, 20, 50, 100, 200]
    assert args.temperature == [0.01, 0.02, 0.05, 0.07, 0.1, 0.2, 0.5, 1.0]
    assert args.feature_type == ["backbone", "projector"]
    assert args.distance_function == ["euclidean", "cosine"]


def test_knn_options_given_are_kept_in_every_argparse_form(tmp_path, monkeypatch):
    # "--k=3": the "=" form; "--feature": argparse's abbreviation of --feature_type
    argv = _required(tmp_path) + ["--k=3", "--feature", "backbone", "--temperature", "0.1"]
    completed = _knn_argv(argv, monkeypatch)
    assert completed == argv + ["--distance_function", "euclidean", "cosine"]
    args = _parse(completed, monkeypatch)
    assert (args.k, args.feature_type, args.temperature) == ([3], ["backbone"], [0.1])


def test_configs_prints_the_shipped_folder_or_exits_2_naming_a_wrong_one(capsys):
    assert cli.configs(["pretrain/cifar"]) == 0
    folder = Path(capsys.readouterr().out.strip())
    assert folder == Path(cli.__file__).parent / "configs" / "pretrain" / "cifar"
    with pytest.raises(SystemExit) as exit_:
        cli.configs(["pretrain/nope"])
    out = capsys.readouterr()
    assert exit_.value.code == 2 and out.out == "" and "'pretrain/nope'" in out.err


@pytest.mark.parametrize(
    "command,says",
    [
        (cli.configs, ["usage: ", "SUBFOLDER", "--config-path"]),
        (cli.knn, ["attnce-knn", "main_knn.py", "--pretrained_checkpoint_dir", "--k"]),
        (cli.umap, ["attnce-umap", "main_umap.py", "--pretrained_checkpoint_dir"]),
    ],
)
def test_every_command_answers_help(command, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        command(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and all(s in out for s in says), out


def test_umap_without_its_packages_says_what_to_install(tmp_path, monkeypatch):
    """solo-learn's main_umap.py imports pandas, seaborn and umap at its top: instead of its
    ModuleNotFoundError, the command names the packages and the install extra."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pandas" else find_spec(name)
    )
    monkeypatch.setattr(cli, "run_solo_script", lambda *args: pytest.fail("main_umap.py ran"))
    argv = ["--pretrained_checkpoint_dir", str(tmp_path), "--dataset", "custom"]
    with pytest.raises(SystemExit, match=r"pip install pandas.*attnce-plugin\[umap\]"):
        cli.umap(argv + ["--train_data_path", str(tmp_path)])
