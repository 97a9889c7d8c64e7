"""``attentionnce``: AttentionNCE in the SimCLR framework (the paper's), as a solo-learn method."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from omegaconf import DictConfig
from solo.losses.simclr import simclr_loss_func
from solo.methods.base import BaseMethod

from attnce_plugin.losses import attentionnce_loss_func, gather, world_and_rank
from attnce_plugin.methods.common import AttentionNCECommon
from attnce_plugin.settings import Anchor, AttentionNCEKwargs, AttentionNCELoss, Projector


def build_projector(kind: Projector, in_dim: int, hidden_dim: int, out_dim: int) -> nn.Module:
    """``mlp``: solo-learn's SimCLR projector (``solo/methods/simclr.py``); ``mlp_bn``: the
    authors' (Linear without bias, BatchNorm1d, ReLU, Linear), from the HCL/DCL code base."""
    if kind == Projector.mlp:
        return nn.Sequential(
            nn.Linear(in_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, out_dim)
        )
    return nn.Sequential(
        nn.Linear(in_dim, hidden_dim, bias=False),
        nn.BatchNorm1d(hidden_dim),
        nn.ReLU(),
        nn.Linear(hidden_dim, out_dim),
    )


def mean_anchor(anchor_views: Sequence[torch.Tensor]) -> torch.Tensor:
    """The rebuttal's AttentionNCE* anchor: the mean of an image's L2-normalised anchor views
    (normalised first, so that a view with a larger norm does not dominate)."""
    return torch.stack([F.normalize(z, dim=-1) for z in anchor_views]).mean(dim=0)


class AttentionNCE(AttentionNCECommon, BaseMethod):
    """AttentionNCE, SimCLR form: 2 anchor crops and M positive crops per image, one network.

    The anchors go through ``forward`` (the online classifier and kNN see them, as in SimCLR),
    the positives through ``multicrop_forward`` (backbone and projector). Settings:
    :class:`attnce_plugin.settings.AttentionNCEKwargs`.
    """

    KWARGS = AttentionNCEKwargs
    BASE_LOSS = "simclr"

    def __init__(self, cfg: DictConfig):
        super().__init__(cfg)
        kw = self.kwargs
        self.projector = build_projector(
            kw.projector, self.features_dim, kw.proj_hidden_dim, kw.proj_output_dim
        )

    @property
    def learnable_params(self) -> List[Dict[str, Any]]:
        return super().learnable_params + [
            {"name": "projector", "params": self.projector.parameters()}
        ]

    def forward(self, X: torch.Tensor) -> Dict[str, Any]:
        out = super().forward(X)
        out["z"] = self.projector(out["feats"])
        return out

    def multicrop_forward(self, X: torch.Tensor) -> Dict[str, Any]:
        out = super().multicrop_forward(X)
        out["z"] = self.projector(out["feats"])
        return out

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> Dict[str, Any]:
        anchor_batch, positive_crops = self.split_batch(batch)
        indexes = anchor_batch[0]
        out = super().training_step(anchor_batch, batch_idx)
        z, kw = out["z"], self.kwargs
        images = world_and_rank()[0] * len(indexes)
        if kw.loss == AttentionNCELoss.attentionnce:
            positives = self.forward_positives(self.multicrop_forward, positive_crops, "z")
            anchors = mean_anchor(z) if kw.anchor == Anchor.mean else torch.cat(z)
            per_image = 1 if kw.anchor == Anchor.mean else 2
            args = (anchors, positives, indexes, kw.temperature, kw.d_pos, kw.d_neg)
            if self.attention_due(batch_idx):
                nce_loss, w = attentionnce_loss_func(*args, kw.neg_weighting, return_attention=True)
                # The candidates are the gathered anchors, view-major like the local ones.
                labels = anchor_batch[2].repeat(per_image)
                self.log_attention([(w, labels, gather(labels, False))])
            else:
                nce_loss = attentionnce_loss_func(*args, kw.neg_weighting)
        else:
            # solo-learn's SimCLR.training_step (solo/methods/simclr.py:136-141): on the anchors,
            # or on every view (the baseline that sees the same views without the attention).
            views = list(z)
            if kw.loss == AttentionNCELoss.simclr_all_views:
                positives = self.forward_positives(self.multicrop_forward, positive_crops, "z")
                views += list(positives.unbind(1))
            nce_loss = simclr_loss_func(
                torch.cat(views), indexes.repeat(len(views)), temperature=kw.temperature
            )
            per_image = len(views)
        # Same key as solo-learn's SimCLR: both share dashboards.
        self.log("train_nce_loss", nce_loss, on_epoch=True, sync_dist=True)
        return self.step_output(nce_loss + out["loss"], z, nce_loss, per_image * images - per_image)
