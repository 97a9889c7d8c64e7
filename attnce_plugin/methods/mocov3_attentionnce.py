"""``mocov3_attentionnce``: solo-learn's MoCo v3 with a switch to the AttentionNCE loss."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any, Callable, Iterator, Sequence

import omegaconf
import torch
from solo.methods.base import BaseMethod, BaseMomentumMethod
from solo.methods.mocov3 import MoCoV3

from attnce_plugin.attention import attention_stats, mean_stats
from attnce_plugin.distributed import world_size
from attnce_plugin.losses import (
    attentionnce_mocov3_loss_func,
    attentionnce_mocov3_loss_with_attention,
)
from attnce_plugin.methods.core import AttentionNCECore
from attnce_plugin.methods.settings import (
    MOCOV3_ATTENTIONNCE_SETTINGS,
    check_momentum_cfg,
    document_settings,
)

log = logging.getLogger(__name__)


class MoCoV3Backbones(Mapping):
    """solo-learn's backbone factories, each building the variant it builds for ``"mocov3"``.

    solo-learn's ViT factories pick MoCo v3's ViT only when the method name is ``"mocov3"``; our
    method has another name, so without this a ViT would silently get the plain variant (ResNets
    ignore the name). Looked up in ``BaseMethod._BACKBONES`` at each access, so a backbone that
    solo-learn (or a user) registers later is seen too.
    """

    def __getitem__(self, name: str) -> Callable[..., torch.nn.Module]:
        factory = BaseMethod._BACKBONES[name]

        @functools.wraps(factory)
        def build(method: str, *args: Any, **kwargs: Any) -> torch.nn.Module:
            return factory("mocov3", *args, **kwargs)

        return build

    def __iter__(self) -> Iterator[str]:
        return iter(BaseMethod._BACKBONES)

    def __len__(self) -> int:
        return len(BaseMethod._BACKBONES)


@document_settings
class MoCoV3AttentionNCE(AttentionNCECore, MoCoV3):
    """MoCo v3 whose loss is chosen by ``method_kwargs.loss`` (this project's design: the authors'
    public code has only the SimCLR form).

    With ``loss: attentionnce`` the query of each anchor view is pulled towards the attention
    prototype of the momentum keys of the other anchor view and of the M positive crops (which only
    go through the momentum network), and pushed from the other images' keys (K = B - 1) with beta
    re-weighting; the loss keeps MoCo v3's ``2 * temperature`` scale so its learning-rate recipes
    still apply (:func:`attnce_plugin.losses.attentionnce_mocov3_loss_func`). With
    ``loss: mocov3`` this is solo-learn's MoCo v3 step for step; positive crops, if the
    augmentations have any, are dropped before any forward pass.

    ``method_kwargs`` (on top of the ``momentum:`` block, ``base_tau`` and ``final_tau`` required
    with 0 <= base_tau <= final_tau <= 1, which solo-learn would silently default):

        {settings}
    """

    METHOD_NAME = "mocov3_attentionnce"
    SETTINGS = MOCOV3_ATTENTIONNCE_SETTINGS
    BASE_LOSS = "mocov3"
    COMPILED_MODULES = (
        "backbone",
        "projector",
        "predictor",
        "momentum_backbone",
        "momentum_projector",
    )
    # Build every backbone as solo-learn builds it for method "mocov3" (the MoCo v3 ViT).
    _BACKBONES = MoCoV3Backbones()

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)
        self._init_core(cfg)
        self.key_in_prototype: bool = bool(cfg.method_kwargs.key_in_prototype)
        if self.loss_name == "mocov3" and self.num_positive_crops:
            log.warning(
                "method_kwargs.loss=mocov3 ignores the %d positive crop(s) of the augmentations; "
                "remove them to save data-loading time",
                self.num_positive_crops,
            )

    def forwards_positives(self) -> bool:
        """Always: the positive crops never go through the online network (MoCo's positives are
        momentum keys). Hiding them from ``BaseMethod.training_step`` saves their online forward
        pass and keeps the online BatchNorm statistics exactly MoCo v3's."""
        return True

    @staticmethod
    def add_and_assert_specific_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
        """Fill defaults and refuse bad settings or crop layouts (see the class docstring).

        Raises:
            MethodConfigError: a bad ``method_kwargs`` entry, or ``momentum`` settings missing,
                unknown or outside 0 <= base_tau <= final_tau <= 1.
            CropLayoutError: the augmentations are not 2 anchors followed by positives
                (positives are optional with ``loss: mocov3``).
        """
        # Before solo-learn's BaseMomentumMethod fills momentum defaults over a missing block.
        check_momentum_cfg(cfg, MoCoV3AttentionNCE.METHOD_NAME)
        cfg = super(MoCoV3AttentionNCE, MoCoV3AttentionNCE).add_and_assert_specific_cfg(cfg)
        return MoCoV3AttentionNCE.check_core_cfg(cfg)

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        """MoCo v3's or AttentionNCE's contrastive loss plus the online classifier's loss.

        Args:
            batch: ``[indexes [b], [crop_0 .. crop_{1+M}], targets [b]]``; crops 0-1 are anchors.
            batch_idx: index of the batch.

        Returns:
            Scalar total loss.
        """
        anchor_batch, positive_crops = self.split_batch(batch)
        if self.loss_name == "mocov3":
            return super().training_step(anchor_batch, batch_idx)

        # MoCoV3.training_step is this plus MoCo v3's loss (solo/methods/mocov3.py:196-216, checked
        # by tests/plugin/test_solo_reliances.py): skip to its parent.
        # The two symmetric terms q1-k2 and q2-k1 follow solo-learn's MoCoV3.training_step.
        out = BaseMomentumMethod.training_step(self, anchor_batch, batch_idx)
        queries, keys = out["q"], out["momentum_k"]
        # momentum_forward is no_grad: the positives' keys are targets, like MoCo's keys.
        positive_outs = self.forward_positives(self.momentum_forward, positive_crops)
        positive_keys = torch.stack([o["k"] for o in positive_outs], dim=1)  # [b, M, d]

        pairs = ((0, 1), (1, 0))
        args = (positive_keys, self.temperature, self.d_pos, self.d_neg)
        kw = {"key_in_prototype": self.key_in_prototype}
        stats = None
        if self.attention_due(batch_idx):
            results = [
                attentionnce_mocov3_loss_with_attention(queries[q], keys[k], *args, **kw)
                for q, k in pairs
            ]
            losses = [r.loss for r in results]
            stats = mean_stats([attention_stats(r.attention) for r in results])
        else:
            losses = [
                attentionnce_mocov3_loss_func(queries[q], keys[k], *args, **kw) for q, k in pairs
            ]
        contrastive_loss = losses[0] + losses[1]
        # In nats per query (the 2 * tau scale divided out, mean of the two symmetric terms);
        # each query's negatives are the other images' keys.
        nce_nats = contrastive_loss.detach() / (2 * self.temperature) / 2
        num_negatives = world_size() * queries[0].shape[0] - 1
        # Same key as solo-learn's MoCo v3, so both losses share dashboards.
        self.log_contrastive(
            "train_contrastive_loss", contrastive_loss, stats, out["z"], nce_nats, num_negatives
        )
        return contrastive_loss + out["loss"]
