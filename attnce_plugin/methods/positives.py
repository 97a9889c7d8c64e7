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
"""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

import torch

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
