"""The methods on batches from solo-learn's own DALI loader, on a CPU: built as solo-learn builds
it (transforms as main_pretrain.py:105-115 makes them, PretrainPipelineBuilder and PretrainWrapper
as PretrainDALIDataModule.setup does, solo/data/dali_dataloader.py:764-818), but with
``device_id=None`` for the pipeline: DALI's CPU-only mode. Needs solo-learn and the pinned DALI;
FAILS, never skips, without them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List

import pytest
import torch

try:
    import nvidia.dali  # noqa: F401
except ImportError as err:
    pytest.fail(f"DALI is not importable ({err}); run scripts/setup_env.sh", pytrace=False)

import numpy as np  # noqa: E402
from helpers.configs import compose_pretrain_cfg  # noqa: E402
from nvidia.dali.plugin.pytorch import LastBatchPolicy  # noqa: E402
from PIL import Image  # noqa: E402
from solo.data import dali_dataloader as solo_dali  # noqa: E402
from solo.data.pretrain_dataloader import FullTransformPipeline, NCropAugmentation  # noqa: E402

from attnce_plugin.methods import METHODS  # noqa: E402

pytestmark = pytest.mark.integration


def solo_dali_batches(cfg: Any) -> List[Any]:
    """One epoch of solo-learn's DALI loader for ``cfg`` on one process."""
    dataset, b = cfg.data.dataset, cfg.optimizer.batch_size
    build = solo_dali.build_transform_pipeline_dali
    pipelines = [
        NCropAugmentation(build(dataset, a, dali_device="cpu"), a.num_crops)
        for a in cfg.augmentations
    ]
    shards = dict(device_id=0, shard_id=0, num_shards=1, num_threads=1, data_fraction=-1.0)
    builder = solo_dali.PretrainPipelineBuilder(
        Path(cfg.data.train_path),
        batch_size=b,
        transforms=FullTransformPipeline(pipelines),
        device="cpu",
        no_labels=False,
        encode_indexes_into_labels=cfg.dali.encode_indexes_into_labels,
        **shards,
    )
    pipe = builder.pipeline(batch_size=b, num_threads=1, device_id=None, seed=builder.seed)
    pipe.build()
    # The output map from the crop counts the parse_cfg wrapper recorded (dali_dataloader.py:797).
    names = [f"large{i}" for i in range(cfg.data.num_large_crops)]
    names += [f"small{i}" for i in range(cfg.data.num_small_crops)]
    fixed = dict(model_rank=0, model_device=torch.device("cpu"), reader_name="Reader")
    loader = solo_dali.PretrainWrapper(
        model_batch_size=b,
        dataset_size=pipe.epoch_size("Reader"),
        conversion_map=builder.conversion_map,
        pipelines=pipe,
        output_map=names + ["label"],
        last_batch_policy=LastBatchPolicy.DROP,
        auto_reset=True,
        **fixed,
    )
    return list(loader)


def test_installed_dali_is_the_pinned_version():
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert f'"nvidia-dali-cuda120=={nvidia.dali.__version__}"' in pyproject


@pytest.mark.parametrize(
    "family,name,sizes",
    [
        ("custom", "attentionnce", [32] * 6),
        ("imagenet-100", "attentionnce_multicrop", [32, 32] + [16] * 4),
        ("custom", "mocov3_attentionnce", [32] * 6),
    ],
)
def test_shipped_dali_configs_train_on_solo_learns_dali_batches(family, name, sizes, tmp_path):
    classes = [c for c in range(3) for _ in range(4)]  # in solo-learn's (sorted) file order
    for i, c in enumerate(classes):
        (tmp_path / "train" / f"class{c}").mkdir(parents=True, exist_ok=True)
        pixels = np.full((40, 40, 3), (10 * i, 80 * c, 128), np.uint8)
        Image.fromarray(pixels).save(tmp_path / f"train/class{c}/img{i % 4}.jpg", quality=95)
    overrides = "data_format=dali ++dali.device=cpu views.crop_size=32 data.num_workers=1".split()
    overrides += ["data.dataset=imagenet100"] if family == "imagenet-100" else []
    overrides += ["method_kwargs.pred_hidden_dim=32"] if name.startswith("mocov3") else []
    cfg = compose_pretrain_cfg(f"{name}.yaml", tmp_path / "train", overrides, family=family)
    assert cfg.data.format == "dali" and cfg.dali.encode_indexes_into_labels is True
    batches = solo_dali_batches(cfg)
    b = cfg.optimizer.batch_size
    seen: List[int] = []
    for indexes, crops, targets in batches:
        assert [tuple(c.shape) for c in crops] == [(b, 3, s, s) for s in sizes]
        # Encoded indexes: each image's position in solo-learn's file order, whose class we know.
        assert targets.tolist() == [classes[i] for i in indexes.tolist()]
        seen += indexes.tolist()
    assert sorted(seen) == list(range(len(classes)))
    torch.manual_seed(0)
    model = METHODS[cfg.method](cfg).train()
    loss = model.training_step(batches[0], 0)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for g in model.learnable_params for p in g["params"])
