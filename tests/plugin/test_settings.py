"""attnce_plugin/settings.py: ``method_kwargs`` read against the methods' schemas, the crop roles,
and the other keys the methods read. Every refusal must name the key and what it allows."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from attnce_plugin.settings import (
    AttentionNCEKwargs,
    MethodConfigError,
    MoCoV3AttentionNCEKwargs,
    check_crop_roles,
    check_dali_indexes,
    check_diagnostics,
    num_positives,
    read_method_kwargs,
)

REQUIRED = {"proj_hidden_dim": 64, "proj_output_dim": 16, "temperature": 0.2}
SCHEMAS = {
    "attentionnce": (AttentionNCEKwargs, REQUIRED),
    "mocov3_attentionnce": (MoCoV3AttentionNCEKwargs, {**REQUIRED, "pred_hidden_dim": 32}),
}
#: Each method's own keys, written out here rather than read from the schemas.
KEYS = {
    "attentionnce": ["projector", "loss", "anchor"],
    "mocov3_attentionnce": ["pred_hidden_dim", "loss", "key_in_prototype"],
}
COMMON_KEYS = [
    "proj_hidden_dim",
    "proj_output_dim",
    "temperature",
    "d_pos",
    "d_neg",
    "neg_weighting",
    "batch_positives",
    "positives_update_bn",
    "attention_log_every",
]


def _read(method, **kwargs):
    schema, required = SCHEMAS[method]
    cfg = OmegaConf.create({"method": method, "method_kwargs": {**required, **kwargs}})
    return cfg, read_method_kwargs(cfg, schema)


def _refusal(method, **kwargs) -> str:
    with pytest.raises(MethodConfigError) as err:
        _read(method, **kwargs)
    return str(err.value)


@pytest.mark.parametrize("method", list(SCHEMAS))
def test_settings_written_back_survive_args_json(method):
    """What solo-learn's Checkpointer writes (json of the config) holds every key as a plain
    value, and reading it back, as main_knn.py and the probes do, gives the same settings."""
    cfg, kw = _read(method, d_neg=2, neg_weighting="importance")
    written = json.loads(json.dumps(OmegaConf.to_container(cfg)))  # Checkpointer.save_args
    assert sorted(written["method_kwargs"]) == sorted(COMMON_KEYS + KEYS[method])
    assert written["method_kwargs"]["neg_weighting"] == "importance"
    assert written["method_kwargs"]["d_neg"] == 2.0
    assert written["method_kwargs"]["loss"] == "attentionnce"
    again = OmegaConf.create(written)
    assert read_method_kwargs(again, SCHEMAS[method][0]) == kw


def test_a_0_5_args_json_with_compile_still_reads():
    cfg, kw = _read("attentionnce", compile=True)
    assert "compile" not in kw and "compile" not in cfg.method_kwargs


@pytest.mark.parametrize("method", list(SCHEMAS))
def test_unknown_key_is_named_with_the_allowed_keys(method):
    message = _refusal(method, dneg=2.0)
    assert "method_kwargs.dneg" in message and "did you mean 'd_neg'" in message
    assert all(key in message for key in COMMON_KEYS + KEYS[method])
    # A key of the other method is unknown here too.
    other = "anchor" if method == "mocov3_attentionnce" else "key_in_prototype"
    assert f"method_kwargs.{other} is not a setting" in _refusal(method, **{other: True})


@pytest.mark.parametrize("key", ["proj_hidden_dim", "proj_output_dim", "temperature"])
def test_missing_required_key_is_named(key):
    cfg = OmegaConf.create({"method": "attentionnce", "method_kwargs": dict(REQUIRED)})
    del cfg.method_kwargs[key]
    with pytest.raises(MethodConfigError, match=f"method_kwargs.{key} is required"):
        read_method_kwargs(cfg, AttentionNCEKwargs)
    assert "method_kwargs.pred_hidden_dim is required" in _refusal(
        "mocov3_attentionnce", pred_hidden_dim="???"
    )


@pytest.mark.parametrize("method", list(SCHEMAS))
@pytest.mark.parametrize(
    "key,value,allowed",
    [
        ("d_neg", 0, "finite number > 0"),
        ("d_neg", -1, "finite number > 0"),
        ("d_neg", float("nan"), "finite number > 0"),
        ("d_neg", float("inf"), "finite number > 0"),
        ("d_pos", "inf", "finite number > 0"),
        ("temperature", 0.0, "finite number > 0"),
        ("d_neg", "abc", "finite number > 0"),
        ("d_pos", True, "finite number > 0"),
        ("attention_log_every", 0, "integer >= 1"),
        ("attention_log_every", "abc", "integer >= 1"),
        ("proj_output_dim", -3, "integer >= 1"),
        ("batch_positives", "maybe", "true or false"),
    ],
)
def test_bad_values_are_refused_naming_the_key_and_what_it_allows(method, key, value, allowed):
    message = _refusal(method, **{key: value})
    assert f"method_kwargs.{key}" in message and allowed in message


@pytest.mark.parametrize(
    "method,key,value,allowed",
    [
        ("attentionnce", "loss", "mocov3", ["attentionnce", "simclr", "simclr_all_views"]),
        ("attentionnce", "projector", "mlp_ln", ["mlp", "mlp_bn"]),
        ("attentionnce", "anchor", "first", ["views", "mean"]),
        ("mocov3_attentionnce", "loss", "simclr", ["attentionnce", "mocov3"]),
        ("attentionnce", "neg_weighting", "outside", ["logit", "importance"]),
        ("mocov3_attentionnce", "neg_weighting", "hcl", ["logit", "importance"]),
    ],
)
def test_choices_outside_their_list_name_the_key_and_the_allowed_values(
    method, key, value, allowed
):
    message = _refusal(method, **{key: value})
    assert f"method_kwargs.{key}" in message and repr(value) in message
    assert all(v in message for v in allowed)


@pytest.mark.parametrize("loss", ["simclr", "simclr_all_views"])
def test_anchor_mean_needs_the_attentionnce_loss(loss):
    message = _refusal("attentionnce", anchor="mean", loss=loss)
    assert "method_kwargs.anchor" in message and "method_kwargs.loss=attentionnce" in message
    assert "anchor=views" in message
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
        ([(2, 32)], 0),
    ],
)
def test_crop_layouts_give_the_number_of_positives(pipelines, m):
    assert num_positives(_augs(*pipelines)) == m


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
    with pytest.raises(MethodConfigError, match="augmentations.*the anchors are the first 2 crops"):
        num_positives(_augs(*pipelines))


def _crops(large, small):
    return OmegaConf.create({"data": {"num_large_crops": large, "num_small_crops": small}})


def test_no_positive_is_refused_unless_the_loss_is_solo_learns():
    check_crop_roles(_crops(2, 0), "simclr", "simclr")
    check_crop_roles(_crops(2, 4), "attentionnce", "simclr")
    with pytest.raises(MethodConfigError, match="method_kwargs.loss=attentionnce.*num_crops: M"):
        check_crop_roles(_crops(2, 0), "attentionnce", "simclr")


def test_crop_roles_solo_learn_counted_alone_are_refused():
    with pytest.raises(MethodConfigError, match="data.num_large_crops=6.*wrap_parse_cfg"):
        check_crop_roles(_crops(6, 0), "attentionnce", "simclr")


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


def test_unknown_diagnostics_key_is_named_with_the_allowed_keys():
    check_diagnostics(OmegaConf.create({"diagnostics": {"enabled": False, "callbacks": {}}}))
    with pytest.raises(MethodConfigError, match="diagnostics.enable .*enabled.*callbacks"):
        check_diagnostics(OmegaConf.create({"diagnostics": {"enable": False}}))
