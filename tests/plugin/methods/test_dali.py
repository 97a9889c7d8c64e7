"""The methods on batches from solo-learn's own DALI loader, on a CPU (no GPU needed).

The loader is built exactly as solo-learn builds it: the transforms as ``main_pretrain.py:105-115``
makes them from ``cfg.augmentations``, the pipeline by ``PretrainPipelineBuilder`` and the batches
by ``PretrainWrapper`` with the arguments ``PretrainDALIDataModule.setup``
(``solo/data/dali_dataloader.py:764-818``) passes. The one difference: the DALI pipeline gets
``device_id=None`` (DALI's CPU-only mode) where solo-learn passes the local rank, which needs a GPU.

Several processes and nodes are simulated by building one loader per (global rank, local rank),
sharded as solo-learn shards them; references are independent of the plugin: the file order solo
reads (sorted class folders, sorted files), and the file each crop came from, read back from its
pixels.

Needs solo-learn >= 1.0.6 and DALI (``scripts/setup_env.sh`` installs the pinned version): the
tests FAIL, not skip, without them.
"""

from __future__ import annotations

import re
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Tuple
from unittest import mock

import pytest
import torch

from attnce_plugin.solo_compat import require_solo

require_solo()
try:
    import nvidia.dali  # noqa: F401
except ImportError as err:  # a clear failure (not a skip) with the fix
    pytest.fail(
        f"DALI is not importable ({err}); run scripts/setup_env.sh, which installs the pinned "
        "nvidia-dali-cuda120 and the packages it needs without a GPU",
        pytrace=False,
    )

import numpy as np  # noqa: E402
from helpers.configs import compose_pretrain_cfg  # noqa: E402
from helpers.scripts import REPO_ROOT  # noqa: E402
from nvidia.dali.plugin.pytorch import LastBatchPolicy  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from PIL import Image  # noqa: E402
from solo.data.dali_dataloader import (  # noqa: E402
    PretrainPipelineBuilder,
    PretrainWrapper,
    build_transform_pipeline_dali,
)
from solo.data.pretrain_dataloader import FullTransformPipeline, NCropAugmentation  # noqa: E402
from solo.methods import METHODS  # noqa: E402

from attnce_plugin.losses import attentionnce_loss_func  # noqa: E402
from attnce_plugin.methods import MethodConfigError  # noqa: E402
from attnce_plugin.registration import register  # noqa: E402

pytestmark = pytest.mark.integration  # trains through solo-learn or runs its scripts


#: 2 nodes x 2 GPUs as Lightning numbers them: (global rank, local rank).
RANKS: Tuple[Tuple[int, int], ...] = ((0, 0), (1, 1), (2, 0), (3, 1))
NODES = 2
#: solo-learn's normalisation for the custom dataset (timm's IMAGENET_DEFAULT_MEAN / _STD).
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


# --------------------------------------------------------------------------- data and loader


def make_jpeg_folder(
    root: Path, num_classes: int, per_class: int, *, solid: bool, size: int = 40
) -> List[int]:
    """Write ``root/class<c>/img<i>.jpg`` and return each file's class, in solo-learn's order.

    Args:
        root: folder to create.
        num_classes: class folders.
        per_class: images per class.
        solid: one flat colour per file, red = 10 * (its position in solo's file order), so that
            any resized crop names its file; otherwise random pixels.
        size: image side in pixels.

    Returns:
        [N] class of the file at each position of solo-learn's order (sorted folders, sorted
        files), which is what an encoded dataset index points to.
    """
    rng = np.random.default_rng(0)
    classes = []
    for c in range(num_classes):
        (root / f"class{c}").mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            g = len(classes)
            if solid:
                pixels = np.empty((size, size, 3), np.uint8)
                pixels[...] = (10 * g, 80 * c, 128)
            else:
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"class{c}" / f"img{i:02d}.jpg", quality=95)
            classes.append(c)
    return classes


def file_of_crops(crop: torch.Tensor) -> List[int]:
    """The file position each flat-colour crop [b, 3, h, w] came from (see make_jpeg_folder)."""
    red = crop[:, 0].mean(dim=(1, 2)) * STD[0] * 255 + MEAN[0] * 255
    return [int(round(v / 10)) for v in red.tolist()]


