"""``attentionnce``: AttentionNCE in the SimCLR framework, as a solo-learn method."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import omegaconf
import torch
import torch.nn as nn
import torch.nn.functional as F
from solo.losses.simclr import simclr_loss_func
from solo.methods.base import BaseMethod

from attnce_plugin.attention import attention_stats
from attnce_plugin.distributed import world_size
from attnce_plugin.losses import attentionnce_loss_func, attentionnce_loss_with_attention
from attnce_plugin.methods.core import AttentionNCECore
from attnce_plugin.methods.settings import (
    ATTENTIONNCE_SETTINGS,
    MethodConfigError,
    document_settings,
)


def mean_anchor(anchor_views: Sequence[torch.Tensor]) -> torch.Tensor:
    """The anchor-mean variant's anchors ("AttentionNCE*"): one anchor per image.

    ``a_i = (1 / V) * sum_v z_{v,i} / ||z_{v,i}||``: the mean of the L2-normalised projections of
    image i's V anchor views. Each view is normalised before averaging because the loss compares
    directions only; averaging raw projections would let a view with a larger norm dominate. The
    mean is not re-normalised here; the loss normalises every anchor it gets.

    Args:
        anchor_views: V >= 1 tensors [b, d], the projections of anchor view v of the b images.

    Returns:
        [b, d] mean anchors (carry the gradient to every view).

    Raises:
        ValueError: no views, or views of different shapes.
    """
    if len(anchor_views) == 0:
        raise ValueError("mean_anchor needs at least one anchor view [b, d], got none")
    shapes = {tuple(z.shape) for z in anchor_views}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(
            f"anchor views must all be [b, d] of one shape, got {[list(z.shape) for z in anchor_views]}"
        )
    return torch.stack([F.normalize(z, dim=-1) for z in anchor_views]).mean(dim=0)


def build_projector(kind: str, in_dim: int, hidden_dim: int, out_dim: int) -> nn.Module:
    """The projector from backbone features [b, in_dim] to projections [b, out_dim].

    Args:
        kind: ``mlp``, solo-learn's SimCLR projector (Linear-ReLU-Linear, as in its
            ``solo/methods/simclr.py``), or ``mlp_bn``, the authors' (Linear without bias,
            BatchNorm1d, ReLU, Linear), which their code inherits from the HCL/DCL code base.
        in_dim: backbone feature size.
        hidden_dim: hidden width (the authors use 512).
        out_dim: projection size (the paper: 128).

    Raises:
        ValueError: unknown ``kind``.
    """
    if kind == "mlp":
        return nn.Sequential(
            nn.Linear(in_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, out_dim)
        )
    if kind == "mlp_bn":
        return nn.Sequential(
            nn.Linear(in_dim, hidden_dim, bias=False),
            nn.BatchNorm1d(hidden_dim),
            nn.ReLU(),
            nn.Linear(hidden_dim, out_dim),
        )
    raise ValueError(f"projector kind {kind!r}: allowed values are mlp, mlp_bn")


@document_settings
class AttentionNCE(AttentionNCECore, BaseMethod):
    """AttentionNCE (SimCLR form): 2 anchor crops and M positive crops per image, one network.

    Each anchor (both anchor crops of every image) is pulled towards the attention-weighted
    prototype of its image's M positive crops and pushed from the anchor crops of every other image
    in the global batch (2B - 2 negatives), re-weighted by the negative attention
    (:func:`attnce_plugin.losses.attentionnce_loss_func`). The anchors go through ``forward``
    (online linear probe and kNN see them, as for SimCLR); the positives through
    ``multicrop_forward`` (backbone + projector, no classifier).

    ``method_kwargs``:

        {settings}

    With ``loss: simclr`` this is solo-learn's SimCLR step (``simclr_loss_func`` on the 2 anchors,
    key ``train_nce_loss``) with this method's projector and recipe: the paper's SimCLR baseline.
    With ``loss: simclr_all_views`` it is solo-learn's SimCLR with the M positives as its small
    crops: ``simclr_loss_func`` on all 2 + M views of each image, every other view of the image a
    positive (summed inside the log) and the (2 + M)(B - 1) views of the other images negatives
    (AttentionNCE has 2B - 2): the baseline that sees the same views without the attention.
    The first 2 crops of ``augmentations`` are the anchors, all later crops the positives (see
    :mod:`attnce_plugin.methods.crops`).
    """

    METHOD_NAME = "attentionnce"
    SETTINGS = ATTENTIONNCE_SETTINGS
    BASE_LOSS = "simclr"
    COMPILED_MODULES = ("backbone", "projector")

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)
        kwargs = cfg.method_kwargs
        self.anchor: str = str(kwargs.anchor)
        self.projector = build_projector(
            kwargs.projector, self.features_dim, kwargs.proj_hidden_dim, kwargs.proj_output_dim
        )
        self._init_core(cfg)

    @staticmethod
    def add_and_assert_specific_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
        """Fill defaults and refuse bad ``method_kwargs`` or crop layouts (see the class doc).

        Raises:
            MethodConfigError: a bad ``method_kwargs`` entry, or ``anchor: mean`` with
                ``loss: simclr``.
            CropLayoutError: the augmentations are not 2 anchors followed by positives.
        """
        cfg = super(AttentionNCE, AttentionNCE).add_and_assert_specific_cfg(cfg)
        cfg = AttentionNCE.check_core_cfg(cfg)
        if cfg.method_kwargs.loss != "attentionnce" and cfg.method_kwargs.anchor != "views":
            raise MethodConfigError(
                "method_kwargs.anchor=mean needs method_kwargs.loss=attentionnce (solo-learn's "
                "SimCLR loss compares the 2 anchor views with each other); allowed with "
                "loss=simclr or simclr_all_views: anchor=views"
            )
        return cfg

    @property
    def learnable_params(self) -> List[Dict[str, Any]]:
        """The backbone and online classifier (from BaseMethod) plus the projector."""
        return super().learnable_params + [
            {"name": "projector", "params": self.projector.parameters()}
        ]

    def forward(self, X: torch.Tensor) -> Dict[str, Any]:
        """Backbone, online classifier and projector for an anchor crop.

        Args:
            X: [b, 3, H, W] images.

        Returns:
            The parent's outputs (``feats`` [b, F], ``logits``) plus ``z`` [b, proj_output_dim].
        """
        out = super().forward(X)
        out["z"] = self.projector(out["feats"])
        return out

    def multicrop_forward(self, X: torch.Tensor) -> Dict[str, Any]:
        """Backbone and projector for a positive crop (any size).

        Args:
            X: [b, 3, h, w] images.

        Returns:
            ``feats`` [b, F] and ``z`` [b, proj_output_dim].
        """
        out = super().multicrop_forward(X)
        out["z"] = self.projector(out["feats"])
        return out

    def training_step(self, batch: Sequence[Any], batch_idx: int) -> torch.Tensor:
        """AttentionNCE (or solo-learn's SimCLR) loss plus the online classifier's loss.

        Args:
            batch: ``[indexes [b], [crop_0 .. crop_{1+M}], targets [b]]``; crops 0-1 are anchors.
            batch_idx: index of the batch.

        Returns:
            Scalar total loss.
        """
        solo_batch, positive_crops = self.split_batch(batch)
        indexes = solo_batch[0]
        # Anchors first, as solo-learn orders them (BatchNorm running statistics see them first);
        # then, unless hidden, the positives through solo-learn's multicrop_forward, crop by crop.
        out = super().training_step(solo_batch, batch_idx)
        z = out["z"][: self.num_large_crops]
        images = world_size() * int(indexes.shape[0])
        if self.loss_name in ("simclr", "simclr_all_views"):
            # solo-learn's SimCLR.training_step: on the anchors, or on every view it forwarded.
            views = z if self.loss_name == "simclr" else list(out["z"])
            if self.loss_name == "simclr_all_views" and self.hides_positives:
                views += [
                    o["z"] for o in self.forward_positives(self.multicrop_forward, positive_crops)
                ]
            nce_loss = simclr_loss_func(
                torch.cat(views), indexes.repeat(len(views)), temperature=self.temperature
            )
            negatives = len(views) * images - len(views)
            self.log_contrastive("train_nce_loss", nce_loss, None, z, nce_loss, negatives)
            return nce_loss + out["loss"]

        if self.hides_positives:
            positive_z = [
                o["z"] for o in self.forward_positives(self.multicrop_forward, positive_crops)
            ]
        else:
            positive_z = out["z"][self.num_large_crops :]
        positives = torch.stack(positive_z, dim=1)  # [b, M, d]
        anchors = mean_anchor(z) if self.anchor == "mean" else torch.cat(z)  # [b or 2b, d]
        args = (anchors, positives, indexes, self.temperature, self.d_pos, self.d_neg)
        stats = None
        if self.attention_due(batch_idx):
            nce_loss, weights = attentionnce_loss_with_attention(*args)
            stats = attention_stats(weights)
        else:
            nce_loss = attentionnce_loss_func(*args)
        per_image = 1 if self.anchor == "mean" else self.num_large_crops
        num_negatives = per_image * images - per_image  # all anchors but the image's own
        # Same key as solo-learn's SimCLR, so both methods share dashboards.
        self.log_contrastive("train_nce_loss", nce_loss, stats, z, nce_loss, num_negatives)
        return nce_loss + out["loss"]
