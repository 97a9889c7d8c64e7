"""``mocov3_attentionnce``: solo-learn's MoCo v3 whose loss switches to AttentionNCE (our design:
the authors' code has only the SimCLR form)."""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Dict, Sequence

import torch
from solo.methods.base import BaseMethod, BaseMomentumMethod
from solo.methods.mocov3 import MoCoV3

from attnce_plugin.losses import attentionnce_mocov3_loss_func, gather, world_and_rank
from attnce_plugin.methods.common import AttentionNCECommon
from attnce_plugin.settings import MoCoV3AttentionNCEKwargs, MoCoV3Loss


def _as_mocov3(factory: Callable[..., Any], method: str, *args: Any, **kwargs: Any) -> Any:
    return factory("mocov3", *args, **kwargs)


class MoCoV3AttentionNCE(AttentionNCECommon, MoCoV3):
    """MoCo v3 with ``method_kwargs.loss``: ``mocov3`` is solo-learn's step for step (positive
    crops dropped); ``attentionnce`` pulls each query towards the attention prototype of the
    momentum keys of the other anchor view and of the M positive crops, which go through the
    momentum network only. Settings: :class:`attnce_plugin.settings.MoCoV3AttentionNCEKwargs`.
    """

    KWARGS = MoCoV3AttentionNCEKwargs
    BASE_LOSS = "mocov3"

    @property
    def _BACKBONES(self) -> Dict[str, Callable[..., Any]]:
        """solo-learn's backbone factories (``BaseMethod.__init__`` builds from them) called with
        method ``"mocov3"``: its ViT factories build MoCo v3's ViT only for that name (ResNets
        ignore it)."""
        return {name: partial(_as_mocov3, f) for name, f in BaseMethod._BACKBONES.items()}

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        anchor_batch, positive_crops = self.split_batch(batch)
        kw = self.kwargs
        if kw.loss == MoCoV3Loss.mocov3:
            return super().training_step(anchor_batch, batch_idx)
        # MoCoV3.training_step is this plus MoCo v3's loss (solo/methods/mocov3.py:196-216):
        # skip to its parent. The two symmetric terms follow it.
        out = BaseMomentumMethod.training_step(self, anchor_batch, batch_idx)
        queries, keys = out["q"], out["momentum_k"]
        # momentum_forward is no_grad: the positives' keys are targets, like MoCo's keys.
        positive_keys = self.forward_positives(self.momentum_forward, positive_crops, "k")
        labels, logs = anchor_batch[2], self.logs_attention(batch_idx)
        options = dict(key_in_prototype=kw.key_in_prototype, return_attention=logs)
        options.update(self.loss_kwargs, labels=self.oracle_labels(labels))
        outs = [
            attentionnce_mocov3_loss_func(queries[v], keys[1 - v], positive_keys, **options)
            for v in (0, 1)
        ]
        if logs:
            # Both terms' candidates are the gathered keys, in the order of the gathered labels.
            outs, calls = zip(*outs)
            self.log_attention(calls, labels.repeat(2), gather(labels, False))
        contrastive_loss = outs[0] + outs[1]
        # Same key as solo-learn's MoCo v3: both share dashboards.
        self.log("train_contrastive_loss", contrastive_loss, on_epoch=True, sync_dist=True)
        # In nats per query: the 2 * tau scale divided out, the mean of the two terms.
        nats = contrastive_loss / (4 * kw.temperature)
        self.log_representation(out["z"], nats, world_and_rank()[0] * len(queries[0]) - 1)
        return contrastive_loss + out["loss"]
