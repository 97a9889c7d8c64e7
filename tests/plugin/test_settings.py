"""attnce_plugin/settings.py: ``method_kwargs`` read against the methods' schemas, the crop roles,
and the other keys the methods read. Every refusal must name the key and what it allows."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from attnce_plugin import settings
from attnce_plugin.settings import MethodConfigError

REQUIRED = {"proj_hidden_dim": 64, "proj_output_dim": 16, "temperature": 0.2}
SCHEMAS = {
    "attentionnce": (settings.AttentionNCEKwargs, REQUIRED),
    "mocov3_attentionnce": (settings.MoCoV3AttentionNCEKwargs, {**REQUIRED, "pred_hidden_dim": 32}),
}
#: Each method's keys, written out here rather than read from the schemas.
COMMON = "proj_hidden_dim proj_output_dim temperature d_pos d_neg neg_weighting batch_positives"
COMMON += " positives_update_bn attention_log_every neg_temperature exclude_same_class"
KEYS = {
    "attentionnce": f"{COMMON} projector loss anchor",
    "mocov3_attentionnce": f"{COMMON} pred_hidden_dim loss key_in_prototype",
}


def _read(method, **kwargs):
    schema, required = SCHEMAS[method]
    cfg = OmegaConf.create({"method": method, "method_kwargs": {**required, **kwargs}})
    return cfg, settings.read_method_kwargs(cfg, schema)


def _refusal(method, **kwargs) -> str:
    with pytest.raises(MethodConfigError) as err:
        _read(method, **kwargs)
    return str(err.value)


@pytest.mark.parametrize("method", list(SCHEMAS))
def test_settings_written_back_survive_args_json(method):
    """What solo-learn's Checkpointer writes (json of the config) holds every key as a plain
    value, and reading it back, as main_knn.py and the probes do, gives the same settings; 0.5's
    ``compile`` key is dropped, so that its checkpoints still load."""
    cfg, read = _read(method, d_neg=2, neg_weighting="importance", compile=True)
    written = json.loads(json.dumps(OmegaConf.to_container(cfg)))  # Checkpointer.save_args
    kw = written["method_kwargs"]
    assert sorted(kw) == sorted(KEYS[method].split())
    assert (kw["d_neg"], kw["neg_weighting"], kw["loss"]) == (2.0, "importance", "attentionnce")
    assert settings.read_method_kwargs(OmegaConf.create(written), SCHEMAS[method][0]) == read


@pytest.mark.parametrize("method", list(SCHEMAS))
def test_unknown_key_is_named_with_the_allowed_keys(method):
    message = _refusal(method, dneg=2.0)
    assert "method_kwargs.dneg" in message and "did you mean 'd_neg'" in message
    assert all(key in message for key in KEYS[method].split())
    # A key of the other method is unknown here too.
    other = "anchor" if method == "mocov3_attentionnce" else "key_in_prototype"
    assert f"method_kwargs.{other} is not a setting" in _refusal(method, **{other: True})


@pytest.mark.parametrize(
    "key,value,allowed,method",
    [
        ("temperature", "???", "is required", "attentionnce"),
        ("d_neg", 0, "a finite number > 0", "attentionnce"),
        ("d_pos", "inf", "a finite number > 0", "attentionnce"),
        ("temperature", "abc", "a finite number > 0", "attentionnce"),
        ("attention_log_every", 0, "an integer >= 1", "attentionnce"),
        ("proj_output_dim", "abc", "an integer >= 1", "attentionnce"),
        ("batch_positives", "maybe", "true or false", "attentionnce"),
        ("loss", "mocov3", "attentionnce, simclr, simclr_all_views", "attentionnce"),
        ("loss", "simclr", "attentionnce, mocov3", "mocov3_attentionnce"),  # each method's own
        ("projector", "mlp_ln", "mlp, mlp_bn", "attentionnce"),
        ("anchor", "first", "views, mean", "attentionnce"),
        ("neg_weighting", "outside", "logit, importance", "attentionnce"),
        ("neg_temperature", 0, "a finite number > 0 or null", "mocov3_attentionnce"),
        ("neg_temperature", "abc", "a finite number > 0 or null", "attentionnce"),
        ("exclude_same_class", "maybe", "true or false", "attentionnce"),
    ],
)
def test_bad_values_are_refused_naming_the_key_and_what_it_allows(key, value, allowed, method):
    message = _refusal(method, **{key: value})
    assert f"method_kwargs.{key}" in message
    assert all(v in message for v in allowed.split(", ")), message


@pytest.mark.parametrize("loss", ["simclr", "simclr_all_views"])
def test_anchor_mean_needs_the_attentionnce_loss(loss):
    message = _refusal("attentionnce", anchor="mean", loss=loss)
    assert "method_kwargs.anchor" in message and "method_kwargs.loss=attentionnce" in message
    assert "anchor=views" in message
    assert _read("attentionnce", anchor="mean")[1].anchor == "mean"


@pytest.mark.parametrize(
    "pipelines,m",
    [
        ([(2, 32), (4, 32)], 4),  # the paper: 2 anchors + M = 4 positives at one size
        ([(1, 32), (1, 32), (4, 32)], 4),  # 1 + 1 anchors (two augmentation pipelines)
        ([(2, 224), (6, 96)], 6),  # multi-crop: small positives
        ([(1, 224), (1, 224), (3, 96), (1, 64)], 4),  # positives at two sizes
        ([(2, 32)], 0),
        ([(1, 32), (3, 32)], None),  # refused: the anchor pair straddles a pipeline boundary
        ([(3, 32), (2, 16)], None),  # refused: 3 leading crops
        ([], None),
        ([(1, 32), (1, 16), (4, 16)], None),  # refused: anchors of two sizes
    ],
)
def test_crop_layouts_give_the_number_of_positives_or_are_refused(pipelines, m):
    augs = OmegaConf.create([{"num_crops": n, "crop_size": s} for n, s in pipelines])
    if m is not None:
        assert settings.num_positives(augs) == m
        return
    with pytest.raises(MethodConfigError, match="augmentations.*the anchors are the first 2 crops"):
        settings.num_positives(augs)


def _check(large=2, small=4, method="attentionnce", loss="attentionnce", **other):
    """``read_settings`` of a config with these crop roles and ``other`` keys."""
    schema, required = SCHEMAS[method]
    data = {"num_large_crops": large, "num_small_crops": small, **other.pop("data", {})}
    oracle = other.pop("exclude_same_class", False)
    kwargs = {**required, "loss": loss, "exclude_same_class": oracle}
    cfg = OmegaConf.create({"method": method, "method_kwargs": kwargs, "data": data, **other})
    settings.read_settings(cfg, schema, "simclr" if method == "attentionnce" else "mocov3")


DALI = {"data": {"format": "dali"}}
ORACLE = {"exclude_same_class": True}
DALI_ENCODED = dict(DALI, dali={"encode_indexes_into_labels": True})


@pytest.mark.parametrize(
    "cfg,refusal",
    [
        (dict(large=6, small=0), "data.num_large_crops=6.*wrap_parse_cfg"),
        (dict(small=0), "method_kwargs.loss=attentionnce needs positive crops.*num_crops: M"),
        (DALI, r"dali\.encode_indexes_into_labels=True"),
        (dict(DALI, dali={"encode_indexes_into_labels": False}), "dali.encode_indexes_into_labels"),
        (dict(diagnostics={"enable": False}), "diagnostics.enable .*enabled.*callbacks"),
        (dict(ORACLE, data={"dataset": "stl10"}), "exclude_same_class=True needs class labels"),
        (dict(DALI_ENCODED, devices=[1]), r"CUDA_VISIBLE_DEVICES=1 and devices=\[0\]"),
        (dict(DALI_ENCODED, devices=[2, 3]), r"CUDA_VISIBLE_DEVICES=2,3 and devices=\[0, 1\]"),
        (dict(ORACLE, data={"no_labels": True}), "exclude_same_class.*allowed here: false"),
    ],
)
def test_other_keys_the_methods_read_are_refused_naming_the_key(cfg, refusal):
    with pytest.raises(MethodConfigError, match=refusal):
        _check(**cfg)


def test_other_keys_the_methods_read_pass_when_right():
    _check(small=0, loss="simclr")
    _check(**DALI, dali={"encode_indexes_into_labels": True})
    _check(**DALI, method="mocov3_attentionnce")  # MoCo masks by position: any indexes will do
    _check(diagnostics={"enabled": False, "callbacks": {}})
    _check(**ORACLE, data={"dataset": "cifar10"}, method="mocov3_attentionnce")
    _check(**DALI_ENCODED, devices=[0, 1])
    _check(**DALI, devices=[1], method="mocov3_attentionnce")  # no index map: solo-learn's own
