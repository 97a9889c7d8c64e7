"""The argument checks of the losses, the method settings and the callbacks, one per kind of value,
so that bad input fails early, loudly and with the same words everywhere."""

from __future__ import annotations

import math
from numbers import Real
from typing import Sequence, Type

import torch


def check_positive_finite(name: str, value: object, error: Type[ValueError] = ValueError) -> float:
    """Return ``value`` as a float, or raise ``error`` naming ``name`` and the allowed range.

    Args:
        name: the key shown in the message, e.g. ``"method_kwargs.d_neg"``.
        value: the user's value (a real number or a one-element tensor; not a bool).
        error: the exception class (a ``ValueError``), e.g. a config error of the caller.
    """
    if isinstance(value, bool) or not isinstance(value, (Real, torch.Tensor)):
        raise error(
            f"{name} must be a finite number > 0, got {value!r} of type {type(value).__name__}"
        )
    as_float = float(value)
    if not math.isfinite(as_float) or as_float <= 0:
        raise error(f"{name} must be a finite number > 0, got {as_float!r}")
    return as_float


def check_int_at_least(
    name: str, value: object, minimum: int = 1, error: Type[ValueError] = ValueError
) -> int:
    """Return ``value``, or raise ``error`` unless it is an integer >= ``minimum`` (not a bool).

    Args:
        name: the key shown in the message, e.g. ``"augmentations[1].num_crops"``.
        value: the user's value.
        minimum: the smallest allowed value.
        error: the exception class (a ``ValueError``).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise error(
            f"{name} must be an integer >= {minimum}, got {value!r} of type "
            f"{type(value).__name__}"
        )
    return value


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
