"""The methods' settings: ``method_kwargs`` as OmegaConf structured configs, read once by each
method's ``add_and_assert_specific_cfg``; the crop roles; the other keys the methods read. Every
refusal names the key and what it allows.

solo-learn ignores unknown ``method_kwargs`` keys, so a misspelled ``d_neg`` would silently train
with the default; here it stops the run before the network is built.
"""

import copy
import difflib
import math
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, Optional

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from attnce_plugin.losses import NEG_WEIGHTINGS


class MethodConfigError(ValueError):
    """A setting of the plugin's methods is unknown, missing or out of range."""


def _choice(name: str, *values: str) -> Any:
    """An Enum of a setting's allowed values: OmegaConf refuses any other, listing these. OmegaConf
    converts strings by member name, so names equal values; ``str`` members compare equal to plain
    strings and land in solo-learn's args.json as plain strings."""
    return Enum(name, {v: v for v in values}, type=str, module=__name__)


NegWeighting = _choice("NegWeighting", *NEG_WEIGHTINGS)
Projector = _choice("Projector", "mlp", "mlp_bn")
AttentionNCELoss = _choice("AttentionNCELoss", "attentionnce", "simclr", "simclr_all_views")
Anchor = _choice("Anchor", "views", "mean")
MoCoV3Loss = _choice("MoCoV3Loss", "attentionnce", "mocov3")

#: What the numbers and flags allow (OmegaConf's own messages give the type only).
_ALLOWED = {float: "a finite number > 0", int: "an integer >= 1", bool: "true or false"}
_ALLOWED[Optional[float]] = _ALLOWED[float] + " or null"


@dataclass
class _Kwargs:
    proj_hidden_dim: int = MISSING
    proj_output_dim: int = MISSING
    temperature: float = MISSING
    d_pos: float = 1.0
    d_neg: float = 1.0
    neg_weighting: NegWeighting = NegWeighting.logit
    #: tau_neg of the negatives' logits (our option; None: temperature): R = tau / tau_neg
    neg_temperature: Optional[float] = None
    #: an oracle for experiments: the batch's class labels drop same-class negatives (supervised)
    exclude_same_class: bool = False
    #: one forward of all same-size positive crops (BatchNorm then sees M*b images at once)
    batch_positives: bool = False
    #: False keeps the positives out of BatchNorm's running statistics (small positive crops)
    positives_update_bn: bool = True
    attention_log_every: int = 10

    @classmethod
    def check(cls, kwargs: DictConfig) -> None:
        """What OmegaConf's types cannot state: the ranges, and one combination."""
        if kwargs.get("anchor") == "mean" and kwargs.loss != "attentionnce":
            raise MethodConfigError(
                f"method_kwargs.anchor=mean needs method_kwargs.loss=attentionnce; with "
                f"loss={kwargs.loss.value} the allowed value is anchor=views"
            )
        for f in fields(cls):
            value = kwargs[f.name]
            kind = float if f.type == Optional[float] and value is not None else f.type
            if (kind is float and not (math.isfinite(value) and value > 0)) or (
                kind is int and value < 1
            ):
                raise MethodConfigError(
                    f"method_kwargs.{f.name}={value}: allowed values are {_ALLOWED[f.type]}"
                )


@dataclass
class AttentionNCEKwargs(_Kwargs):
    """``attentionnce``. ``loss: simclr`` is solo-learn's SimCLR loss on the 2 anchors (positives
    unused), ``simclr_all_views`` on all 2 + M views: the baselines with the same network and the
    same views; ``anchor: mean`` is the rebuttal's AttentionNCE* (one anchor per image, the mean
    of its anchor views); ``projector: mlp_bn`` the authors' projector."""

    projector: Projector = Projector.mlp
    loss: AttentionNCELoss = AttentionNCELoss.attentionnce
    anchor: Anchor = Anchor.views


@dataclass
class MoCoV3AttentionNCEKwargs(_Kwargs):
    """``mocov3_attentionnce``. ``loss: mocov3`` is solo-learn's MoCo v3 step for step;
    ``key_in_prototype: false`` leaves the other anchor view's key out of the prototype."""

    pred_hidden_dim: int = MISSING
    loss: MoCoV3Loss = MoCoV3Loss.attentionnce
    key_in_prototype: bool = True