def solo_dali_loader(
    train_path: Path,
    augmentations: Sequence[Any],
    *,
    dataset: str,
    batch_size: int,
    num_large_crops: int,
    num_small_crops: int,
    encode_indexes_into_labels: bool,
    dali_device: str = "cpu",
    num_threads: int = 1,
    global_rank: int = 0,
    local_rank: int = 0,
    world_size: int = 1,
    no_labels: bool = False,
    data_fraction: float = -1.0,
) -> PretrainWrapper:
    """solo-learn's DALI pretraining loader of one process, built as solo-learn builds it.

    Returns:
        The ``PretrainWrapper``; it yields ``[indexes [b], [crop_0 .. crop_{n-1}], targets [b]]``.
    """
    # main_pretrain.py:105-115
    transform = FullTransformPipeline(
        [
            NCropAugmentation(
                build_transform_pipeline_dali(dataset, aug, dali_device=dali_device), aug.num_crops
            )
            for aug in augmentations
        ]
    )
    # PretrainDALIDataModule.setup (dali_dataloader.py:777-818), device_id=None for the pipeline.
    builder = PretrainPipelineBuilder(
        train_path,
        batch_size=batch_size,
        transforms=transform,
        device=dali_device,
        device_id=local_rank,
        shard_id=global_rank,
        num_shards=world_size,
        num_threads=num_threads,
        no_labels=no_labels,
        encode_indexes_into_labels=encode_indexes_into_labels,
        data_fraction=data_fraction,
    )
    pipe = builder.pipeline(
        batch_size=builder.batch_size,
        num_threads=builder.num_threads,
        device_id=None,
        seed=builder.seed,
    )
    pipe.build()
    output_map = (
        [f"large{i}" for i in range(num_large_crops)]
        + [f"small{i}" for i in range(num_small_crops)]
        + ["label"]
    )
    return PretrainWrapper(
        model_batch_size=batch_size,
        model_rank=local_rank,  # solo-learn passes self.device_id, the LOCAL rank
        model_device=torch.device("cpu"),
        dataset_size=pipe.epoch_size("Reader"),
        conversion_map=builder.conversion_map if encode_indexes_into_labels else None,
        pipelines=pipe,
        output_map=output_map,
        reader_name="Reader",
        last_batch_policy=LastBatchPolicy.DROP,
        auto_reset=True,
    )


def resize_only(crop_size: int, num_crops: int) -> Dict[str, Any]:
    """A solo-learn augmentation pipeline that only resizes: crops keep their file's colour."""
    off = {"prob": 0.0}
    return OmegaConf.create(
        {
            "crop_size": crop_size,
            "num_crops": num_crops,
            "rrc": {"enabled": False, "crop_min_scale": 1.0, "crop_max_scale": 1.0},
            "color_jitter": {**off, "brightness": 0, "contrast": 0, "saturation": 0, "hue": 0},
            "grayscale": off,
            "gaussian_blur": off,
            "solarization": off,
            "equalization": off,
            "horizontal_flip": off,
        }
    )


# --------------------------------------------------------------------------- methods


def dali_method(name: str, train_path: Path, overrides: Sequence[str] = (), family: str = "custom"):
    """The shipped ``pretrain/<family>/<name>`` with ``data_format=dali``, tiny, built as
    ``main_pretrain.py`` builds it (``METHODS[cfg.method](cfg)`` after the wrapped parse_cfg)."""
    register()
    extra = ["method_kwargs.pred_hidden_dim=32"] if name.startswith("mocov3") else []
    dataset = ["data.dataset=imagenet100"] if family == "imagenet-100" else []
    cfg = compose_pretrain_cfg(
        f"{name}.yaml",
        train_path,
        [
            "data_format=dali",
            "++dali.device=cpu",
            "views.crop_size=32",
            "data.num_workers=1",
            *dataset,
            *extra,
            *overrides,
        ],
        family=family,
    )
    torch.manual_seed(0)
    return cfg, METHODS[cfg.method](cfg)


@contextmanager
def as_global_rank(model: Any, rank: int) -> Iterator[None]:
    """Make ``model.global_rank`` (Lightning's, from the trainer) read ``rank``."""
    with mock.patch.object(type(model), "global_rank", new=property(lambda self: rank)):
        yield


# --------------------------------------------------------------------------- the pin


def _pinned_dali() -> str:
    text = (REPO_ROOT / "pyproject.toml").read_text()
    found = re.findall(r'"nvidia-dali-cuda120==([0-9][0-9.]*)"', text)
    assert len(found) == 1, "pyproject.toml's dali extra must pin nvidia-dali-cuda120 exactly once"
    return found[0]


def test_installed_dali_is_the_pinned_version() -> None:
    """What these tests ran on is what the `dali` extra, setup_env.sh and the docs install."""
    pinned = _pinned_dali()
    assert nvidia.dali.__version__ == pinned, (
        f"DALI {nvidia.dali.__version__} is installed, the tested pin is {pinned}: "
        "solo-learn's temp_dali_fix.py subclasses DALI internals, re-run these tests on a new "
        "version before moving the pin"
    )
    for doc in ("scripts/setup_env.sh", "docs/solo-learn-usage.md"):
        assert f"nvidia-dali-cuda120=={pinned}" in (REPO_ROOT / doc).read_text(), doc


