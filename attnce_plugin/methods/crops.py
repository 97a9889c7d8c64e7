"""Which of solo-learn's crops are AttentionNCE anchors and which are positives.

solo-learn builds the crops of a sample from the ``augmentations:`` list in order and hands the
model ``[crop_0 .. crop_{n-1}]``. Its ``parse_cfg`` calls every pipeline at the first pipeline's
``crop_size`` "large", and ``main_pretrain.py`` refuses anything but 2 large crops. AttentionNCE
needs 2 anchors plus M positives, and in the paper's setting the positives have the anchors' size,
so solo-learn's count would be 6 large crops. This module fixes the roles by position instead:

* anchors = the first 2 crops, which must be exactly the leading pipeline(s) at the first
  pipeline's crop size;
* positives = every later crop, at the anchors' size (the paper) or smaller (multi-crop).

The ``parse_cfg`` wrapper (:func:`attnce_plugin.patches.wrap_pretrain_parse_cfg`) resolves the
roles once and records ``data.num_large_crops = 2`` and ``data.num_small_crops = M``; solo-learn
then sends the positives through ``multicrop_forward``, unless the method forwards them itself
(:func:`hide_positive_crops`). Layouts that would silently swap roles are refused with a message
that says what to change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence, Tuple

import omegaconf
import torch

from attnce_plugin.checks import check_int_at_least

#: AttentionNCE (and MoCo v3) use exactly two anchor views per image.
NUM_ANCHORS = 2


class CropLayoutError(ValueError):
    """The ``augmentations:`` list cannot be read as 2 anchor crops followed by positive crops."""


@dataclass(frozen=True)
class CropLayout:
    """Roles of the crops produced by a solo-learn ``augmentations:`` list.

    Attributes:
        anchor_size: crop size of the 2 anchor crops (the first pipeline's ``crop_size``).
        positive_sizes: crop size of each positive crop, in the order the model receives them;
            its length is M.
    """

    anchor_size: int
    positive_sizes: Tuple[int, ...]

    @property
    def num_anchors(self) -> int:
        """Always :data:`NUM_ANCHORS`."""
        return NUM_ANCHORS

    @property
    def num_positives(self) -> int:
        """M, the number of positive crops per image."""
        return len(self.positive_sizes)

    @property
    def multicrop(self) -> bool:
        """Whether some positive crop is smaller than the anchors."""
        return any(size != self.anchor_size for size in self.positive_sizes)


def _get(pipeline: Any, key: str, index: int, minimum: int = 1) -> int:
    """Read an integer ``key`` >= ``minimum`` of pipeline ``index`` (DictConfig or dict)."""
    try:
        value = pipeline[key]
    except (KeyError, TypeError, AttributeError):
        value = None
    return check_int_at_least(f"augmentations[{index}].{key}", value, minimum, CropLayoutError)


def resolve_crop_layout(
    augmentations: Sequence[Mapping[str, Any]], *, require_positives: bool = True
) -> CropLayout:
    """Assign anchor and positive roles to the crops of a solo-learn ``augmentations:`` list.

    Args:
        augmentations: the pipelines, in order; each needs integer ``crop_size`` and ``num_crops``.
        require_positives: refuse a layout without positive crops (False only for MoCo v3's own
            loss, which uses the anchors alone).

    Returns:
        The :class:`CropLayout`.

    Raises:
        CropLayoutError: not 2 anchors, no positive crop (when required), or a pipeline larger
            than the anchors / an anchor-size pipeline after a smaller one.
    """
    if augmentations is None or len(augmentations) == 0:
        raise CropLayoutError(
            "augmentations is empty: AttentionNCE needs a pipeline with num_crops: 2 (the anchors) "
            "followed by one with num_crops: 4 (the positives)"
        )
    sizes = [_get(p, "crop_size", i) for i, p in enumerate(augmentations)]
    # A positive pipeline may have 0 crops (the shipped configs' views.num_positives=0, used with
    # solo-learn's own losses); the anchors' pipeline may not.
    counts = [_get(p, "num_crops", i, minimum=0 if i else 1) for i, p in enumerate(augmentations)]
    anchor_size = sizes[0]

    # Leading pipelines at the anchors' size, up to 2 crops: those are the anchors.
    num_anchor_crops, first_positive = 0, 0
    while (
        first_positive < len(sizes)
        and sizes[first_positive] == anchor_size
        and num_anchor_crops < NUM_ANCHORS
    ):
        num_anchor_crops += counts[first_positive]
        first_positive += 1
    if num_anchor_crops < NUM_ANCHORS:
        raise CropLayoutError(
            f"the anchors are the first {NUM_ANCHORS} crops, at the first pipeline's crop_size "
            f"{anchor_size}, but only {num_anchor_crops} crop(s) of that size lead the augmentations "
            f"list (crop sizes {sizes}, num_crops {counts}); set num_crops: {NUM_ANCHORS} in "
            "augmentations[0]"
        )
    if num_anchor_crops > NUM_ANCHORS:
        raise CropLayoutError(
            f"the anchors must be exactly the first {NUM_ANCHORS} crops in pipeline(s) of their own, "
            f"but augmentations[0:{first_positive}] hold {num_anchor_crops} crops of size "
            f"{anchor_size}; split it into a pipeline with num_crops: {NUM_ANCHORS} (anchors) "
            f"followed by one with num_crops: {num_anchor_crops - NUM_ANCHORS} (positives)"
        )

    positive_sizes = []
    smallest_seen = None
    for i in range(first_positive, len(sizes)):
        size = sizes[i]
        if size > anchor_size:
            raise CropLayoutError(
                f"augmentations[{i}] has crop_size {size}, larger than the anchors' {anchor_size} "
                "(augmentations[0]): a small pipeline comes before a large one. List the pipeline "
                "of the largest crops first with num_crops: 2 (the anchors), then the positives"
            )
        if size == anchor_size and smallest_seen is not None:
            raise CropLayoutError(
                f"augmentations[{i}] (crop_size {size}, the anchors' size) comes after "
                f"augmentations[{smallest_seen}] (crop_size {sizes[smallest_seen]}): a small "
                "pipeline comes before a large one. Move the pipelines at the anchors' crop_size "
                "before the smaller ones"
            )
        if size < anchor_size and smallest_seen is None:
            smallest_seen = i
        positive_sizes.extend([size] * counts[i])

    if require_positives and not positive_sizes:
        raise CropLayoutError(
            f"no positive crop: augmentations only holds the {NUM_ANCHORS} anchors. Add a pipeline "
            f"after them with num_crops: 4 at crop_size {anchor_size} (the paper's setting) or "
            "smaller (multi-crop)"
        )
    return CropLayout(anchor_size=anchor_size, positive_sizes=tuple(positive_sizes))


def read_crop_layout(cfg: omegaconf.DictConfig, *, require_positives: bool = True) -> int:
    """M, as the ``parse_cfg`` wrapper recorded it in ``cfg.data`` (2 large crops, M small ones).

    The layout is resolved once, by :func:`attnce_plugin.patches.wrap_pretrain_parse_cfg`; a
    checkpoint's ``args.json`` holds its result too.

    Raises:
        CropLayoutError: ``cfg.data`` does not hold the wrapper's result, or holds no positive
            crop when they are required.
    """
    data = cfg.get("data") or {}
    large, small = data.get("num_large_crops"), data.get("num_small_crops")
    if large != NUM_ANCHORS or isinstance(small, bool) or not isinstance(small, int) or small < 0:
        raise CropLayoutError(
            f"data.num_large_crops={large!r}, data.num_small_crops={small!r}: the crop roles are "
            f"set by the plugin's parse_cfg ({NUM_ANCHORS} anchors, M positives). Run the config "
            "through attnce_plugin.patches.wrap_pretrain_parse_cfg(solo.args.pretrain.parse_cfg) "
            "(the shipped configs' Hydra callback does so in main_pretrain.py)"
        )
    if require_positives and small == 0:
        raise CropLayoutError(
            "no positive crop (data.num_small_crops=0): the loss needs M >= 1 positive crops "
            "after the 2 anchors"
        )
    return small


def hide_positive_crops(method: Any) -> None:
    """Make solo-learn's ``BaseMethod.training_step`` see the 2 anchors alone.

    For methods that forward the positives themselves (the MoCo form; ``batch_positives``;
    ``positives_update_bn: false``; a loss that does not use them): no small crops, no
    ``multicrop_forward`` loop (``solo/methods/base.py:247-251,510-516``).
    """
    method.num_small_crops = 0
    method.num_crops = method.num_large_crops
    method.multicrop = False


def check_num_crops(crops: Sequence[torch.Tensor], num_anchors: int, num_positives: int) -> None:
    """Refuse a batch whose crop count is not the configured anchors + positives.

    solo-learn asserts the count itself; the methods here forward the positives on their own, so
    they repeat the check with a message that says where the count comes from.

    Raises:
        ValueError: the batch holds a different number of crops.
    """
    if len(crops) != num_anchors + num_positives:
        raise ValueError(
            f"the batch holds {len(crops)} crops, but the augmentations configure "
            f"{num_anchors} anchors + {num_positives} positives; the data pipeline and the model "
            "were built from different augmentations lists"
        )
