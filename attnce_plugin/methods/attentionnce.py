"""``attentionnce``: AttentionNCE in the SimCLR framework (the paper's), as a solo-learn method."""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F
from omegaconf import DictConfig
from solo.losses.simclr import simclr_loss_func
from solo.methods.base import BaseMethod
from solo.methods.simclr import SimCLR

from attnce_plugin.losses import attentionnce_loss_func, gather, world_and_rank
from attnce_plugin.methods.common import AttentionNCECommon
from attnce_plugin.settings import Anchor, AttentionNCEKwargs, AttentionNCELoss, Projector


class AttentionNCE(AttentionNCECommon, SimCLR):
    """AttentionNCE, SimCLR form: 2 anchor crops and M positive crops per image, one network:
    solo-learn's SimCLR with its step replaced. The anchors go through ``forward`` (the online
    classifier and kNN see them), the positives through ``multicrop_forward`` (backbone and
    projector). Settings: :class:`attnce_plugin.settings.AttentionNCEKwargs`.
    """

    KWARGS = AttentionNCEKwargs
    BASE_LOSS = "simclr"

    def __init__(self, cfg: DictConfig):
        super().__init__(cfg)
        kw = self.kwargs
        if kw.projector == Projector.mlp_bn:  # the authors' projector, from the HCL/DCL code base
            self.projector = nn.Sequential(
                nn.Linear(self.features_dim, kw.proj_hidden_dim, bias=False),
                nn.BatchNorm1d(kw.proj_hidden_dim),
                nn.ReLU(),
                nn.Linear(kw.proj_hidden_dim, kw.proj_output_dim),
            )

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        anchor_batch, positive_crops = self.split_batch(batch)
        indexes, labels = anchor_batch[0], anchor_batch[2]
        # SimCLR.training_step is this with loss: simclr (solo/methods/simclr.py:117-147): skip
        # to its parent.
        out = BaseMethod.training_step(self, anchor_batch, batch_idx)
        z, kw = out["z"], self.kwargs
        if kw.loss != AttentionNCELoss.simclr:
            positives = self.forward_positives(self.multicrop_forward, positive_crops, "z")
        views = list(z)
        if kw.loss == AttentionNCELoss.attentionnce:
            if kw.anchor == Anchor.mean:
                # The rebuttal's AttentionNCE*: the mean of the image's anchor views, normalised
                # first so that a view with a larger norm does not dominate.
                views = [torch.stack([F.normalize(v, dim=-1) for v in z]).mean(dim=0)]
            logs = self.logs_attention(batch_idx)
            nce_loss = attentionnce_loss_func(
                torch.cat(views),
                positives,
                indexes,
                **self.loss_kwargs,
                labels=self.oracle_labels(labels),
                return_attention=logs,
            )
            if logs:
                nce_loss, weights = nce_loss
                # The candidates are the gathered anchors, view-major like the local ones.
                labels = labels.repeat(len(views))
                self.log_attention([weights], labels, gather(labels, False))
        else:
            # SimCLR's loss on the anchors, or on every view (the baseline that sees the same views
            # without the attention).
            if kw.loss == AttentionNCELoss.simclr_all_views:
                views += list(positives.unbind(1))
            nce_loss = simclr_loss_func(
                torch.cat(views), indexes.repeat(len(views)), temperature=kw.temperature
            )
        # Same key as solo-learn's SimCLR: both share dashboards.
        self.log("train_nce_loss", nce_loss, on_epoch=True, sync_dist=True)
        self.log_representation(z, nce_loss, len(views) * (world_and_rank()[0] * len(indexes) - 1))
        return nce_loss + out["loss"]
