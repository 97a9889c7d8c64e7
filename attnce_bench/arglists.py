"""argparse types for comma-separated lists, shared by the benchmark and the scripts built on it."""

from __future__ import annotations

import argparse
from typing import List


def int_list(text: str) -> List[int]:
    """``"0,1 2"`` -> ``[0, 1, 2]``; ``""`` -> ``[]``."""
    try:
        return [int(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None


def float_list(text: str) -> List[float]:
    """``"0.5,1"`` -> ``[0.5, 1.0]``; ``""`` -> ``[]``."""
    try:
        return [float(t) for t in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated numbers") from None


def str_list(text: str) -> List[str]:
    """``"simclr, attentionnce"`` -> ``["simclr", "attentionnce"]``."""
    return [t for t in text.replace(",", " ").split() if t]
