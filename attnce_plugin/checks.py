"""Argument checks shared by the losses and the methods, so that bad input fails early and loudly."""

from __future__ import annotations

import math
from numbers import Real
from typing import Sequence

import torch


def check_positive_finite(name: str, value: object) -> float:
    """Return ``value`` as a float, or raise ``ValueError`` naming ``name`` and the allowed range.

    Args:
        name: the key shown in the message, e.g. ``"method_kwargs.d_neg"``.
        value: the user's value.
    """
    if isinstance(value, bool) or not isinstance(value, (Real, torch.Tensor)):
        raise ValueError(
            f"{name} must be a finite number > 0, got {value!r} of type {type(value).__name__}"
        )
    as_float = float(value)
    if not math.isfinite(as_float) or as_float <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {as_float!r}")
    return as_float


def check_shape(name: str, tensor: torch.Tensor, expected: Sequence[object], hint: str) -> None:
    """Raise ``ValueError`` unless ``tensor.shape`` matches ``expected`` (``None`` = any size).

    Args:
        name: argument name shown in the message.
        tensor: the tensor to check.
        expected: sizes, ``None`` for a free dimension.
        hint: the documented layout, e.g. ``"[V*b, d]"``.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {hint}, got {type(tensor).__name__}")
    shape = tuple(tensor.shape)
    ok = len(shape) == len(expected) and all(e is None or e == s for e, s in zip(expected, shape))
    if not ok:
        want = "[" + ", ".join("*" if e is None else str(e) for e in expected) + "]"
        raise ValueError(f"{name} must have shape {hint} = {want}, got {list(shape)}")
