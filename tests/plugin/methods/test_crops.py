"""attnce_plugin/methods/crops.py: the crop roles of an ``augmentations:`` list, against
hand-written expected layouts, and the refusals that name what to change."""

from __future__ import annotations

import pytest

from attnce_plugin.solo_compat import require_solo

require_solo()

from omegaconf import OmegaConf  # noqa: E402

from attnce_plugin.methods.crops import (  # noqa: E402
    CropLayout,
    CropLayoutError,
    read_crop_layout,
    resolve_crop_layout,
)


def _pipes(*spec):
    return [{"crop_size": size, "num_crops": n} for size, n in spec]


@pytest.mark.parametrize(
    "spec,expected",
    [
        (((32, 2), (32, 4)), CropLayout(32, (32, 32, 32, 32))),  # the paper's setting
        (((224, 2), (96, 4)), CropLayout(224, (96, 96, 96, 96))),  # multi-crop
        (((32, 1), (32, 1), (16, 2)), CropLayout(32, (16, 16))),  # MoCo: a pipeline per anchor
        (((32, 2), (32, 1), (16, 2)), CropLayout(32, (32, 16, 16))),  # mixed sizes, large first
        (((32, 2), (32, 0)), CropLayout(32, ())),  # views.num_positives=0, solo-learn's losses
    ],
)
def test_roles_are_read_by_position(spec, expected):
    layout = resolve_crop_layout(_pipes(*spec), require_positives=False)
    assert layout == expected
    assert layout.num_anchors == 2 and layout.num_positives == len(expected.positive_sizes)
    assert layout.multicrop == any(s != expected.anchor_size for s in expected.positive_sizes)


@pytest.mark.parametrize(
    "spec,message",
    [
        (((32, 1), (16, 4)), "set num_crops: 2 in augmentations[0]"),
        (((32, 6),), "split it into a pipeline with num_crops: 2 (anchors) followed by one with"),
        (((16, 2), (32, 4)), "augmentations[1] has crop_size 32, larger than the anchors' 16"),
        (((32, 2), (16, 2), (32, 2)), "augmentations[2] (crop_size 32, the anchors' size) comes"),
        (((32, 2),), "no positive crop"),
        (((32, 0), (32, 2)), "augmentations[0].num_crops must be an integer >= 1, got 0"),
        (((32, 2), (16, -1)), "augmentations[1].num_crops must be an integer >= 0, got -1"),
    ],
)
def test_layouts_that_would_swap_roles_are_refused(spec, message):
    with pytest.raises(CropLayoutError) as err:
        resolve_crop_layout(_pipes(*spec))
    assert message in str(err.value)


def test_empty_and_non_integer_pipelines_are_refused():
    with pytest.raises(CropLayoutError, match="augmentations is empty"):
        resolve_crop_layout([])
    bad = [{"crop_size": "32", "num_crops": 2}]
    with pytest.raises(CropLayoutError, match=r"augmentations\[0\].crop_size must be an integer"):
        resolve_crop_layout(bad)


def test_the_methods_read_what_the_parse_cfg_wrapper_recorded():
    cfg = OmegaConf.create({"data": {"num_large_crops": 2, "num_small_crops": 4}})
    assert read_crop_layout(cfg) == 4
    none = OmegaConf.create({"data": {"num_large_crops": 2, "num_small_crops": 0}})
    assert read_crop_layout(none, require_positives=False) == 0
    with pytest.raises(CropLayoutError, match="no positive crop"):
        read_crop_layout(none)
    # solo-learn's own count for the paper's layout: 6 large crops, the roles never set.
    unset = OmegaConf.create({"data": {"num_large_crops": 6, "num_small_crops": 0}})
    with pytest.raises(CropLayoutError, match="wrap_pretrain_parse_cfg"):
        read_crop_layout(unset)
