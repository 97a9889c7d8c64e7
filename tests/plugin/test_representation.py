"""Representation metrics against direct numpy float64 evaluations of their definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnce_plugin.representation import (
    alignment,
    effective_rank,
    infonce_mi_lower_bound,
    uniformity,
)


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def test_alignment_and_uniformity_match_definitions():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 6)), rng.normal(size=(40, 6))
    xu, yu = _unit(x), _unit(y)
    want_align = np.mean(np.linalg.norm(xu - yu, axis=1) ** 2)
    pair = [np.exp(-2 * np.sum((xu[i] - xu[j]) ** 2)) for i in range(40) for j in range(i + 1, 40)]
    want_unif = np.log(np.mean(pair))
    assert float(alignment(torch.tensor(x), torch.tensor(y))) == pytest.approx(want_align, rel=1e-5)
    assert float(uniformity(torch.tensor(x))) == pytest.approx(want_unif, rel=1e-5)


def test_effective_rank_extremes_and_definition():
    rng = np.random.default_rng(1)
    line = rng.normal(size=(200, 1)) * rng.normal(size=(1, 8))
    assert float(effective_rank(torch.tensor(line))) == pytest.approx(1.0, abs=1e-6)
    iso = rng.normal(size=(20000, 8))
    assert float(effective_rank(torch.tensor(iso))) == pytest.approx(8.0, rel=0.01)
    x = rng.normal(size=(300, 5)) * np.array([3.0, 2.0, 1.0, 0.5, 0.1])
    eig = np.clip(np.linalg.eigvalsh(np.cov(x, rowvar=False)), 0, None)
    p = eig / eig.sum()
    assert float(effective_rank(torch.tensor(x))) == pytest.approx(
        math.exp(-np.sum(p * np.log(p))), rel=1e-9
    )


def test_mi_bound_and_errors():
    assert infonce_mi_lower_bound(1.5, 255) == pytest.approx(math.log(256) - 1.5)
    with pytest.raises(ValueError, match="num_negatives"):
        infonce_mi_lower_bound(1.0, -1)
    with pytest.raises(ValueError, match=r"\[n, d\]"):
        uniformity(torch.randn(1, 4))
    with pytest.raises(ValueError, match=r"\[3, 4\] and \[2, 4\]"):
        alignment(torch.randn(3, 4), torch.randn(2, 4))
