"""``mocov3_attentionnce``: solo-learn's MoCo v3 whose loss switches to AttentionNCE (our design:
the authors' code has only the SimCLR form)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Mapping, Sequence

from solo.methods.base import BaseMethod, BaseMomentumMethod
from solo.methods.mocov3 import MoCoV3

from attnce_plugin.losses import attentionnce_mocov3_loss_func, gather, world_and_rank
from attnce_plugin.methods.common import AttentionNCECommon
from attnce_plugin.settings import MoCoV3AttentionNCEKwargs, MoCoV3Loss


class _AsMoCoV3(Mapping):
    """solo-learn's backbone factories, called with method ``"mocov3"``: its ViT factories build
    MoCo v3's ViT only for that name (ResNets ignore it). Looked up at each access, so backbones
    registered later are seen too."""

    def __getitem__(self, name: str) -> Callable[..., Any]:
        factory = BaseMethod._BACKBONES[name]
        return lambda method, *args, **kwargs: factory("mocov3", *args, **kwargs)

    def __iter__(self) -> Iterator[str]:
        return iter(BaseMethod._BACKBONES)

    def __len__(self) -> int:
        return len(BaseMethod._BACKBONES)


class MoCoV3AttentionNCE(AttentionNCECommon, MoCoV3):
    """MoCo v3 with ``method_kwargs.loss``: ``mocov3`` is solo-learn's step for step (positive
    crops dropped); ``attentionnce`` pulls each query towards the attention prototype of the
    momentum keys of the other anchor view and of the M positive crops, which go through the
    momentum network only. Settings: :class:`attnce_plugin.settings.MoCoV3AttentionNCEKwargs`.
    """

    KWARGS = MoCoV3AttentionNCEKwargs
    BASE_LOSS = "mocov3"
    _BACKBONES = _AsMoCoV3()

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> Dict[str, Any]:
        anchor_batch, positive_crops = self.split_batch(batch)
        kw = self.kwargs
        if kw.loss == MoCoV3Loss.mocov3:
            return {"loss": super().training_step(anchor_batch, batch_idx)}
        # MoCoV3.training_step is this plus MoCo v3's loss (solo/methods/mocov3.py:196-216):
        # skip to its parent. The two symmetric terms follow it.
        out = BaseMomentumMethod.training_step(self, anchor_batch, batch_idx)
        queries, keys = out["q"], out["momentum_k"]
        # momentum_forward is no_grad: the positives' keys are targets, like MoCo's keys.
        positive_keys = self.forward_positives(self.momentum_forward, positive_crops, "k")
        due = self.attention_due(batch_idx)
        labels = anchor_batch[2]
        losses, weights = [], []
        for q, k in ((0, 1), (1, 0)):
            result = attentionnce_mocov3_loss_func(
                queries[q],
                keys[k],
                positive_keys,
                kw.temperature,
                kw.d_pos,
                kw.d_neg,
                kw.neg_weighting,
                key_in_prototype=kw.key_in_prototype,
                return_attention=due,
            )
            losses.append(result[0] if due else result)
            # The candidates are the gathered keys, in the order of the gathered labels.
            weights += [(result[1], labels, gather(labels, False))] if due else []
        if weights:
            self.log_attention(weights)
        contrastive_loss = losses[0] + losses[1]
        # Same key as solo-learn's MoCo v3: both share dashboards.
        self.log("train_contrastive_loss", contrastive_loss, on_epoch=True, sync_dist=True)
        # In nats per query: the 2 * tau scale divided out, the mean of the two terms.
        nats = contrastive_loss.detach() / (4 * kw.temperature)
        num_negatives = world_and_rank()[0] * len(queries[0]) - 1
        return self.step_output(contrastive_loss + out["loss"], out["z"], nats, num_negatives)
