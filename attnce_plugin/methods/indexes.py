"""Sample indexes the losses can trust, whichever of solo-learn's loaders made the batch.

The SimCLR form masks its negatives by sample index (an anchor's own image and its other view are
never negatives), so the indexes of one global batch must be unique across every process of every
node. solo-learn's torchvision loaders return real dataset indexes, and so does its DALI loader with
``dali.encode_indexes_into_labels: True`` (what ``data_format=dali`` sets). Without that flag,
solo-learn's ``PretrainWrapper`` (``solo/data/dali_dataloader.py:646-655`` at commit 9187ea3)
returns the positions ``arange(b) + local_rank * b``: unique on one node, but every node repeats
them, so with N nodes each anchor would lose ``2 * (N - 1)`` negatives (the same positions on the
other nodes, taken for its own image) and the logged MI bound would use a K that the loss does not.

Positions carry no information about the images, so :func:`unique_batch_indexes` replaces them by
``arange(b) + global_rank * b``. DALI's sharded reader gives each process its own images and drops
incomplete batches, so a global batch never holds an image twice, every process has the same b, and
these indexes mask exactly what real dataset indexes would. The methods call it through
``AttentionNCECore.split_batch``, before any loss sees the batch.
"""

from __future__ import annotations

from typing import Union

import omegaconf
import torch
from omegaconf import OmegaConf

from attnce_plugin.methods.settings import MethodConfigError

#: The config key that makes solo-learn's DALI loader return real dataset indexes.
ENCODE_KEY = "dali.encode_indexes_into_labels"


def indexes_are_positional(cfg: omegaconf.DictConfig) -> bool:
    """Whether the config's training loader numbers the images of a batch by position.

    True for ``data.format: dali`` without ``dali.encode_indexes_into_labels`` (solo-learn's
    default, False); every other loader returns dataset indexes.

    Raises:
        MethodConfigError: ``dali.encode_indexes_into_labels`` is set but not a bool (a string
            such as ``"false"`` would be truthy inside solo-learn).
    """
    if OmegaConf.select(cfg, "data.format", default=None) != "dali":
        return False
    encode = OmegaConf.select(cfg, ENCODE_KEY, default=None)
    if encode is None:
        return True
    if not isinstance(encode, bool):
        raise MethodConfigError(
            f"{ENCODE_KEY} must be true or false, got {encode!r} of type {type(encode).__name__}; "
            "true (what data_format=dali sets) makes DALI return each image's dataset index"
        )
    return not encode


def unique_batch_indexes(
    batch_size: int, global_rank: int, device: Union[str, torch.device, None] = None
) -> torch.Tensor:
    """Indexes for the ``batch_size`` images of process ``global_rank``, unique across processes.

    ``arange(b) + global_rank * b``: the positions solo-learn's DALI loader gives without index
    encoding, offset by the global rank instead of the local one, so that no two processes of any
    node share an index (given, as DALI's drop-last policy ensures, the same b on every process).

    Args:
        batch_size: b, the images of this process's batch (>= 1).
        global_rank: this process's rank among all processes of all nodes (>= 0).
        device: where the indexes go (the batch's device).

    Returns:
        [b] int64 indexes.

    Raises:
        ValueError: ``batch_size < 1`` or ``global_rank < 0``.
    """
    if batch_size < 1 or global_rank < 0:
        raise ValueError(
            f"need batch_size >= 1 and global_rank >= 0, got batch_size={batch_size}, "
            f"global_rank={global_rank}"
        )
    return torch.arange(batch_size, dtype=torch.long, device=device) + global_rank * batch_size
