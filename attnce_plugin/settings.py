"""The methods' settings, read once when the config is: ``method_kwargs`` as OmegaConf structured
configs, the crop roles, and the DALI index flag. Every refusal names the key and what it allows.

solo-learn ignores unknown ``method_kwargs`` keys, so a misspelled ``d_neg`` would silently train
with the default; here it stops the run before the network is built.
"""

from __future__ import annotations

import copy
import difflib
import math
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Dict, Tuple

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, ValidationError

from attnce_plugin.losses import NEG_WEIGHTINGS


class MethodConfigError(ValueError):
    """A setting of the plugin's methods is unknown, missing or out of range."""


_ALLOWED = {"float": "a finite number > 0", "int": "an integer >= 1", "bool": "true or false"}


@dataclass
class _Kwargs:
    proj_hidden_dim: int = MISSING
    proj_output_dim: int = MISSING
    temperature: float = MISSING
    d_pos: float = 1.0
    d_neg: float = 1.0
    #: where beta acts: on the negative's logit (the paper's) or on its exp term (importance)
    neg_weighting: str = "logit"
    #: one forward of all same-size positive crops (BatchNorm then sees M*b images at once)
    batch_positives: bool = False
    #: False keeps the positives out of BatchNorm's running statistics (small positive crops)
    positives_update_bn: bool = True
    attention_log_every: int = 10

    CHOICES: ClassVar[Dict[str, Tuple[str, ...]]] = {"neg_weighting": NEG_WEIGHTINGS}

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "float" and not (math.isfinite(value) and value > 0):
                raise MethodConfigError(
                    f"method_kwargs.{f.name} must be a finite number > 0, got {value}"
                )
            if f.type == "int" and value < 1:
                raise MethodConfigError(
                    f"method_kwargs.{f.name} must be an integer >= 1, got {value}"
                )
            if f.name in self.CHOICES and value not in self.CHOICES[f.name]:
                raise MethodConfigError(
                    f"method_kwargs.{f.name}={value!r}: allowed values are {list(self.CHOICES[f.name])}"
                )


@dataclass
class AttentionNCEKwargs(_Kwargs):
    """``attentionnce``. ``loss: simclr`` is solo-learn's SimCLR loss on the 2 anchors (positives
    unused), ``simclr_all_views`` on all 2 + M views: the baselines with the same network and the
    same views; ``anchor: mean`` is the rebuttal's AttentionNCE* (one anchor per image, the mean
    of its anchor views); ``projector: mlp_bn`` the authors' projector."""

    projector: str = "mlp"
    loss: str = "attentionnce"
    anchor: str = "views"

    CHOICES: ClassVar[Dict[str, Tuple[str, ...]]] = {
        **_Kwargs.CHOICES,
        "projector": ("mlp", "mlp_bn"),
        "loss": ("attentionnce", "simclr", "simclr_all_views"),
        "anchor": ("views", "mean"),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.anchor == "mean" and self.loss != "attentionnce":
            raise MethodConfigError(
                f"method_kwargs.anchor=mean needs loss=attentionnce; with loss={self.loss} the "
                "allowed value is anchor=views"
            )


@dataclass
class MoCoV3AttentionNCEKwargs(_Kwargs):
    """``mocov3_attentionnce``. ``loss: mocov3`` is solo-learn's MoCo v3 step for step;
    ``key_in_prototype: false`` leaves the other anchor view's key out of the prototype."""

    pred_hidden_dim: int = MISSING
    loss: str = "attentionnce"
    key_in_prototype: bool = True

    CHOICES: ClassVar[Dict[str, Tuple[str, ...]]] = {
        **_Kwargs.CHOICES,
        "loss": ("attentionnce", "mocov3"),
    }


def read_method_kwargs(cfg: DictConfig, schema: type) -> Any:
    """Check ``cfg.method_kwargs`` against ``schema``, write it back with the defaults filled in,
    and return it as a ``schema`` instance.

    Raises:
        MethodConfigError: an unknown, missing or bad key, with the allowed keys or values.
    """
    allowed = ", ".join(f.name for f in fields(schema))
    # 0.5's method_kwargs.compile is gone; dropped here so that 0.5 checkpoints (args.json) load.
    given = copy.deepcopy(cfg.get("method_kwargs") or {})
    given.pop("compile", None)
    try:
        kwargs = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), given))
    except ConfigKeyError as err:
        close = difflib.get_close_matches(str(err.key), [f.name for f in fields(schema)], n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise MethodConfigError(
            f"method_kwargs.{err.key} is not a setting of method {cfg.method!r}{hint}; allowed "
            f"keys: {allowed}"
        ) from None
    except MissingMandatoryValue as err:
        raise MethodConfigError(
            f"method_kwargs.{err.key} is required by method {cfg.method!r}; allowed keys: {allowed}"
        ) from None
    except ValidationError as err:
        kind = {f.name: f.type for f in fields(schema)}.get(str(err.key))
        want = schema.CHOICES.get(err.key) or _ALLOWED.get(kind, kind)
        raise MethodConfigError(
            f"method_kwargs.{err.key}: {str(err).splitlines()[0]}; allowed values: {want}"
        ) from None
    cfg.method_kwargs = asdict(kwargs)
    return kwargs


def num_positives(augmentations: Any, required: bool) -> int:
    """M: the anchors are the first 2 crops of solo-learn's ``augmentations`` list, in pipelines
    of their own at one crop size; every later crop is a positive, at any size.

    Raises:
        MethodConfigError: the list does not start with 2 anchor crops, or holds no positive
            crop when ``required``.
    """
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
    m = sum(counts[first:])
    if required and m == 0:
        raise MethodConfigError(
            "augmentations hold no positive crop: add a pipeline after the 2 anchors with "
            "num_crops: M (views.num_positives in the shipped configs)"
        )
    return m


def check_dali_indexes(cfg: DictConfig) -> None:
    """The SimCLR form masks negatives by dataset index; without index encoding solo-learn's DALI
    loader numbers each batch's images by position, the same numbers on every node."""
    if OmegaConf.select(cfg, "data.format") == "dali":
        if OmegaConf.select(cfg, "dali.encode_indexes_into_labels") is not True:
            raise MethodConfigError(
                "data.format=dali needs dali.encode_indexes_into_labels=True (allowed: True; "
                "data_format=dali in the shipped configs sets it): the loss masks negatives by "
                "dataset index"
            )
