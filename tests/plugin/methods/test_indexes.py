"""attnce_plugin/methods/indexes.py: DALI's batch positions replaced by indexes unique across
processes and nodes, against hand-written expected values."""

from __future__ import annotations

import pytest
import torch

from attnce_plugin.solo_compat import require_solo

require_solo()

from omegaconf import OmegaConf  # noqa: E402

from attnce_plugin.methods import MethodConfigError  # noqa: E402
from attnce_plugin.methods.indexes import indexes_are_positional, unique_batch_indexes  # noqa: E402


def test_unique_indexes_are_offset_by_the_global_rank():
    assert unique_batch_indexes(3, 0).tolist() == [0, 1, 2]
    # 2 nodes x 2 processes, b = 3: solo-learn's DALI loader gives local_rank * b, so ranks 0 and
    # 2 (local rank 0 on each node) would both hold 0, 1, 2.
    got = [unique_batch_indexes(3, rank).tolist() for rank in range(4)]
    assert got == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    assert unique_batch_indexes(2, 5).dtype == torch.long
    with pytest.raises(ValueError, match="batch_size >= 1 and global_rank >= 0"):
        unique_batch_indexes(0, 1)
    with pytest.raises(ValueError, match="global_rank=-1"):
        unique_batch_indexes(2, -1)


@pytest.mark.parametrize(
    "cfg,positional",
    [
        ({"data": {"format": "image_folder"}}, False),
        ({"data": {"format": "dali"}}, True),  # solo-learn's default: no index encoding
        ({"data": {"format": "dali"}, "dali": {"encode_indexes_into_labels": False}}, True),
        ({"data": {"format": "dali"}, "dali": {"encode_indexes_into_labels": True}}, False),
    ],
)
def test_positional_indexes_are_dali_without_encoding(cfg, positional):
    assert indexes_are_positional(OmegaConf.create(cfg)) is positional


def test_non_bool_encoding_flag_is_refused():
    cfg = OmegaConf.create(
        {"data": {"format": "dali"}, "dali": {"encode_indexes_into_labels": "no"}}
    )
    with pytest.raises(MethodConfigError, match="must be true or false, got 'no' of type str"):
        indexes_are_positional(cfg)
