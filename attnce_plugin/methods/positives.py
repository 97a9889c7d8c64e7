"""Forward passes of the M positive crops: one call per crop, or one call per crop size.

solo-learn sends every crop through the network on its own (``BaseMethod.training_step`` calls
``multicrop_forward`` once per small crop), so with M positive crops a step makes M backbone calls
of b images each. ``method_kwargs.batch_positives: true`` concatenates the positive crops that have
the same shape and makes one call of M*b images instead: the same arithmetic in fewer, larger
kernels, which is what makes small-crop steps cheap on a CPU or a launch-bound GPU.

What it changes: BatchNorm (in train mode) normalises the batched positives with statistics over
all M*b images instead of b images per crop, and its running statistics get one update per size
group instead of one per crop. The anchors are never batched with the positives, so the online
classifier and kNN see exactly solo-learn's per-crop statistics. Its effect on accuracy is measured
in docs/performance.md.

``method_kwargs.positives_update_bn: false`` keeps the positive crops out of BatchNorm's running
statistics (they are still normalised with their own batch statistics in training). solo-learn
updates the running statistics with every crop, so with small positive crops the statistics that
evaluation uses (kNN, linear probe, checkpoints) become a mixture dominated by crops of another
size than the images evaluated: see :func:`bn_running_stats_frozen`.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Dict, Iterator, List, Sequence, Tuple

import torch
import torch.nn as nn

#: A network call on a batch of crops, returning a dict of per-image outputs ([b, ...] each).
CropForward = Callable[[torch.Tensor], Dict[str, torch.Tensor]]


def group_by_shape(crops: Sequence[torch.Tensor]) -> List[List[int]]:
    """Indexes of the crops that share a shape, groups in order of first appearance.

    Args:
        crops: tensors [b, C, h, w] (any shapes).

    Returns:
        One list of indexes into ``crops`` per distinct shape, e.g. ``[[0, 1, 3], [2]]``.
    """
    groups: Dict[Tuple[int, ...], List[int]] = {}
    for i, crop in enumerate(crops):
        groups.setdefault(tuple(crop.shape), []).append(i)
    return list(groups.values())


def forward_crops(
    forward: CropForward, crops: Sequence[torch.Tensor], batched: bool
) -> List[Dict[str, torch.Tensor]]:
    """Run ``forward`` on each crop, or once per group of same-shape crops.

    Args:
        forward: the network call (e.g. a method's ``multicrop_forward`` or
            ``momentum_forward``); every output must be a tensor with the batch as dim 0.
        crops: M tensors [b, C, h, w].
        batched: False: M calls of [b, C, h, w] (solo-learn's behaviour). True: one call of
            [g * b, C, h, w] per group of g same-shape crops, split back per crop.

    Returns:
        M dicts, ``outs[i]`` holding crop i's outputs ([b, ...] each), in the order of ``crops``.
    """
    if not batched:
        return [forward(crop) for crop in crops]
    outs: List[Dict[str, torch.Tensor]] = [{} for _ in crops]
    for group in group_by_shape(crops):
        if len(group) == 1:
            outs[group[0]] = forward(crops[group[0]])
            continue
        joined = forward(torch.cat([crops[i] for i in group]))
        for key, value in joined.items():
            # Same-shape crops hold the same number of images, so equal chunks are exact.
            for i, part in zip(group, value.chunk(len(group))):
                outs[i][key] = part
    return outs


@contextmanager
def bn_running_stats_frozen(module: nn.Module, frozen: bool = True) -> Iterator[None]:
    """Within the block, BatchNorm layers of ``module`` do not change their running statistics.

    Train-mode BatchNorm still normalises with the batch's own statistics; only the running mean,
    variance and batch counter (what eval mode and checkpoints use) are restored on exit, so
    forward passes inside the block leave no trace in them. Backward passes do not touch them.

    Args:
        module: the network (e.g. the method, its backbone or momentum backbone).
        frozen: False makes this a no-op (solo-learn's behaviour: every forward updates them).
    """
    if not frozen:
        yield
        return
    saved = [
        (m, m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone())
        for m in module.modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
        and m.track_running_stats
        and m.running_mean is not None
    ]
    try:
        yield
    finally:
        # Through ``.data``, like BatchNorm's own kernel update: the same tensors (DDP keeps
        # references to the buffers) without bumping their autograd version counters, which the
        # graph of this step's forward passes checks in backward.
        for m, mean, var, count in saved:
            m.running_mean.data.copy_(mean)
            m.running_var.data.copy_(var)
            m.num_batches_tracked.data.copy_(count)
