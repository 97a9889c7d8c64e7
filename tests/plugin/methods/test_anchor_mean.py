"""The anchor-mean variant ("AttentionNCE*", ``method_kwargs.anchor: mean``).

The helper and the loss on its output are checked against a float64 evaluation written here from
the definition (normalise each anchor view, average) fed to ``tests/helpers/reference.py``'s published
formula; then the config key's default and refusal (training: tests/plugin/methods/test_health.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pytest
import torch

from attnce_plugin.solo_compat import require_solo

require_solo()


from helpers.configs import compose_pretrain_cfg  # noqa: E402
from helpers.reference import simclr_form  # noqa: E402

from attnce_plugin.losses import attentionnce_loss_func  # noqa: E402
from attnce_plugin.methods import AttentionNCE, MethodConfigError  # noqa: E402
from attnce_plugin.methods.attentionnce import mean_anchor  # noqa: E402


def _cfg(train_path: Path, overrides: Sequence[str] = ()):
    return compose_pretrain_cfg("attentionnce_multicrop.yaml", train_path, overrides)


def test_mean_anchor_matches_numpy_definition():
    rng = np.random.default_rng(0)
    v1, v2 = rng.normal(size=(5, 7)) * 3.0, rng.normal(size=(5, 7)) * 0.1
    want = (
        v1 / np.linalg.norm(v1, axis=1, keepdims=True)
        + v2 / np.linalg.norm(v2, axis=1, keepdims=True)
    ) / 2
    got = mean_anchor([torch.tensor(v1), torch.tensor(v2)])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    with pytest.raises(ValueError, match=r"\[b, d\] of one shape"):
        mean_anchor([torch.randn(5, 7), torch.randn(4, 7)])
    with pytest.raises(ValueError, match="at least one"):
        mean_anchor([])


@pytest.mark.parametrize("d_pos,d_neg", [(1.0, 10.0), (0.5, 0.5)])
def test_mean_anchor_loss_and_gradients_match_float64_reference(d_pos, d_neg):
    g = torch.Generator().manual_seed(3)
    b, m, d = 6, 4, 8
    v1 = torch.randn(b, d, generator=g, dtype=torch.float64, requires_grad=True)
    v2 = torch.randn(b, d, generator=g, dtype=torch.float64, requires_grad=True)
    pos = torch.randn(b, m, d, generator=g, dtype=torch.float64)
    idx = torch.arange(b) + 100
    loss = attentionnce_loss_func(mean_anchor([v1, v2]), pos, idx, 0.5, d_pos, d_neg)
    grads = torch.autograd.grad(loss, (v1, v2))

    # Reference: the definition spelt out here (no package code), one anchor per image, whose
    # negatives are the other b - 1 images' mean anchors.
    r1, r2 = v1.detach().clone().requires_grad_(), v2.detach().clone().requires_grad_()
    ref_anchor = (r1 / r1.norm(dim=1, keepdim=True) + r2 / r2.norm(dim=1, keepdim=True)) / 2
    want = simclr_form(ref_anchor, pos, idx, 0.5, d_pos, d_neg)
    want_grads = torch.autograd.grad(want, (r1, r2))
    assert loss.item() == pytest.approx(want.item(), rel=1e-5)
    for got_g, want_g in zip(grads, want_grads):
        torch.testing.assert_close(got_g.double(), want_g, rtol=1e-4, atol=1e-6)


def test_anchor_kwarg_default_and_refusal(tiny_image_folder):
    assert AttentionNCE(_cfg(tiny_image_folder["train"])).anchor == "views"
    cfg = _cfg(tiny_image_folder["train"], ["+method_kwargs.anchor=average"])
    with pytest.raises(
        MethodConfigError, match="method_kwargs.anchor .* must be one of views, mean, got 'average'"
    ):
        AttentionNCE(cfg)


# Training with anchor: mean (gradients, K = B - 1 in the MI bound, validation metrics) is
# checked in tests/plugin/methods/test_health.py's one in-process run, to keep a single slow test.
