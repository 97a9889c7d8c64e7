"""attnce_plugin/settings.py: ``method_kwargs`` read against the methods' schemas, the crop roles,
and the DALI index flag. Every refusal must name the key and what it allows."""

from __future__ import annotations

from dataclasses import fields

import pytest
from omegaconf import OmegaConf

from attnce_plugin.settings import (
    AttentionNCEKwargs,
    MethodConfigError,
    MoCoV3AttentionNCEKwargs,
    check_dali_indexes,
    num_positives,
    read_method_kwargs,
)

REQUIRED = {"proj_hidden_dim": 64, "proj_output_dim": 16, "temperature": 0.2}
SCHEMAS = {
    "attentionnce": (AttentionNCEKwargs, REQUIRED),
    "mocov3_attentionnce": (MoCoV3AttentionNCEKwargs, {**REQUIRED, "pred_hidden_dim": 32}),
}
COMMON_DEFAULTS = {
    "d_pos": 1.0,
    "d_neg": 1.0,
    "neg_weighting": "logit",
    "batch_positives": False,
    "positives_update_bn": True,
    "attention_log_every": 10,
}


def _read(method, **kwargs):
    schema, required = SCHEMAS[method]
    cfg = OmegaConf.create({"method": method, "method_kwargs": {**required, **kwargs}})
    return cfg, read_method_kwargs(cfg, schema)


def _refusal(method, **kwargs) -> str:
    with pytest.raises(MethodConfigError) as err:
        _read(method, **kwargs)
    return str(err.value)


def test_defaults_are_filled_in_and_written_back():
    cfg, kw = _read("attentionnce", d_neg=2)
    want = {**REQUIRED, **COMMON_DEFAULTS, "d_neg": 2.0}
    want.update(projector="mlp", loss="attentionnce", anchor="views")
    assert OmegaConf.to_container(cfg.method_kwargs) == want  # what lands in args.json
    assert isinstance(kw, AttentionNCEKwargs) and kw.d_neg == 2.0 and isinstance(kw.d_neg, float)
    cfg, kw = _read("mocov3_attentionnce")
    want = {**SCHEMAS["mocov3_attentionnce"][1], **COMMON_DEFAULTS}
    want.update(loss="attentionnce", key_in_prototype=True)
    assert OmegaConf.to_container(cfg.method_kwargs) == want
    assert kw.pred_hidden_dim == 32


@pytest.mark.parametrize("method", list(SCHEMAS))
def test_unknown_key_is_named_with_the_allowed_keys(method):
    message = _refusal(method, dneg=2.0)
    allowed = ", ".join(f.name for f in fields(SCHEMAS[method][0]))
    assert message.startswith(f"method_kwargs.dneg is not a setting of method {method!r}")
    assert message.endswith(f"; allowed keys: {allowed}") and "did you mean 'd_neg'" in message
    # A key of the other method is unknown here too.
    other = "anchor" if method == "mocov3_attentionnce" else "key_in_prototype"
    assert f"method_kwargs.{other} is not a setting" in _refusal(method, **{other: True})


@pytest.mark.parametrize("key", ["proj_hidden_dim", "proj_output_dim", "temperature"])
def test_missing_required_key_is_named(key):
    cfg = OmegaConf.create({"method": "attentionnce", "method_kwargs": dict(REQUIRED)})
    del cfg.method_kwargs[key]
    with pytest.raises(MethodConfigError, match=f"method_kwargs.{key} is required.*allowed keys"):
        read_method_kwargs(cfg, AttentionNCEKwargs)
    assert "pred_hidden_dim is required" in _refusal("mocov3_attentionnce", pred_hidden_dim="???")


@pytest.mark.parametrize("method", list(SCHEMAS))
@pytest.mark.parametrize(
    "key,value,message",
    [
        ("d_neg", 0, "method_kwargs.d_neg must be a finite number > 0, got 0.0"),
        ("d_neg", -1, "method_kwargs.d_neg must be a finite number > 0, got -1.0"),
        ("d_neg", float("nan"), "method_kwargs.d_neg must be a finite number > 0, got nan"),
        ("d_neg", float("inf"), "method_kwargs.d_neg must be a finite number > 0, got inf"),
        ("d_pos", "inf", "method_kwargs.d_pos must be a finite number > 0, got inf"),
        ("temperature", 0.0, "method_kwargs.temperature must be a finite number > 0, got 0.0"),
        ("d_neg", "abc", "method_kwargs.d_neg: Value 'abc'"),
        ("d_pos", True, "method_kwargs.d_pos: Value 'True'"),
        ("attention_log_every", 0, "method_kwargs.attention_log_every must be an integer >= 1"),
        ("attention_log_every", "abc", "method_kwargs.attention_log_every: Value 'abc'"),
        ("proj_output_dim", -3, "method_kwargs.proj_output_dim must be an integer >= 1, got -3"),
        ("batch_positives", "maybe", "method_kwargs.batch_positives: Value 'maybe'"),
    ],
)
def test_bad_values_are_refused_naming_the_key(method, key, value, message):
    assert message in _refusal(method, **{key: value})


