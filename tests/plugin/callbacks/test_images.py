"""Naming unreadable images (attnce_plugin/callbacks/images.py, ``diagnostics.name_unreadable_images``):
a truncated file's error names it, in-process and through the real ``main_pretrain.py``.

Needs solo-learn >= 1.0.6 with its checkout; FAILS (not skips) without it. CPU only.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from attnce_plugin.solo_compat import require_solo

require_solo()

from helpers.configs import pretrain_argv  # noqa: E402
from helpers.images import make_image_folder  # noqa: E402
from helpers.scripts import find_checkpoints, run_script  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402

from attnce_plugin.callbacks.images import (  # noqa: E402
    NameUnreadableImages,
    PathNamingLoader,
    UnreadableImageError,
    name_unreadable_images,
)

pytestmark = pytest.mark.integration  # trains through solo-learn or runs its scripts


def _corrupt_copy(good: Path, bad: Path) -> Path:
    """A PNG cut in half: PIL opens the header, then fails to decode without naming the file."""
    data = good.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    return bad


def test_truncated_image_error_names_the_file(tmp_path):
    root = make_image_folder(tmp_path / "imgs", num_classes=2, per_class=2)
    bad = _corrupt_copy(root / "class0" / "0.png", root / "class1" / "broken.png")
    (root / "class1" / "junk.png").write_bytes(b"not an image")

    plain = ImageFolder(str(root))
    idx = plain.samples.index((str(bad), 1))
    with pytest.raises(OSError) as raw:
        plain[idx]
    assert str(bad) not in str(raw.value)  # what PIL alone says: no file name

    dataset = name_unreadable_images(ImageFolder(str(root)))
    assert name_unreadable_images(dataset).loader is dataset.loader  # idempotent, no nesting
    for path in (bad, root / "class1" / "junk.png"):
        i = [p for p, _ in dataset.samples].index(str(path))
        named = re.escape(f"cannot read image file '{path}'")
        with pytest.raises(UnreadableImageError, match=named) as err:
            dataset[i]
        assert isinstance(err.value.__cause__, OSError)  # PIL's own error stays in the chain
    good_index = [p for p, _ in dataset.samples].index(str(root / "class0" / "0.png"))
    assert dataset[good_index][0].size == plain[good_index][0].size  # good images unchanged
    # DataLoader workers started with "spawn" pickle the dataset.
    assert isinstance(pickle.loads(pickle.dumps(dataset)).loader, PathNamingLoader)


def test_unreadable_image_naming_covers_the_runs_loaders_and_patches_nothing(tmp_path):
    """The methods' callback wraps the datasets of the run's own train and val loaders (as
    Lightning holds them), idempotently; solo-learn's dataset functions stay unpatched, so its own
    methods and main_linear.py behave as without the plugin."""
    import solo.data.classification_dataloader as cls_data
    import solo.data.pretrain_dataloader as pre_data
    from lightning.pytorch.utilities import CombinedLoader
    from torch.utils.data import DataLoader

    root = make_image_folder(tmp_path / "imgs", num_classes=2, per_class=2)
    train, val = ImageFolder(str(root)), ImageFolder(str(root))

    class _Trainer:
        train_dataloader = CombinedLoader(DataLoader(train), "max_size_cycle")
        val_dataloaders = [DataLoader(val)]

    callback = NameUnreadableImages()
    callback.on_train_start(_Trainer(), None)
    callback.on_validation_start(_Trainer(), None)
    callback.on_validation_start(_Trainer(), None)  # idempotent: no nesting
    assert isinstance(train.loader, PathNamingLoader) and isinstance(val.loader, PathNamingLoader)
    assert not isinstance(val.loader.loader, PathNamingLoader)
    for fn in (pre_data.prepare_datasets, cls_data.prepare_datasets):
        assert not hasattr(fn, "__attnce_original__")


def test_main_pretrain_names_unreadable_image(tmp_path):
    # 8 images, batch 4, 2 batches: every image, the broken one included, is read in epoch 0.
    root = make_image_folder(tmp_path / "train", num_classes=2, per_class=4)
    bad = _corrupt_copy(root / "class0" / "0.png", root / "class1" / "3.png")
    ckpt_dir = tmp_path / "ckpt"
    argv = pretrain_argv("custom", "attentionnce_multicrop.yaml", {"train": root}, ckpt_dir)
    proc = run_script(argv + ["augmentations.1.num_crops=1"], tmp_path, check=False, threads=1)
    assert proc.returncode != 0
    assert f"cannot read image file '{bad}'" in proc.stdout, proc.stdout[-3000:]
    assert "UnreadableImageError" in proc.stdout
    assert not find_checkpoints(ckpt_dir)