# --------------------------------------------------------------------------- indexes across nodes


@pytest.mark.parametrize("method", ["attentionnce", "mocov3_attentionnce"])
def test_positional_indexes_repeat_across_nodes_and_methods_make_them_unique(
    method: str, tmp_path: Path
) -> None:
    """Without index encoding, solo's indexes repeat on every node; the methods' are unique."""
    classes = make_jpeg_folder(tmp_path / "train", 3, 8, solid=False)
    b, steps = 3, 2
    _, model = dali_method(method, tmp_path / "train", ["dali.encode_indexes_into_labels=False"])
    assert model.positional_indexes

    raw: Dict[int, List[torch.Tensor]] = {}
    fixed: Dict[int, List[torch.Tensor]] = {}
    for global_rank, local_rank in RANKS:
        loader = solo_dali_loader(
            tmp_path / "train",
            [resize_only(32, 2), resize_only(32, 4)],
            dataset="custom",
            batch_size=b,
            num_large_crops=2,
            num_small_crops=4,
            encode_indexes_into_labels=False,
            global_rank=global_rank,
            local_rank=local_rank,
            world_size=len(RANKS),
        )
        assert len(loader) == len(classes) // (b * len(RANKS)) == steps
        for step, batch in enumerate(loader):
            raw.setdefault(step, []).append(batch[0].clone())
            with as_global_rank(model, global_rank):
                (indexes, solo_crops, _), own = model.split_batch(batch)
            # solo-learn's step gets the 2 anchors, or all 6 crops when it forwards the positives.
            assert len(solo_crops) == (2 if model.hides_positives else 6)
            assert len(solo_crops) + len(own) == 6
            fixed.setdefault(step, []).append(indexes)

    for step in range(steps):
        # solo-learn: arange(b) + local_rank * b, so node 1 repeats node 0's indexes.
        for (g0, l0), (g1, l1) in zip(RANKS[:2], RANKS[2:]):
            assert torch.equal(raw[step][g0], raw[step][g1])
            assert torch.equal(raw[step][g0], torch.arange(b) + l0 * b)
        assert torch.cat(raw[step]).unique().numel() == len(RANKS) * b // NODES
        # The methods: unique over all 4 processes, and equal to solo's on node 0.
        assert torch.equal(torch.cat(fixed[step]), torch.arange(len(RANKS) * b))
        for g, _ in RANKS[:2]:
            assert torch.equal(fixed[step][g], raw[step][g])

    # What it changes for the SimCLR-form loss on the global batch of 4 processes: with solo's
    # indexes 2 * (nodes - 1) negatives per anchor are masked out; the methods' indexes give the
    # loss of any unique numbering of the images.
    g = torch.Generator().manual_seed(0)
    n = len(RANKS) * b
    anchors, positives = torch.randn(2 * n, 8, generator=g), torch.randn(n, 4, 8, generator=g)
    true = attentionnce_loss_func(anchors, positives, torch.randperm(n, generator=g) + 100, 0.5)
    ours = attentionnce_loss_func(anchors, positives, torch.cat(fixed[0]), 0.5)
    solos = attentionnce_loss_func(anchors, positives, torch.cat(raw[0]), 0.5)
    torch.testing.assert_close(ours, true)
    assert not torch.allclose(solos, true)


@pytest.mark.parametrize("method", ["attentionnce", "mocov3_attentionnce"])
def test_encoded_indexes_are_real_and_methods_leave_them_unchanged(
    method: str, tmp_path: Path
) -> None:
    """With index encoding (data_format=dali), DALI's indexes name the files the crops came
    from, are unique across nodes, and pass through the methods unchanged."""
    classes = make_jpeg_folder(tmp_path / "train", 3, 8, solid=True)
    b = 3
    cfg, model = dali_method(method, tmp_path / "train")
    assert cfg.dali.encode_indexes_into_labels is True and not model.positional_indexes

    loaders = {
        global_rank: solo_dali_loader(
            tmp_path / "train",
            [resize_only(32, 2), resize_only(32, 4)],
            dataset="custom",
            batch_size=b,
            num_large_crops=2,
            num_small_crops=4,
            encode_indexes_into_labels=True,
            global_rank=global_rank,
            local_rank=local_rank,
            world_size=len(RANKS),
        )
        for global_rank, local_rank in RANKS
    }
    for epoch in range(2):
        seen: List[int] = []
        for global_rank, loader in loaders.items():
            for indexes, crops, targets in loader:
                files = file_of_crops(crops[0])
                assert indexes.tolist() == files
                assert all(file_of_crops(c) == files for c in crops[1:])
                assert targets.tolist() == [classes[f] for f in files]
                with as_global_rank(model, global_rank):
                    (ours, _, _), _ = model.split_batch([indexes, crops, targets])
                assert torch.equal(ours, indexes)
                seen.extend(files)
        # The 4 shards of one epoch: every file exactly once.
        assert sorted(seen) == list(range(len(classes))), f"epoch {epoch}"


