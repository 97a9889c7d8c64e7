"""The losses leave the process's float32 matmul precision (TF32) alone, and TF32 matmuls (what a
GPU run with ``high`` precision gets) move the loss little.
"""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
import torch

from attnce_plugin.solo_compat import require_solo

require_solo()


from attnce_plugin.losses import (  # noqa: E402
    attentionnce_loss_func,
    attentionnce_loss_with_attention,
    attentionnce_mocov3_loss_func,
    attentionnce_mocov3_loss_with_attention,
)


def _precision_state() -> Dict[str, Any]:
    """Every process-wide switch of float32 matmul / convolution precision this torch has."""
    state: Dict[str, Any] = {"float32_matmul_precision": torch.get_float32_matmul_precision()}
    backends = torch.backends
    for name, obj, attr in (
        ("cuda.matmul.allow_tf32", backends.cuda.matmul, "allow_tf32"),
        ("cuda.matmul.fp32_precision", backends.cuda.matmul, "fp32_precision"),
        (
            "cuda.matmul.allow_fp16_rr",
            backends.cuda.matmul,
            "allow_fp16_reduced_precision_reduction",
        ),
        (
            "cuda.matmul.allow_bf16_rr",
            backends.cuda.matmul,
            "allow_bf16_reduced_precision_reduction",
        ),
        ("cudnn.allow_tf32", backends.cudnn, "allow_tf32"),
        ("cudnn.fp32_precision", backends.cudnn, "fp32_precision"),
        ("mkldnn.fp32_precision", getattr(backends, "mkldnn", None), "fp32_precision"),
        ("fp32_precision", backends, "fp32_precision"),
    ):
        if obj is not None and hasattr(obj, attr):
            state[name] = getattr(obj, attr)
    return state


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["highest", "high", "medium"])
def test_losses_leave_matmul_precision_alone(precision, monkeypatch):
    """The losses follow the caller's float32 matmul precision (TF32 under "high" on a GPU; see
    docs/reliability.md) and never set it, not even for a moment."""
    calls: List[str] = []
    original = torch.get_float32_matmul_precision()
    set_precision = torch.set_float32_matmul_precision
    try:
        set_precision(precision)
        before = _precision_state()
        monkeypatch.setattr(torch, "set_float32_matmul_precision", calls.append)
        g = torch.Generator().manual_seed(0)
        b, m, d = 8, 3, 16
        anchors = torch.randn(2 * b, d, generator=g, requires_grad=True)
        positives = torch.randn(b, m, d, generator=g, requires_grad=True)
        q, k, pk = (
            torch.randn(*s, generator=g, requires_grad=True) for s in ((b, d), (b, d), (b, m, d))
        )
        losses = [
            attentionnce_loss_func(anchors, positives, torch.arange(b), 0.5, 1.0, 10.0),
            attentionnce_loss_with_attention(
                anchors, positives, torch.arange(b), 0.5, 1.0, 0.5
            ).loss,
            attentionnce_mocov3_loss_func(q, k, pk, 0.2, 1.0, 1.0),
            attentionnce_mocov3_loss_with_attention(q, k, pk, 0.2, 1.0, 1.0).loss,
        ]
        torch.stack(losses).sum().backward()  # backward's matmuls run outside the calls
        assert calls == []
        assert _precision_state() == before
    finally:
        set_precision(original)


class _TF32Matmuls(torch.overrides.TorchFunctionMode):
    """Rounds every fp32 input of a matmul to TF32's 10-bit mantissa (round to nearest even), with
    fp32 accumulation: what float32_matmul_precision("high") makes a GPU's tensor cores do."""

    MATMULS = {
        torch.mm,
        torch.bmm,
        torch.addmm,
        torch.matmul,
        torch.Tensor.__matmul__,
        torch.Tensor.matmul,
        torch.Tensor.mm,
        torch.Tensor.bmm,
    }

    @staticmethod
    def round(x: Any) -> Any:
        if not (isinstance(x, torch.Tensor) and x.dtype == torch.float32):
            return x
        bits = x.contiguous().view(torch.int32)
        bits = (bits + 0x0FFF + ((bits >> 13) & 1)) & ~0x1FFF
        return bits.view(torch.float32).view(x.shape)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.MATMULS:
            args = tuple(self.round(a) for a in args)
        return func(*args, **(kwargs or {}))


@pytest.mark.gpu
@pytest.mark.parametrize("tau,d_neg", [(0.5, 10.0), (0.05, 0.05)])
def test_tf32_matmuls_move_the_loss_little(tau, d_neg):
    """CPU emulation of TF32 in the loss's forward matmuls: the loss moves by < 1e-4 relative
    (measured 5e-7 to 3e-5; docs/reliability.md). The cost and the gradients on a real GPU are
    scripts/gpu_check.sh's to measure."""
    g = torch.Generator().manual_seed(0)
    b, m, d = 256, 4, 128
    base = torch.randn(b, d, generator=g)
    anchors = torch.cat([base + 0.5 * torch.randn(b, d, generator=g) for _ in range(2)])
    positives = base.unsqueeze(1) + 0.8 * torch.randn(b, m, d, generator=g)
    calls = [
        lambda: attentionnce_loss_func(anchors, positives, torch.arange(b), tau, 1.0, d_neg),
        lambda: attentionnce_mocov3_loss_func(anchors[:b], anchors[b:], positives, tau, 1.0, d_neg),
    ]
    for call in calls:
        fp32 = call()
        with _TF32Matmuls():
            tf32 = call()
        assert tf32 != fp32  # the emulation reached the loss's matmuls
        assert abs(float(tf32 - fp32)) < 1e-4 * abs(float(fp32))
