"""What both AttentionNCE methods add to their solo-learn base class, written once.

``AttentionNCE = AttentionNCECore + solo-learn's BaseMethod`` and ``MoCoV3AttentionNCE =
AttentionNCECore + solo-learn's MoCoV3``; the method modules only say what differs (networks, which
forward the positives go through, the loss). The core:

* checks ``method_kwargs`` against the method's declared settings
  (:mod:`attnce_plugin.methods.settings`), refuses what cannot run (``compile`` with
  ``sync_batchnorm``, ``knn_eval`` with a torchmetrics that breaks solo-learn's kNN) and resolves
  the crop roles (:mod:`attnce_plugin.methods.crops`), in ``add_and_assert_specific_cfg``;
* loads checkpoints onto the device that the CLI wrappers ask for
  (:func:`default_map_location`, :meth:`AttentionNCECore.load_from_checkpoint`);
* replaces the batch positions that solo-learn's DALI loader returns without
  ``dali.encode_indexes_into_labels`` by indexes unique across processes and nodes
  (:mod:`attnce_plugin.methods.indexes`), in ``split_batch``;
* hides the M positive crops from solo-learn's training step and forwards them itself, per crop or
  batched, with BatchNorm's running statistics frozen when asked
  (:mod:`attnce_plugin.methods.positives`);
* logs the loss, the attention diagnostics every ``attention_log_every`` batches and the
  representation-health values (:mod:`attnce_plugin.methods.health`);
* returns the Lightning callbacks of a run from ``configure_callbacks()``: the finite-loss guard
  (:mod:`attnce_plugin.methods.guard`) and the naming of unreadable images
  (:mod:`attnce_plugin.methods.images`).

List it first in the bases: it overrides solo-learn's ``base_validation_step`` (the hook solo-learn
documents for that) and ``on_validation_epoch_end``, and chains to them.
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Any, Callable, ClassVar, Dict, Iterator, List, Optional, Sequence, Tuple

import omegaconf
import torch
from lightning.pytorch.utilities import rank_zero_warn
from omegaconf import OmegaConf

from attnce_plugin.callbacks import check_diagnostics, diagnostic_callbacks
from attnce_plugin.methods.compiling import compile_submodules
from attnce_plugin.methods.crops import apply_crop_layout, check_num_crops, take_positive_crops
from attnce_plugin.methods.guard import FiniteLossGuard
from attnce_plugin.methods.health import ValidationSample, representation_health, train_health
from attnce_plugin.methods.images import NameUnreadableImages
from attnce_plugin.methods.indexes import ENCODE_KEY, indexes_are_positional, unique_batch_indexes
from attnce_plugin.methods.positives import bn_running_stats_frozen, forward_crops
from attnce_plugin.methods.settings import Setting, apply_settings, check_compile_cfg
from attnce_plugin.solo_compat import require_knn_torchmetrics

Batch = Sequence[Any]

#: What ``load_from_checkpoint`` maps the checkpoint's tensors to when its caller passes no
#: ``map_location`` (None: Lightning's default, the device they were saved from).
_DEFAULT_MAP_LOCATION: ContextVar[Any] = ContextVar("attnce_default_map_location", default=None)
#: True while :meth:`AttentionNCECore.load_from_checkpoint` builds a model (evaluation, not fitting).
_LOADING_CHECKPOINT: ContextVar[bool] = ContextVar("attnce_loading_checkpoint", default=False)


@contextlib.contextmanager
def default_map_location(location: Any) -> Iterator[None]:
    """Within the block, the methods' ``load_from_checkpoint`` calls that pass no ``map_location``
    use ``location`` (anything ``torch.load`` takes: ``"cuda"``, a device, a dict, a callable).

    The CLI wrappers need this because solo-learn's ``main_knn.py`` loads without a map location
    (so a CPU-trained checkpoint stays on the CPU) and then sends ``.cuda()`` batches to the model.
    """
    token = _DEFAULT_MAP_LOCATION.set(location)
    try:
        yield
    finally:
        _DEFAULT_MAP_LOCATION.reset(token)


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
        """Check and complete ``method_kwargs``, then set the crop roles, in place.

        Raises:
            MethodConfigError: a ``method_kwargs`` entry is unknown, missing or bad, or
                ``compile: true`` with ``sync_batchnorm: True`` for a model that will be fitted,
                or ``dali.encode_indexes_into_labels`` is not a bool.
            IncompatibleTorchmetricsError: ``knn_eval.enabled`` with torchmetrics >= 1.0.
            CropLayoutError: the augmentations are not 2 anchors followed by positives.
        """
        apply_settings(cfg, cls.METHOD_NAME, cls.SETTINGS)
        # Lightning installs SyncBatchNorm only when fitting: a checkpoint loaded for evaluation
        # (kNN, UMAP) never has it, so loading one saved with both settings stays possible.
        if not _LOADING_CHECKPOINT.get():
            check_compile_cfg(cfg, cls.METHOD_NAME)
        # BaseMethod.__init__ builds solo-learn's kNN right after this returns; without this check
        # torchmetrics >= 1.0 fails there with a message that does not say what to install.
        if OmegaConf.select(cfg, "knn_eval.enabled", default=False):
            require_knn_torchmetrics("knn_eval.enabled=True", "set knn_eval.enabled=False")
        apply_crop_layout(cfg, require_positives=cls.requires_positives(cfg))
        indexes_are_positional(cfg)  # refuses a non-bool flag before any training step
        check_diagnostics(cfg)
        return cfg

    @classmethod
    def load_from_checkpoint(
        cls, checkpoint_path: Any, map_location: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        """Lightning's ``load_from_checkpoint``, with ``map_location`` defaulting to the one set by
        :func:`default_map_location` (Lightning's default, the saving device, outside it).

        Lightning moves the model to the device of the loaded tensors, so this decides where the
        model lives. Arguments as Lightning's (``hparams_file``, ``strict``, ``cfg=...``).
        """
        if map_location is None:
            map_location = _DEFAULT_MAP_LOCATION.get()
        token = _LOADING_CHECKPOINT.set(True)
        try:
            return super().load_from_checkpoint(  # type: ignore[misc]
                checkpoint_path, map_location, *args, **kwargs
            )
        finally:
            _LOADING_CHECKPOINT.reset(token)

    def _init_core(self, cfg: omegaconf.DictConfig) -> None:
        """Read the shared settings, take the positive crops from solo-learn, compile if asked."""
        kwargs = cfg.method_kwargs
        self.loss_name: str = str(kwargs.loss)
        self.temperature: float = float(kwargs.temperature)
        self.d_pos: float = float(kwargs.d_pos)
        self.d_neg: float = float(kwargs.d_neg)
        self.batch_positives: bool = bool(kwargs.batch_positives)
        self.positives_update_bn: bool = bool(kwargs.positives_update_bn)
        self.attention_log_every: int = int(kwargs.attention_log_every)
        self.finite_guard = FiniteLossGuard(
            self.METHOD_NAME, int(kwargs.finite_check_every), self._describe_settings
        )
        self.val_sample = ValidationSample()
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
        # The methods forward the positives themselves; solo-learn sees the 2 anchors only.
        self.num_positive_crops: int = take_positive_crops(self)
        if kwargs.compile:
            compile_submodules(self, self.COMPILED_MODULES)

    def _describe_settings(self) -> str:
        """The settings the finite-loss guard prints."""
        cfg = self.cfg  # type: ignore[attr-defined]
        keys = ("temperature", "d_pos", "d_neg", "loss")
        kwargs = ", ".join(f"{k}={cfg.method_kwargs[k]}" for k in keys if k in cfg.method_kwargs)
        opt = OmegaConf.select(cfg, "optimizer", default={}) or {}
        return (
            f"method={self.METHOD_NAME}, method_kwargs: {kwargs}; optimizer={opt.get('name')}, "
            f"lr={opt.get('lr')}, batch_size={opt.get('batch_size')}, "
            f"precision={OmegaConf.select(cfg, 'precision', default=None)}"
        )

    def configure_callbacks(self) -> List[Any]:
        """The finite-loss guard, the naming of unreadable images and the callbacks the config's
        ``diagnostics:`` group switches on (:mod:`attnce_plugin.callbacks`); Lightning adds them."""
        return [self.finite_guard, NameUnreadableImages(), *diagnostic_callbacks(self.cfg)]

    # ----------------------------------------------------------------- training step pieces

    def split_batch(self, batch: Batch) -> Tuple[List[Any], List[torch.Tensor]]:
        """``(anchor batch for solo-learn's step, the M positive crops)`` of a training batch.

        The indexes come back unique across processes and nodes: batch positions from
        solo-learn's DALI loader without index encoding are replaced (:meth:`batch_indexes`).

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
        without touching BatchNorm's running statistics unless ``positives_update_bn``."""
        with bn_running_stats_frozen(self, not self.positives_update_bn):  # type: ignore[arg-type]
            return forward_crops(forward, crops, self.batch_positives)

    def attention_due(self, batch_idx: int) -> bool:
        """Whether this batch logs the ``train_attn_*`` diagnostics (every epoch's first does)."""
        return batch_idx % self.attention_log_every == 0

    def record_loss(self, loss: torch.Tensor) -> None:
        """Hand the step's loss to the finite-loss guard (no host sync)."""
        trainer = getattr(self, "_trainer", None)
        self.finite_guard.record(loss, int(trainer.global_step) if trainer is not None else 0)

    def log_contrastive(
        self,
        key: str,
        loss: torch.Tensor,
        attention: Optional[Dict[str, torch.Tensor]],
        anchor_views: Sequence[torch.Tensor],
        nce_nats: torch.Tensor,
        num_negatives: int,
    ) -> None:
        """Record the loss for the guard and log it, the attention and the training health.

        Args:
            key: the loss's log key (solo-learn's for the base method, shared dashboards).
            loss: the scalar contrastive loss.
            attention: diagnostics from :func:`attnce_plugin.attention.attention_stats`, or None.
            anchor_views: the 2 anchor views' projections [b, d] (alignment).
            nce_nats: the loss in nats per anchor (MI bound).
            num_negatives: K per anchor (MI bound).
        """
        self.record_loss(loss)
        log = self.log  # type: ignore[attr-defined]
        log(key, loss, on_epoch=True, sync_dist=True)
        for name, value in (attention or {}).items():
            reduce = "max" if name == "max_beta" else "mean"
            log(f"train_attn_{name}", value, on_epoch=True, sync_dist=True, reduce_fx=reduce)
        for name, value in train_health(anchor_views, nce_nats, num_negatives).items():
            log(f"train_repr_{name}", value, on_epoch=True, sync_dist=True)

    # ----------------------------------------------------------------- validation health

    def _sanity_checking(self) -> bool:
        trainer = getattr(self, "_trainer", None)
        return bool(trainer is not None and trainer.sanity_checking)

    def base_validation_step(self, X: torch.Tensor, targets: torch.Tensor) -> Dict[str, Any]:
        """solo-learn's step, plus keeping this batch's features and projections for the
        ``val_repr_*`` values (a fixed random subset, see :class:`ValidationSample`)."""
        out = super().base_validation_step(X, targets)  # type: ignore[misc]
        if not self._sanity_checking():
            with torch.no_grad():
                feats = out["feats"].detach()
                kept = {"feats": feats.float().cpu()}
                projector = getattr(self, "projector", None)
                if projector is not None:
                    kept["z"] = projector(feats).float().cpu()
            self.val_sample.add(kept)
        return out

    def on_validation_epoch_end(self) -> None:
        """Log ``val_repr_{feats,z}_{uniformity,eff_rank}``, then solo-learn's epoch end.

        Under DDP each process measures its own shard and Lightning averages the values.
        """
        if self.val_sample.size >= 2:
            for kind, x in self.val_sample.kept.items():
                for name, value in representation_health(x).items():
                    self.log(  # type: ignore[attr-defined]
                        f"val_repr_{kind}_{name}",
                        value.to(self.device),  # type: ignore[attr-defined]
                        sync_dist=True,
                    )
        self.val_sample.reset()
        super().on_validation_epoch_end()  # type: ignore[misc]
