"""attnce_plugin/methods/settings.py: ``apply_settings`` against hand-written expected configs, and
the refusals of bad ``method_kwargs`` and ``momentum`` settings (in-process, plus two runs of the
real ``main_pretrain.py`` showing the refusal comes before any training step).

Needs solo-learn >= 1.0.6 with its checkout; FAILS (not skips) without it. CPU only.
"""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest
from omegaconf import OmegaConf

from attnce_plugin.solo_compat import require_solo

require_solo()

from helpers.configs import compose_pretrain_cfg as _tiny_cfg  # noqa: E402
from helpers.configs import pretrain_argv  # noqa: E402
from helpers.scripts import find_checkpoints, run_script  # noqa: E402

from attnce_plugin.methods import AttentionNCE, MethodConfigError, MoCoV3AttentionNCE  # noqa: E402
from attnce_plugin.methods.settings import REQUIRED, Setting, apply_settings  # noqa: E402

MOMENTUM_ALLOWED = "0 <= base_tau <= final_tau <= 1"


@pytest.mark.integration  # builds the methods or runs main_pretrain.py
@pytest.mark.parametrize(
    "overrides,message",
    [
        (["~momentum"], "needs momentum settings"),
        (["~momentum.base_tau"], "momentum.base_tau is required"),
        (["~momentum.final_tau"], "momentum.final_tau is required"),
        (["momentum.final_tau=1.5"], "momentum.final_tau must be a number in [0, 1], got 1.5"),
        (["momentum.base_tau=-0.1"], "momentum.base_tau must be a number in [0, 1], got -0.1"),
        (["momentum.base_tau=abc"], "momentum.base_tau must be a number in [0, 1], got 'abc'"),
        (["momentum.base_tau=.nan"], "momentum.base_tau must be a number in [0, 1]"),
        (["momentum.base_tau=1.0", "momentum.final_tau=0.99"], "must be <= momentum.final_tau"),
        (["+momentum.base_tua=0.9"], "did you mean 'base_tau'"),
    ],
)
def test_mocov3_momentum_settings_refused(overrides, message, tiny_image_folder):
    cfg = _tiny_cfg(
        "mocov3_attentionnce.yaml",
        tiny_image_folder["train"],
        ["method_kwargs.pred_hidden_dim=32", *overrides],
    )
    with pytest.raises(MethodConfigError) as err:
        MoCoV3AttentionNCE(cfg)
    assert message in str(err.value)
    if "did you mean" in message:
        assert "allowed keys: base_tau, final_tau, classifier" in str(err.value)
    else:
        assert MOMENTUM_ALLOWED in str(err.value)  # the allowed values are named


@pytest.mark.integration  # builds the methods or runs main_pretrain.py
def test_mocov3_momentum_classifier_must_be_bool(tiny_image_folder):
    cfg = _tiny_cfg(
        "mocov3_attentionnce.yaml",
        tiny_image_folder["train"],
        ["method_kwargs.pred_hidden_dim=32", "+momentum.classifier=maybe"],
    )
    with pytest.raises(MethodConfigError, match="momentum.classifier must be True or False"):
        MoCoV3AttentionNCE(cfg)


NUMBER = "must be a finite number > 0, got"
INTERVAL = "method_kwargs.attention_log_every must be an integer >= 1, got"


@pytest.mark.integration  # builds the methods or runs main_pretrain.py
@pytest.mark.parametrize(
    "method_cls,config",
    [(AttentionNCE, "attentionnce.yaml"), (MoCoV3AttentionNCE, "mocov3_attentionnce.yaml")],
)
@pytest.mark.parametrize(
    "override,message",
    [
        ("method_kwargs.d_neg=abc", f"method_kwargs.d_neg {NUMBER} 'abc' of type str"),
        ("method_kwargs.d_pos=abc", f"method_kwargs.d_pos {NUMBER} 'abc' of type str"),
        ("method_kwargs.temperature=abc", f"method_kwargs.temperature {NUMBER} 'abc'"),
        ("method_kwargs.d_neg=true", f"method_kwargs.d_neg {NUMBER} True of type bool"),
        ("method_kwargs.temperature=0", f"method_kwargs.temperature {NUMBER} 0.0"),
        ("+method_kwargs.dneg=2", "did you mean 'd_neg'"),
        ("+method_kwargs.attention_log_every=0", f"{INTERVAL} 0"),
        ("+method_kwargs.attention_log_every=abc", f"{INTERVAL} 'abc'"),
    ],
)
def test_non_numbers_and_typos_refused(method_cls, config, override, message, tiny_image_folder):
    extra = ["method_kwargs.pred_hidden_dim=32"] if method_cls is MoCoV3AttentionNCE else []
    cfg = _tiny_cfg(config, tiny_image_folder["train"], [*extra, override])
    with pytest.raises(MethodConfigError) as err:
        method_cls(cfg)
    assert message in str(err.value)