@pytest.mark.parametrize(
    "method,key,value,allowed",
    [
        ("attentionnce", "loss", "mocov3", "['attentionnce', 'simclr', 'simclr_all_views']"),
        ("attentionnce", "projector", "mlp_ln", "['mlp', 'mlp_bn']"),
        ("attentionnce", "anchor", "first", "['views', 'mean']"),
        ("mocov3_attentionnce", "loss", "simclr", "['attentionnce', 'mocov3']"),
        ("attentionnce", "neg_weighting", "outside", "['logit', 'importance']"),
        ("mocov3_attentionnce", "neg_weighting", "hcl", "['logit', 'importance']"),
    ],
)
def test_choices_outside_their_list_name_the_allowed_values(method, key, value, allowed):
    message = _refusal(method, **{key: value})
    assert message == f"method_kwargs.{key}={value!r}: allowed values are {allowed}"


@pytest.mark.parametrize("loss", ["simclr", "simclr_all_views"])
def test_anchor_mean_needs_the_attentionnce_loss(loss):
    message = _refusal("attentionnce", anchor="mean", loss=loss)
    assert "method_kwargs.anchor=mean needs loss=attentionnce" in message
    assert "allowed value is anchor=views" in message
    assert _read("attentionnce", anchor="mean")[1].anchor == "mean"


def _augs(*pipelines):
    return OmegaConf.create([{"num_crops": n, "crop_size": s} for n, s in pipelines])


@pytest.mark.parametrize(
    "pipelines,m",
    [
        ([(2, 32), (4, 32)], 4),  # the paper: 2 anchors + M = 4 positives at one size
        ([(2, 32), (2, 32)], 2),
        ([(1, 32), (1, 32), (4, 32)], 4),  # 1 + 1 anchors (two augmentation pipelines)
        ([(2, 224), (6, 96)], 6),  # multi-crop: small positives
        ([(2, 32), (2, 32), (2, 16)], 4),  # positives at two sizes
        ([(1, 224), (1, 224), (3, 96), (1, 64)], 4),
    ],
)
def test_crop_layouts_give_the_number_of_positives(pipelines, m):
    assert num_positives(_augs(*pipelines), required=True) == m


@pytest.mark.parametrize(
    "pipelines",
    [
        [(1, 32), (3, 32)],  # 1 + 3: the anchor pair straddles a pipeline boundary
        [(3, 32), (2, 16)],  # 3 leading crops
        [(1, 32)],
        [],
        [(1, 32), (1, 16), (4, 16)],  # anchors of two sizes
    ],
)
def test_bad_anchor_layouts_are_refused(pipelines):
    with pytest.raises(MethodConfigError, match="the anchors are the first 2 crops"):
        num_positives(_augs(*pipelines), required=False)


def test_no_positive_is_refused_only_when_required():
    assert num_positives(_augs((2, 32)), required=False) == 0
    with pytest.raises(MethodConfigError, match="no positive crop.*num_crops: M"):
        num_positives(_augs((2, 32)), required=True)


@pytest.mark.parametrize("dali", [{}, {"encode_indexes_into_labels": False}, None])
def test_dali_without_encoded_indexes_is_refused_naming_the_key(dali):
    cfg = {"data": {"format": "dali"}}
    if dali is not None:
        cfg["dali"] = dali
    with pytest.raises(MethodConfigError, match=r"dali\.encode_indexes_into_labels=True"):
        check_dali_indexes(OmegaConf.create(cfg))


def test_dali_with_encoded_indexes_and_other_formats_pass():
    check_dali_indexes(
        OmegaConf.create({"data": {"format": "dali"}, "dali": {"encode_indexes_into_labels": True}})
    )
    check_dali_indexes(OmegaConf.create({"data": {"format": "image_folder"}}))
    check_dali_indexes(OmegaConf.create({"data": {"dataset": "cifar10"}}))
