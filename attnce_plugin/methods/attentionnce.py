"""``attentionnce``: AttentionNCE in the SimCLR framework, as a solo-learn method."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import omegaconf
import torch
import torch.nn as nn
import torch.nn.functional as F
from solo.methods.base import BaseMethod

from attnce_plugin.attention import attention_stats
from attnce_plugin.distributed import world_size
from attnce_plugin.losses import attentionnce_loss_func
from attnce_plugin.methods.common import (
    DEFAULT_FINITE_CHECK_EVERY,
    RUN_KWARG_DEFAULTS,
    FiniteLossGuard,
    RepresentationHealth,
    apply_crop_layout,
    check_choice_kwarg,
    check_method_kwargs,
    check_num_crops,
    check_positive_int_kwarg,
    check_positive_kwargs,
    check_run_kwargs,
    log_train_health,
    take_positive_crops,
)
from attnce_plugin.methods.compiling import compile_submodules
from attnce_plugin.methods.positives import bn_running_stats_frozen, forward_crops

#: Values of ``method_kwargs.anchor`` (see :class:`AttentionNCE`).
ANCHOR_MODES: Tuple[str, ...] = ("views", "mean")


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


class AttentionNCE(FiniteLossGuard, RepresentationHealth, BaseMethod):
    """AttentionNCE (SimCLR form): 2 anchor crops and M positive crops per image, one network.

    Extra cfg settings:
        method_kwargs:
            proj_hidden_dim (int): hidden width of the projector.
            proj_output_dim (int): dimension of the projections the loss compares.
            temperature (float): tau > 0 (the paper uses 0.5).
            d_pos (float): positive-attention scale > 0 (default 1.0).
            d_neg (float): negative-attention scale > 0 (default 1.0).
            anchor (str): ``views`` (default, the paper) or ``mean`` (the rebuttal's
                "AttentionNCE*"). ``views``: each of the 2 anchor crops is an anchor (2b anchors
                per process), and an anchor's negatives are the anchor crops of every other image
                (2B - 2). ``mean``: each image has ONE anchor, the mean of the L2-normalised
                projections of its 2 anchor crops (:func:`mean_anchor`); it is pulled towards the
                attention prototype of the same M positive crops, and its negatives are the other
                images' mean anchors (B - 1). Positives are never averaged into the anchor (an
                anchor containing its own positives would make the positive term trivial). The
                rebuttal averaged 4 views; solo-learn allows exactly 2 large crops, so here the
                mean is over the 2 anchor crops.
            finite_check_every (int): batches between host-side checks that the loss is finite
                (default 50; also checked at each epoch's last batch). A non-finite loss stops
                training with :class:`~attnce_plugin.methods.common.NonFiniteLossError`.
            batch_positives (bool): send the positive crops of one size through backbone +
                projector as one batch of M*b images instead of M batches of b (default false,
                solo-learn's per-crop behaviour). Faster, but BatchNorm then normalises the
                positives over M*b images; see :mod:`attnce_plugin.methods.positives`.
            positives_update_bn (bool): whether the positive crops' forward passes update
                BatchNorm's running statistics (default true, solo-learn's behaviour). Set false
                with positives smaller than the anchors, so that evaluation statistics come from
                anchor-size crops only; see :func:`~attnce_plugin.methods.positives.bn_running_stats_frozen`.
            attention_log_every (int): batches between two computations of the ``train_attn_*``
                diagnostics (default 10; 1 = every batch; every epoch's first batch is logged).
            compile (bool): ``torch.compile`` the backbone and projector in place (default false;
                checkpoints keep their keys); see :mod:`attnce_plugin.methods.compiling`.
        augmentations: the first 2 crops are the anchors, all later crops the positives (see
            :mod:`attnce_plugin.methods.crops`).

    Representation health (see :class:`~attnce_plugin.methods.common.RepresentationHealth`):
    ``train_repr_alignment`` (the 2 anchor views' projections) and ``train_repr_mi_bound``
    (``log(K + 1) - train_nce_loss``, K = 2B - 2 negatives per anchor, B - 1 with ``anchor: mean``)
    each step; ``val_repr_{feats,z}_{uniformity,eff_rank}`` at each validation end.

    The anchors go through ``forward`` (online linear probe and kNN see them, as for SimCLR); the
    positives go through ``multicrop_forward`` (backbone + projector, no classifier).
    """

    METHOD_NAME = "attentionnce"
    ALLOWED_KWARGS = (
        "proj_hidden_dim",
        "proj_output_dim",
        "temperature",
        "d_pos",
        "d_neg",
        "anchor",
        "finite_check_every",
        *RUN_KWARG_DEFAULTS,
    )

    def __init__(self, cfg: omegaconf.DictConfig):
        super().__init__(cfg)

        self.temperature: float = float(cfg.method_kwargs.temperature)
        self.d_pos: float = float(cfg.method_kwargs.d_pos)
        self.d_neg: float = float(cfg.method_kwargs.d_neg)
        self.anchor: str = str(cfg.method_kwargs.anchor)
        self.batch_positives: bool = bool(cfg.method_kwargs.batch_positives)
        self.positives_update_bn: bool = bool(cfg.method_kwargs.positives_update_bn)
        self.attention_log_every: int = int(cfg.method_kwargs.attention_log_every)
        self._init_finite_guard(cfg.method_kwargs.finite_check_every)
        self._init_repr_health()

        # training_step forwards the positives itself (one call per crop, or batched).
        self.num_positive_crops: int = take_positive_crops(self)

        proj_hidden_dim: int = cfg.method_kwargs.proj_hidden_dim
        proj_output_dim: int = cfg.method_kwargs.proj_output_dim
        # Same shape as solo-learn's SimCLR projector, so that results compare with SimCLR's.
        self.projector = nn.Sequential(
            nn.Linear(self.features_dim, proj_hidden_dim),
            nn.ReLU(),
            nn.Linear(proj_hidden_dim, proj_output_dim),
        )
        if cfg.method_kwargs.compile:
            compile_submodules(self, ("backbone", "projector"))

    @staticmethod
    def add_and_assert_specific_cfg(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
        """Fill defaults and refuse bad method_kwargs or crop layouts (see the class docstring).

        Raises:
            MethodConfigError: unknown/missing/out-of-range ``method_kwargs``, or an ``anchor``
                other than ``views`` / ``mean``.
            CropLayoutError: the augmentations are not 2 anchors followed by positives.
        """
        cfg = super(AttentionNCE, AttentionNCE).add_and_assert_specific_cfg(cfg)
        check_method_kwargs(
            cfg,
            AttentionNCE.METHOD_NAME,
            AttentionNCE.ALLOWED_KWARGS,
            required=("proj_hidden_dim", "proj_output_dim", "temperature"),
            defaults={
                "d_pos": 1.0,
                "d_neg": 1.0,
                "anchor": "views",
                "finite_check_every": DEFAULT_FINITE_CHECK_EVERY,
                **RUN_KWARG_DEFAULTS,
            },
        )
        check_choice_kwarg(cfg, AttentionNCE.METHOD_NAME, "anchor", ANCHOR_MODES)
        check_positive_kwargs(cfg, ("temperature", "d_pos", "d_neg"))
        check_positive_int_kwarg(cfg, "finite_check_every")
        check_run_kwargs(cfg)
        apply_crop_layout(cfg, require_positives=True)
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
        """AttentionNCE loss plus the online classifier's loss.

        Args:
            batch: ``[indexes [b], [crop_0 .. crop_{1+M}], targets [b]]``; crops 0-1 are anchors.
            batch_idx: index of the batch.

        Returns:
            Scalar total loss.
        """
        indexes, crops, targets = batch
        crops = [crops] if isinstance(crops, torch.Tensor) else list(crops)
        check_num_crops(crops, self.num_large_crops, self.num_positive_crops)
        # Anchors first, as solo-learn orders them (BatchNorm running statistics see them first).
        out = super().training_step([indexes, crops[: self.num_large_crops], targets], batch_idx)
        z = out["z"]
        with bn_running_stats_frozen(self, not self.positives_update_bn):
            positive_outs = forward_crops(
                self.multicrop_forward, crops[self.num_large_crops :], self.batch_positives
            )
        if self.anchor == "mean":
            anchors = mean_anchor(z)  # [b, d], one anchor per image
        else:
            anchors = torch.cat(z)  # [2b, d], view-major
        positives = torch.stack([o["z"] for o in positive_outs], dim=1)  # [b, M, d]

        log_attention_now = batch_idx % self.attention_log_every == 0
        result = attentionnce_loss_func(
            anchors,
            positives,
            indexes,
            temperature=self.temperature,
            d_pos=self.d_pos,
            d_neg=self.d_neg,
            return_attention=log_attention_now,
        )
        nce_loss = result[0] if log_attention_now else result
        self._record_loss(nce_loss)
        # Same key as solo-learn's SimCLR, so both methods share dashboards.
        self.log("train_nce_loss", nce_loss, on_epoch=True, sync_dist=True)
        if log_attention_now:
            log_attention(self, attention_stats(result[1]))
        global_images = world_size() * int(indexes.shape[0])
        per_image = 1 if self.anchor == "mean" else self.num_large_crops
        num_negatives = per_image * global_images - per_image  # all anchors but the image's own
        log_train_health(self, z, nce_loss, num_negatives)
        return nce_loss + out["loss"]


def log_attention(module: Any, stats: Dict[str, torch.Tensor]) -> None:
    """Log attention diagnostics as ``train_attn_<name>`` (``max_beta`` reduced with max)."""
    for name, value in stats.items():
        module.log(
            f"train_attn_{name}",
            value,
            on_epoch=True,
            sync_dist=True,
            reduce_fx="max" if name == "max_beta" else "mean",
        )