@pytest.mark.integration  # builds the methods or runs main_pretrain.py
def test_defaults_recorded_in_config(tiny_image_folder):
    """Defaults are filled in (so they land in args.json) and momentum is untouched."""
    cfg = _tiny_cfg(
        "mocov3_attentionnce.yaml", tiny_image_folder["train"], ["method_kwargs.pred_hidden_dim=32"]
    )
    model = MoCoV3AttentionNCE(cfg)
    assert model.cfg.method_kwargs.attention_log_every == 10
    assert (model.cfg.momentum.base_tau, model.cfg.momentum.final_tau) == (0.99, 1.0)


# --------------------------------------------------------------------------- apply_settings

_SETTINGS = (
    Setting("width", "int>=1", REQUIRED, "a width"),
    Setting("scale", "float>0", 1.0, "a scale"),
    Setting("fast", "bool", False, "a switch"),
    Setting("kind", "choice", "a", "a choice", choices=("a", "b")),
)


def test_apply_settings_fills_defaults_and_converts_in_place():
    cfg = OmegaConf.create({"method_kwargs": {"width": 3, "scale": 2, "kind": None}})
    apply_settings(cfg, "m", _SETTINGS)
    assert OmegaConf.to_container(cfg) == {
        "method_kwargs": {"width": 3, "scale": 2.0, "fast": False, "kind": "a"}
    }
    assert isinstance(cfg.method_kwargs.scale, float)
    empty = OmegaConf.create({"method_kwargs": None})
    with pytest.raises(MethodConfigError) as err:
        apply_settings(empty, "m", _SETTINGS)
    assert str(err.value) == (
        "method_kwargs.width is required by method 'm'; allowed keys: fast, kind, scale, width"
    )


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            {"width": 1, "scael": 2.0},
            "method_kwargs.scael is not a setting of method 'm' (did you mean 'scale'?); "
            "allowed keys: fast, kind, scale, width",
        ),
        ({"width": 0}, "method_kwargs.width must be an integer >= 1, got 0 of type int"),
        ({"width": True}, "method_kwargs.width must be an integer >= 1, got True of type bool"),
        ({"width": 1, "scale": -1}, "method_kwargs.scale must be a finite number > 0, got -1.0"),
        (
            {"width": 1, "scale": "inf"},
            "method_kwargs.scale must be a finite number > 0, got 'inf' of type str",
        ),
        (
            {"width": 1, "fast": "false"},
            "method_kwargs.fast must be true or false, got 'false' of type str",
        ),
        (
            {"width": 1, "kind": "c"},
            "method_kwargs.kind of method 'm' must be one of a, b, got 'c'",
        ),
    ],
)
def test_apply_settings_refuses_with_the_key_and_the_allowed_values(kwargs, message):
    with pytest.raises(MethodConfigError) as err:
        apply_settings(OmegaConf.create({"method_kwargs": kwargs}), "m", _SETTINGS)
    assert str(err.value) == message


def _refused_run(argv: List[str], cwd: Path, ckpt_dir: Path, message: str) -> None:
    proc = run_script(argv, cwd, check=False, threads=1)
    out = proc.stdout
    assert proc.returncode != 0, out[-3000:]
    assert "MethodConfigError" in out and message in out, out[-3000:]
    # Before training: no progress bar, no checkpoint, not even the checkpoint folder's args.json.
    assert "Epoch 0" not in out
    assert not find_checkpoints(ckpt_dir) and not list(ckpt_dir.rglob("args.json"))


@pytest.mark.integration  # builds the methods or runs main_pretrain.py
def test_main_pretrain_refuses_non_number_d_neg(tiny_image_folder, tmp_path):
    ckpt_dir = tmp_path / "ckpt"
    argv = pretrain_argv("custom", "attentionnce_multicrop.yaml", tiny_image_folder, ckpt_dir)
    _refused_run(
        argv + ["method_kwargs.d_neg=abc"],
        tmp_path,
        ckpt_dir,
        "method_kwargs.d_neg must be a finite number > 0, got 'abc'",
    )


@pytest.mark.integration  # builds the methods or runs main_pretrain.py
def test_main_pretrain_refuses_moco_without_momentum(tiny_image_folder, tmp_path):
    ckpt_dir = tmp_path / "ckpt"
    argv = pretrain_argv("custom", "mocov3_attentionnce.yaml", tiny_image_folder, ckpt_dir)
    _refused_run(argv + ["~momentum"], tmp_path, ckpt_dir, "needs momentum settings")
