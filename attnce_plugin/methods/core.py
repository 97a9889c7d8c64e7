"""What both AttentionNCE methods add to their solo-learn base class, written once.

``AttentionNCE = AttentionNCECore + solo-learn's BaseMethod`` and ``MoCoV3AttentionNCE =
AttentionNCECore + solo-learn's MoCoV3``; the method modules only say what differs (networks, which
forward the positives go through, the loss). The core:

* checks ``method_kwargs`` against the method's declared settings
  (:mod:`attnce_plugin.methods.settings`), the ``diagnostics`` keys and the crop roles that the
  ``parse_cfg`` wrapper recorded (:mod:`attnce_plugin.methods.crops`), in
  ``add_and_assert_specific_cfg``; refuses ``compile`` with ``sync_batchnorm`` when fitting;
* replaces the batch positions that solo-learn's DALI loader returns without
  ``dali.encode_indexes_into_labels`` by indexes unique across processes and nodes
  (:mod:`attnce_plugin.methods.indexes`), in ``split_batch``;
* leaves the positive crops to solo-learn's small-crop path, or, where the method must forward
  them itself (batched, with BatchNorm's running statistics frozen, or through the momentum
  network), hides them from solo-learn (:mod:`attnce_plugin.methods.positives`);
* logs the loss and the ``train_attn_*`` attention diagnostics every ``attention_log_every``
  batches;
* returns the callbacks switched on by the config's ``diagnostics:`` group from
  ``configure_callbacks()`` (:mod:`attnce_plugin.callbacks`).

List it first in the bases: its ``setup`` chains to solo-learn's.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple

import omegaconf
import torch
from lightning.pytorch.utilities import rank_zero_warn
from omegaconf import OmegaConf

from attnce_plugin.callbacks import check_diagnostics, diagnostic_callbacks
from attnce_plugin.methods.compiling import compile_submodules
from attnce_plugin.methods.crops import check_num_crops, hide_positive_crops, read_crop_layout
from attnce_plugin.methods.indexes import ENCODE_KEY, indexes_are_positional, unique_batch_indexes
from attnce_plugin.methods.positives import bn_running_stats_frozen, forward_crops
from attnce_plugin.methods.settings import Setting, apply_settings, check_compile_cfg
from attnce_plugin.solo_compat import require_knn_torchmetrics

Batch = Sequence[Any]


class AttentionNCECore:
    """Mixin of the two AttentionNCE methods (see the module docstring).

    Subclasses set :attr:`METHOD_NAME`, :attr:`SETTINGS`, :attr:`BASE_LOSS` (the ``loss`` value that
    selects solo-learn's own loss, for which positive crops are optional) and
    :attr:`COMPILED_MODULES`, and call :meth:`_init_core` at the end of ``__init__``.
    """

    METHOD_NAME: ClassVar[str]
    SETTINGS: ClassVar[Tuple[Setting, ...]]
    BASE_LOSS: ClassVar[str]
    COMPILED_MODULES: ClassVar[Tuple[str, ...]]

    # ----------------------------------------------------------------- configuration

    @classmethod
    def requires_positives(cls, cfg: omegaconf.DictConfig) -> bool:
        """Whether the config's loss needs positive crops (solo-learn's own loss does not)."""
        loss = OmegaConf.select(cfg, "method_kwargs.loss", default=None)
        return loss != cls.BASE_LOSS

    @classmethod
    def check_core_cfg(cls, cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
        """Check and complete ``method_kwargs`` in place; check the rest of what the methods read.

        Raises:
            MethodConfigError: a ``method_kwargs`` entry is unknown, missing or bad, or
                ``dali.encode_indexes_into_labels`` is not a bool.
            DiagnosticsConfigError: a bad ``diagnostics`` key.
            IncompatibleTorchmetricsError: ``knn_eval.enabled`` with torchmetrics >= 1.0.
            CropLayoutError: ``cfg.data`` lacks the crop roles of the ``parse_cfg`` wrapper.
        """
        apply_settings(cfg, cls.METHOD_NAME, cls.SETTINGS)
        # BaseMethod.__init__ builds solo-learn's kNN right after this returns; without this check
        # torchmetrics >= 1.0 fails there with a message that does not say what to install.
        if OmegaConf.select(cfg, "knn_eval.enabled", default=False):
            require_knn_torchmetrics("knn_eval.enabled=True", "set knn_eval.enabled=False")
        read_crop_layout(cfg, require_positives=cls.requires_positives(cfg))
        indexes_are_positional(cfg)  # refuses a non-bool flag before any training step
        check_diagnostics(cfg)
        return cfg

    def setup(self, stage: str) -> None:
        """Refuse ``compile`` with ``sync_batchnorm`` when fitting, before any training step.

        Only here: Lightning installs SyncBatchNorm only when fitting, so a checkpoint saved with
        both settings still loads for evaluation (kNN, UMAP).
        """
        if stage == "fit":
            check_compile_cfg(self.cfg, self.METHOD_NAME)  # type: ignore[attr-defined]
        super().setup(stage)  # type: ignore[misc]

    def _init_core(self, cfg: omegaconf.DictConfig) -> None:
        """Read the shared settings, hide the positive crops from solo-learn if the method forwards
        them itself (:meth:`forwards_positives`), compile if asked."""
        kwargs = cfg.method_kwargs
        self.loss_name: str = str(kwargs.loss)
        self.temperature: float = float(kwargs.temperature)
        self.d_pos: float = float(kwargs.d_pos)
        self.d_neg: float = float(kwargs.d_neg)
        self.batch_positives: bool = bool(kwargs.batch_positives)
        self.positives_update_bn: bool = bool(kwargs.positives_update_bn)
        self.attention_log_every: int = int(kwargs.attention_log_every)
        #: What the representation-health callback reads of the last step (see log_contrastive).
        self.last_contrastive: Optional[Dict[str, Any]] = None
        self.positional_indexes: bool = indexes_are_positional(cfg)
        num_nodes = int(OmegaConf.select(cfg, "num_nodes", default=1) or 1)
        if self.positional_indexes and num_nodes > 1:
            # One node needs no word: there the positions are already unique and equal ours.
            rank_zero_warn(
                f"data.format=dali without {ENCODE_KEY}: solo-learn's DALI loader numbers the "
                "images of each batch arange(b) + local_rank * b, the same numbers on each of the "
                f"{num_nodes} nodes. {self.METHOD_NAME} replaces them by arange(b) + global_rank "
                "* b, unique across nodes, so its loss and logged K are right; solo-learn's own "
                "methods (e.g. simclr) on this config would drop 2 * (nodes - 1) negatives per "
                f"anchor. Set {ENCODE_KEY}=True (data_format=dali does) for real dataset indexes."
            )
        self.num_positive_crops: int = int(cfg.data.num_small_crops)
        #: Whether the method forwards the positives itself (else solo-learn's small-crop path).
        self.hides_positives: bool = self.forwards_positives()
        if self.hides_positives:
            hide_positive_crops(self)
        if kwargs.compile:
            compile_submodules(self, self.COMPILED_MODULES)

    def forwards_positives(self) -> bool:
        """Whether the positives must skip solo-learn's own small-crop path (``multicrop_forward``
        per crop, inside ``BaseMethod.training_step``): to be batched, to leave BatchNorm's
        running statistics alone, or because the loss does not use them (the base loss)."""
        return (
            self.batch_positives or not self.positives_update_bn or self.loss_name == self.BASE_LOSS
        )

    def configure_callbacks(self) -> List[Any]:
        """The callbacks the config's ``diagnostics:`` group switches on
        (:mod:`attnce_plugin.callbacks`); Lightning adds them to the trainer's."""
        return diagnostic_callbacks(self.cfg)  # type: ignore[attr-defined]

    # ----------------------------------------------------------------- training step pieces

    def split_batch(self, batch: Batch) -> Tuple[List[Any], List[torch.Tensor]]:
        """``(batch for solo-learn's step, the positive crops the method forwards itself)``.

        With :attr:`hides_positives` solo-learn gets the 2 anchors and the method the M positives;
        otherwise solo-learn gets every crop and the method none. The indexes come back unique
        across processes and nodes: batch positions from solo-learn's DALI loader without index
        encoding are replaced (:meth:`batch_indexes`).

        Args:
            batch: ``[indexes [b], [crop_0 .. crop_{1+M}], targets [b]]``; crops 0-1 are anchors.

        Raises:
            ValueError: the batch holds another number of crops than the augmentations configure.
        """
        indexes, crops, targets = batch
        crops = [crops] if isinstance(crops, torch.Tensor) else list(crops)
        num_anchors = self.num_large_crops  # type: ignore[attr-defined]
        check_num_crops(crops, num_anchors, self.num_positive_crops)
        indexes = self.batch_indexes(indexes)
        if not self.hides_positives:
            return [indexes, crops, targets], []
        return [indexes, crops[:num_anchors], targets], crops[num_anchors:]

    def batch_indexes(self, indexes: torch.Tensor) -> torch.Tensor:
        """The sample indexes the loss gets for a batch's loader indexes [b].

        Real dataset indexes pass through unchanged; DALI's batch positions (``data.format: dali``
        without ``dali.encode_indexes_into_labels``) become ``arange(b) + global_rank * b``
        (:func:`attnce_plugin.methods.indexes.unique_batch_indexes`).

        Returns:
            [b] indexes, unique across every process of the global batch.
        """
        if not self.positional_indexes:
            return indexes
        rank = int(self.global_rank)  # type: ignore[attr-defined]
        return unique_batch_indexes(int(indexes.shape[0]), rank, indexes.device)

    def forward_positives(
        self, forward: Callable[[torch.Tensor], Dict[str, torch.Tensor]], crops: List[torch.Tensor]
    ) -> List[Dict[str, torch.Tensor]]:
        """``forward`` on each positive crop (or once per crop size with ``batch_positives``),
        without touching BatchNorm's running statistics unless ``positives_update_bn``; for the
        methods that forward the positives themselves (:attr:`hides_positives`)."""
        with bn_running_stats_frozen(self, not self.positives_update_bn):  # type: ignore[arg-type]
            return forward_crops(forward, crops, self.batch_positives)

    def attention_due(self, batch_idx: int) -> bool:
        """Whether this batch logs the ``train_attn_*`` diagnostics (every epoch's first does)."""
        return batch_idx % self.attention_log_every == 0

    def log_contrastive(
        self,
        key: str,
        loss: torch.Tensor,
        attention: Optional[Dict[str, torch.Tensor]],
        anchor_views: Sequence[torch.Tensor],
        nce_nats: torch.Tensor,
        num_negatives: int,
    ) -> None:
        """Log the loss and the ``train_attn_*`` values; keep what the representation-health
        callback reads (:attr:`last_contrastive`, detached).

        Args:
            key: the loss's log key (solo-learn's for the base method, shared dashboards).
            loss: the scalar contrastive loss.
            attention: diagnostics from :func:`attnce_plugin.attention.attention_stats`, or None.
            anchor_views: the 2 anchor views' projections [b, d] (alignment).
            nce_nats: the loss in nats per anchor (MI bound).
            num_negatives: K per anchor (MI bound).
        """
        log = self.log  # type: ignore[attr-defined]
        log(key, loss, on_epoch=True, sync_dist=True)
        for name, value in (attention or {}).items():
            reduce = "max" if name == "max_beta" else "mean"
            log(f"train_attn_{name}", value, on_epoch=True, sync_dist=True, reduce_fx=reduce)
        self.last_contrastive = {
            "anchor_views": [z.detach() for z in anchor_views[:2]],
            "nce_nats": nce_nats.detach(),
            "num_negatives": num_negatives,
        }