def test_encode_flag_must_be_a_bool_and_multi_node_positions_warn(tmp_path: Path) -> None:
    """A non-bool flag is refused; positions on several nodes warn; one node or real indexes
    (nothing for the user to change) do not."""
    make_jpeg_folder(tmp_path / "train", 2, 2, solid=False)
    train = tmp_path / "train"
    with pytest.raises(MethodConfigError, match=r"dali\.encode_indexes_into_labels must be true"):
        dali_method("attentionnce", train, ["dali.encode_indexes_into_labels='no'"])
    with pytest.warns(UserWarning, match=r"the same numbers on each of the 2 nodes"):
        dali_method(
            "attentionnce", train, ["dali.encode_indexes_into_labels=False", "++num_nodes=2"]
        )
    for quiet in (["dali.encode_indexes_into_labels=False"], ["++num_nodes=2"]):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            dali_method("attentionnce", train, quiet)
        assert not [w for w in caught if "encode_indexes_into_labels" in str(w.message)], quiet


# --------------------------------------------------------------------------- shipped configs


#: (family, recipe, crop sizes the method expects: 2 anchors, then the M = 4 positives).
SHIPPED_DALI = [
    pytest.param(family, recipe, sizes, id=f"{family}/{recipe}")
    for family in ("imagenet-100", "custom")
    for recipe, sizes in (
        ("attentionnce", [32] * 6),
        ("attentionnce_multicrop", [32, 32] + [16] * 4),
        ("mocov3_attentionnce", [32] * 6),
    )
]


@pytest.mark.parametrize("family,recipe,sizes", SHIPPED_DALI)
def test_shipped_dali_config_trains_on_solo_dali_batches(
    family: str, recipe: str, sizes: List[int], tmp_path: Path
) -> None:
    """Every shipped config with data_format=dali: solo's DALI batches hold 2 anchors + M
    positives in the order, count and sizes the method expects, real indexes, and the method's
    training_step gives a finite loss and a gradient on every learnable parameter."""
    classes = make_jpeg_folder(tmp_path / "train", 3, 4, solid=False)
    cfg, model = dali_method(recipe, tmp_path / "train", family=family)
    assert cfg.data.format == "dali" and cfg.dali.encode_indexes_into_labels is True
    assert (cfg.data.num_large_crops, cfg.data.num_small_crops) == (2, 4)

    loader = solo_dali_loader(
        Path(cfg.data.train_path),
        cfg.augmentations,
        dataset=cfg.data.dataset,
        batch_size=cfg.optimizer.batch_size,
        num_large_crops=cfg.data.num_large_crops,
        num_small_crops=cfg.data.num_small_crops,
        encode_indexes_into_labels=cfg.dali.encode_indexes_into_labels,
        dali_device=cfg.dali.device,
        num_threads=cfg.data.num_workers,
        no_labels=cfg.data.no_labels,
        data_fraction=cfg.data.fraction,
    )
    b = cfg.optimizer.batch_size
    batches = list(loader)
    assert len(batches) == len(classes) // b
    seen: List[int] = []
    for indexes, crops, targets in batches:
        assert [tuple(c.shape) for c in crops] == [(b, 3, s, s) for s in sizes]
        assert all(c.dtype == torch.float32 and torch.isfinite(c).all() for c in crops)
        assert indexes.dtype == torch.long and indexes.unique().numel() == b
        assert targets.tolist() == [classes[i] for i in indexes.tolist()]
        seen.extend(indexes.tolist())
    assert sorted(seen) == list(range(len(classes)))  # one epoch: every image once

    batch = batches[0]
    (indexes, solo_crops, _), own = model.split_batch(batch)
    assert torch.equal(indexes, batch[0]) and len(solo_crops) + len(own) == 6
    assert len(solo_crops) == (2 if model.hides_positives else 6)
    assert all(a is c for a, c in zip(solo_crops + own, batch[1]))  # order kept

    model.train()
    loss = model.training_step(batch, 0)
    assert loss.ndim == 0 and torch.isfinite(loss), loss
    loss.backward()
    missing = [
        f"{group['name']}.{i}"
        for group in model.learnable_params
        for i, p in enumerate(group["params"])
        if p.grad is None or not torch.isfinite(p.grad).all()
    ]
    assert not missing, f"no finite gradient: {missing}"