def read_method_kwargs(cfg: DictConfig, schema: Any) -> DictConfig:
    """``cfg.method_kwargs`` checked against ``schema`` and written back typed, with the defaults
    filled in (solo-learn's args.json, which ``main_knn.py`` and ``main_linear.py`` read). An
    unknown, missing or bad key raises :class:`MethodConfigError` with the allowed keys or values.
    """
    types = {f.name: f.type for f in fields(schema)}
    given = copy.deepcopy(cfg.get("method_kwargs") or {})
    # 0.5's method_kwargs.compile is gone; dropped here so that 0.5 checkpoints (args.json) load.
    given.pop("compile", None)
    try:
        kwargs = OmegaConf.merge(OmegaConf.structured(schema), given)
    except ConfigKeyError as err:
        close = difflib.get_close_matches(str(err.key), list(types), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise MethodConfigError(
            f"method_kwargs.{err.key} is not a setting of method {cfg.method!r}{hint}; allowed "
            f"keys: {', '.join(types)}"
        ) from None
    except ValidationError as err:
        want = _ALLOWED.get(types[err.key])
        raise MethodConfigError(
            f"method_kwargs.{err.key}: {str(err).splitlines()[0]}"
            + (f"; allowed values are {want}" if want else "")
        ) from None
    missing = sorted(OmegaConf.missing_keys(kwargs))
    if missing:
        raise MethodConfigError(f"method_kwargs.{missing[0]} is required by method {cfg.method!r}")
    schema.check(kwargs)
    cfg.method_kwargs = kwargs
    return kwargs


def num_positives(augmentations: Any) -> int:
    """M: the anchors are the first 2 crops of solo-learn's ``augmentations`` list, in pipelines
    of their own at one crop size (else :class:`MethodConfigError`); every later crop is a
    positive, at any size."""
    counts = [int(p["num_crops"]) for p in augmentations or []]
    sizes = [int(p["crop_size"]) for p in augmentations or []]
    first, anchors = 0, 0
    while first < len(counts) and anchors < 2:
        anchors, first = anchors + counts[first], first + 1
    if anchors != 2 or len(set(sizes[:first])) != 1:
        raise MethodConfigError(
            f"augmentations: num_crops {counts}, crop_size {sizes}: the anchors are the first 2 "
            "crops, in pipelines of their own at one crop_size (num_crops: 2, or 1 + 1), followed "
            "by the positives' pipelines"
        )
    return sum(counts[first:])


def read_settings(cfg: DictConfig, schema: Any, base_loss: str) -> DictConfig:
    """What a method reads, checked once before the network is built: ``method_kwargs`` (by
    :func:`read_method_kwargs`), the crop roles the ``parse_cfg`` wrapper set (2 anchors, M
    positives as solo-learn's small crops, which its loaders need; M > 0 unless the loss is
    ``base_loss``, solo-learn's own), the DALI index encoding and the diagnostics keys. Raises
    :class:`MethodConfigError`, naming the key and the allowed keys or values."""
    kwargs = read_method_kwargs(cfg, schema)
    if cfg.data.num_large_crops != 2:
        raise MethodConfigError(
            f"data.num_large_crops={cfg.data.num_large_crops}: the crop roles are unset. Run "
            "the config through attnce_plugin.seam.wrap_parse_cfg(solo.args.pretrain.parse_cfg)"
            ", as the shipped configs' Hydra callback does in main_pretrain.py"
        )
    if kwargs.loss.value != base_loss and cfg.data.num_small_crops == 0:
        raise MethodConfigError(
            f"method_kwargs.loss={kwargs.loss.value} needs positive crops, and "
            "augmentations hold none: add a pipeline after the 2 anchors with num_crops: M "
            "(views.num_positives in the shipped configs)"
        )
    # The SimCLR form masks negatives by dataset index (MoCo's by position); without index
    # encoding solo-learn's DALI loader numbers each batch's images by position, the same numbers
    # on every node.
    dali = OmegaConf.select(cfg, "data.format") == "dali"
    encoded = OmegaConf.select(cfg, "dali.encode_indexes_into_labels") is True
    if base_loss == "simclr" and dali and not encoded:
        raise MethodConfigError(
            "data.format=dali needs dali.encode_indexes_into_labels=True (allowed: True; "
            "data_format=dali in the shipped configs sets it): the loss masks negatives by "
            "dataset index"
        )
    # solo-learn builds DALI's index map on the current device (dali_dataloader.py:628-630,772)
    # and DALI decodes onto the local rank's GPU (766): the first batch mixes cuda:k and cuda:0
    # unless the devices are 0..n-1.
    devices = OmegaConf.select(cfg, "devices")
    listed = list(devices) if OmegaConf.is_list(devices) else None
    if dali and encoded and listed is not None and listed != list(range(len(listed))):
        shown = ",".join(map(str, listed))
        raise MethodConfigError(
            f"devices={listed} with data.format=dali: solo-learn's DALI loader with "
            "dali.encode_indexes_into_labels needs devices=[0, ..., n-1] (allowed values); "
            f"select the GPUs with CUDA_VISIBLE_DEVICES={shown} and devices="
            f"{list(range(len(listed)))} instead"
        )
    # solo-learn gives unlabeled images the label -1: STL-10's pretraining split and no_labels.
    dataset, no_labels = (OmegaConf.select(cfg, f"data.{k}") for k in ("dataset", "no_labels"))
    if kwargs.exclude_same_class and (no_labels or dataset == "stl10"):
        raise MethodConfigError(
            f"method_kwargs.exclude_same_class=True needs class labels, and data.dataset="
            f"{dataset} (data.no_labels={no_labels}) gives unlabeled images; allowed here: false"
        )
    unknown = set(cfg.get("diagnostics") or {}) - {"enabled", "callbacks"}
    if unknown:
        raise MethodConfigError(
            f"diagnostics.{sorted(unknown)[0]} is not a diagnostics key; allowed keys: enabled "
            "(true or false), callbacks (name: {_target_: ...})"
        )
    return kwargs
