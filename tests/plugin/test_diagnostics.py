"""attnce_plugin/diagnostics.py: the representation measures against plain numpy loops, and the
callback's validation subset, driven by a tiny stand-in for solo-learn's module and trainer (the
training values the methods log: test_methods.py)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import attnce_plugin.diagnostics as diag


def test_alignment_and_uniformity_against_loops():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(7, 5)), rng.normal(size=(7, 5))
    xu, yu = (v / np.linalg.norm(v, axis=1, keepdims=True) for v in (x, y))
    want = np.mean([np.sum((xu[i] - yu[i]) ** 2) for i in range(7)])
    assert float(diag.alignment(torch.tensor(x), torch.tensor(y))) == pytest.approx(want)
    pairs = [np.exp(-2 * np.sum((xu[i] - xu[j]) ** 2)) for i in range(7) for j in range(i + 1, 7)]
    assert float(diag.uniformity(torch.tensor(x))) == pytest.approx(math.log(np.mean(pairs)))


def test_effective_rank_against_numpy():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(50, 6)) @ np.diag([3, 2, 1, 0.5, 0.1, 0.01])
    eig = np.clip(np.linalg.eigvalsh(np.cov(x.T)), 0, None)
    p = eig / eig.sum()
    want = math.exp(-np.sum(p * np.log(p)))
    assert float(diag.effective_rank(torch.tensor(x))) == pytest.approx(want, rel=1e-9)
    # a collapse onto a line, isotropic data, a constant
    line = torch.tensor(rng.normal(size=(40, 1)) * rng.normal(size=(1, 8)) + 5)
    assert float(diag.effective_rank(line.float())) == pytest.approx(1, abs=1e-3)
    assert float(diag.effective_rank(torch.randn(20000, 8))) > 7.9
    assert float(diag.effective_rank(torch.ones(10, 4))) == 1.0


class _Module(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = torch.nn.Identity()
        self.projector = torch.nn.Linear(4, 2)
        self.logged = {}
        self.device = torch.device("cpu")

    def log(self, name, value, **kwargs):
        self.logged[name] = value


def _epoch(callback, module, batches, sanity=False):
    trainer = SimpleNamespace(sanity_checking=sanity)
    callback.on_validation_epoch_start(trainer, module)
    for batch in batches:
        module.backbone(batch)  # solo-learn's validation step calls the backbone once
        callback.on_validation_batch_end(trainer, module, None, batch, 0)
    callback.on_validation_epoch_end(trainer, module)


def test_validation_subset_is_the_same_random_subset_every_epoch(monkeypatch):
    seen = []
    monkeypatch.setattr(diag, "uniformity", lambda x: seen.append(x.clone()) or torch.zeros(()))
    rows = torch.arange(40.0).unsqueeze(1) * torch.ones(1, 4)  # row i is all i
    batches = list(rows.split(8))
    module, callback = _Module(), diag.AttentionDiagnostics(max_samples=16)
    _epoch(callback, module, batches, sanity=True)  # the sanity check logs nothing
    assert not seen and not module.logged
    for _ in range(3):
        _epoch(callback, module, batches)
    feats = [sorted(x[:, 0].int().tolist()) for x in seen[0::2]]  # [feats, z] per epoch
    assert len(feats) == 3 and feats[0] == feats[1] == feats[2] and len(feats[0]) == 16
    assert feats[0] != list(range(16)) and len(set(feats[0])) == 16  # random, no repeats
    torch.testing.assert_close(seen[1], module.projector(seen[0]).detach())  # same rows
    kinds, measures = ("feats", "z"), ("uniformity", "eff_rank")
    assert set(module.logged) == {f"val_repr_{k}_{m}" for k in kinds for m in measures}
    seen.clear()
    _epoch(diag.AttentionDiagnostics(max_samples=1000), module, batches)
    assert sorted(seen[0][:, 0].int().tolist()) == list(range(40))
    # Validation features arrive in bf16 under autocast; the hook runs outside it.
    module = _Module()
    _epoch(diag.AttentionDiagnostics(), module, [torch.randn(8, 4, dtype=torch.bfloat16)])
    assert {"val_repr_z_eff_rank", "val_repr_feats_uniformity"} <= set(module.logged)
