"""Each bench run is a shipped config plus visible overrides (attnce_bench.compose)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from attnce_bench.compose import (
    METHOD_RECIPES,
    BenchConfigError,
    Budget,
    parse_set,
    run_config,
    save_run_config,
)
from attnce_bench.plan import RunSpec


def _run(tmp_path: Path, method: str = "attentionnce", m: int = 4, *sets: str):
    spec = RunSpec("row", method, "equal-epoch", 3, 2, m)
    budget = Budget(
        "fashion_mnist",
        8,
        0,
        str(tmp_path / "train"),
        str(tmp_path / "val"),
        sets=tuple(parse_set(s) for s in sets),
    )
    return run_config(spec, budget, tmp_path / "run")


def _shipped(name: str):
    with initialize_config_module("attnce_plugin.configs", version_base="1.2"):
        cfg = compose(name)
    OmegaConf.resolve(cfg)
    return cfg


@pytest.mark.parametrize("method", sorted(METHOD_RECIPES))
def test_run_differs_from_the_shipped_config_only_by_its_overrides(tmp_path, method) -> None:
    run = _run(tmp_path, method, 0 if method in ("simclr", "mocov3") else 4)
    shipped = _shipped(run.config_name)
    got = run.resolved
    # Every key the overrides do not name keeps the shipped value.
    named = {o.split("=", 1)[0].lstrip("+~") for o in run.overrides}
    for key in (
        "backbone",
        "optimizer.name",
        "optimizer.lr",
        "optimizer.weight_decay",
        "method_kwargs.temperature",
        "method_kwargs.proj_hidden_dim",
        "scheduler.name",
    ):
        assert key not in named
        assert OmegaConf.select(got, key) == OmegaConf.select(shipped, key), key
    assert got.data.train_path == str(tmp_path / "train") and got.seed == 3 and got.max_epochs == 2
    assert (got.accelerator, got.devices, got.precision) == ("cpu", "1", "32")


def test_baselines_switch_the_loss_and_drop_the_positives(tmp_path) -> None:
    simclr = _run(tmp_path, "simclr", 0)
    assert simclr.config_name == "pretrain/cifar/attentionnce.yaml"
    assert simclr.resolved.method_kwargs.loss == "simclr"
    assert [a.num_crops for a in simclr.resolved.augmentations] == [2, 0]
    moco = _run(tmp_path, "mocov3", 0)
    assert moco.config_name == "pretrain/cifar/mocov3_attentionnce.yaml"
    assert moco.resolved.method_kwargs.loss == "mocov3"
    assert [a.num_crops for a in moco.resolved.augmentations] == [1, 1, 0]
    attn = _run(tmp_path, "attentionnce", 2)
    assert [(a.crop_size, a.num_crops) for a in attn.resolved.augmentations] == [(32, 2), (32, 2)]


def test_set_values_apply_to_their_method_last(tmp_path) -> None:
    run = _run(
        tmp_path,
        "attentionnce",
        4,
        "attentionnce:views.positive_crop_size=16",
        "simclr:optimizer.lr=9",
        "optimizer.weight_decay=0.5",
    )
    assert [(a.crop_size, a.num_crops) for a in run.resolved.augmentations] == [(32, 2), (16, 4)]
    assert run.resolved.optimizer.lr == 0.4 and run.resolved.optimizer.weight_decay == 0.5
    assert run.overrides[-2:] == ["++views.positive_crop_size=16", "++optimizer.weight_decay=0.5"]


def test_config_yaml_names_its_source_and_overrides(tmp_path) -> None:
    run = _run(tmp_path)
    save_run_config(run, tmp_path / "config.yaml")
    text = (tmp_path / "config.yaml").read_text()
    assert text.startswith("# pretrain/cifar/attentionnce.yaml from attnce_plugin.configs")
    for override in run.overrides:
        assert f"#   {override}\n" in text
    assert OmegaConf.load(tmp_path / "config.yaml") == run.resolved


def test_bad_override_is_refused_with_hydras_reason(tmp_path) -> None:
    with pytest.raises(BenchConfigError, match="views.crop_size"):
        _run(tmp_path, "attentionnce", 4, "views.crop_size=[1")
    with pytest.raises(BenchConfigError, match="KEY=VALUE"):
        parse_set("no_equals")
