"""Config handling shared by the AttentionNCE solo-learn methods.

solo-learn checks method kwargs with bare ``assert``s and ignores unknown keys, so a misspelled
``d_neg`` would silently train with the default. The methods here refuse unknown keys, name the
allowed ones, and check the numeric ones, all inside ``add_and_assert_specific_cfg``, which runs
inside the Hydra task function before any training step (errors in Hydra callbacks would only be
logged).
"""

from __future__ import annotations

import difflib
from typing import Any, Dict, Iterable, Mapping, Optional

import omegaconf
import torch
from omegaconf import OmegaConf

from attnce_plugin.checks import check_positive_finite
from attnce_plugin.methods.crops import CropLayout, CropLayoutError, resolve_crop_layout


class MethodConfigError(ValueError):
    """A method_kwargs entry is unknown, missing or out of range."""


def check_method_kwargs(
    cfg: omegaconf.DictConfig,
    method: str,
    allowed: Iterable[str],
    required: Iterable[str] = (),
    defaults: Optional[Mapping[str, Any]] = None,
) -> None:
    """Refuse unknown or missing ``method_kwargs`` keys and fill in defaults, in place.

    Args:
        cfg: the whole config; ``cfg.method_kwargs`` is read and updated.
        method: registered method name, shown in messages.
        allowed: every key the method understands.
        required: keys that must be present (``???`` counts as absent).
        defaults: values for absent optional keys.

    Raises:
        MethodConfigError: naming the bad key and the allowed ones.
    """
    allowed = sorted(set(allowed))
    kwargs = cfg.method_kwargs
    for key in list(kwargs.keys()):
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise MethodConfigError(
                f"method_kwargs.{key} is not a setting of method '{method}'{hint}; "
                f"allowed keys: {', '.join(allowed)}"
            )
    for key in required:
        if key not in kwargs or OmegaConf.is_missing(kwargs, key):
            raise MethodConfigError(
                f"method_kwargs.{key} is required by method '{method}'; "
                f"allowed keys: {', '.join(allowed)}"
            )
    for key, value in (defaults or {}).items():
        if key not in kwargs or OmegaConf.is_missing(kwargs, key) or kwargs[key] is None:
            kwargs[key] = value


def check_positive_kwargs(cfg: omegaconf.DictConfig, keys: Iterable[str]) -> None:
    """Require ``cfg.method_kwargs[key]`` to be a finite number > 0 for each key.

    Raises:
        MethodConfigError: naming ``method_kwargs.<key>`` and the allowed range.
    """
    for key in keys:
        try:
            check_positive_finite(f"method_kwargs.{key}", cfg.method_kwargs[key])
        except ValueError as err:
            raise MethodConfigError(str(err)) from None


def apply_crop_layout(cfg: omegaconf.DictConfig, *, require_positives: bool = True) -> CropLayout:
    """Resolve anchor/positive roles from ``cfg.augmentations`` and tell solo-learn, in place.

    Sets ``cfg.data.num_large_crops = 2`` (the anchors: forward + online classifier + kNN) and
    ``cfg.data.num_small_crops = M`` (the positives: ``multicrop_forward``), whatever their sizes.
    Idempotent, so it is safe both in the ``parse_cfg`` hook and in the methods (which also run when
    a checkpoint's ``args.json`` is reloaded by ``main_knn.py``).

    Raises:
        CropLayoutError: the layout is not 2 anchors followed by positives; the message says what
            to change.
    """
    if "augmentations" not in cfg or cfg.augmentations is None:
        raise CropLayoutError(
            "the config has no augmentations list; AttentionNCE needs a pipeline with num_crops: 2 "
            "(the anchors) followed by positive crops"
        )
    layout = resolve_crop_layout(cfg.augmentations, require_positives=require_positives)
    cfg.data.num_large_crops = layout.num_anchors
    cfg.data.num_small_crops = layout.num_positives
    return layout


def mean_stats(stats: Iterable[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
    """Combine the attention diagnostics of several loss calls: mean, but max for ``max_beta``."""
    stats = list(stats)
    out: Dict[str, torch.Tensor] = {}
    for key in stats[0]:
        values = torch.stack([s[key].float() for s in stats])
        out[key] = values.max() if key == "max_beta" else values.mean()
    return out
