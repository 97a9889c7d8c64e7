"""A finished benchmark run is reused only for the same config and the same plugin version."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

import attnce_plugin
from attnce_bench.compose import RunConfig
from attnce_bench.runner import RunResult, config_digest, load_result, save_result


def _result(run_dir: Path) -> RunResult:
    return RunResult(
        key="k",
        label="SimCLR",
        method="simclr",
        comparison="base",
        seed=0,
        epochs=1,
        num_positives=0,
        matched_to=None,
        run_dir=str(run_dir),
        knn_acc1=50.0,
    )


def _run(resolved: dict, overrides=("++seed=0",)) -> RunConfig:
    return RunConfig(
        "pretrain/cifar/attentionnce.yaml", list(overrides), [], OmegaConf.create(resolved)
    )


def test_digest_follows_config_overrides_and_plugin_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = _run({"method": "simclr", "optimizer": {"lr": 0.3}})
    same = _run({"optimizer": {"lr": 0.3}, "method": "simclr"})
    other = _run({"method": "simclr", "optimizer": {"lr": 0.4}})
    digest = config_digest(cfg)
    assert config_digest(same) == digest
    assert config_digest(other) != digest
    assert (
        config_digest(_run({"method": "simclr", "optimizer": {"lr": 0.3}}, ["++seed=1"])) != digest
    )
    monkeypatch.setattr(attnce_plugin, "__version__", "999.0.0")
    assert config_digest(cfg) != digest


def test_result_of_another_version_is_not_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _run({"method": "simclr"})
    save_result(_result(tmp_path), config_digest(cfg))
    reused = load_result(tmp_path, config_digest(cfg))
    assert reused is not None and reused.reused and reused.knn_acc1 == 50.0
    monkeypatch.setattr(attnce_plugin, "__version__", "999.0.0")
    assert load_result(tmp_path, config_digest(cfg)) is None
