"""The package as installed: the losses import with torch alone, and the wheel holds the library
and every shipped config, without the benchmark."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BLOCKED = ("solo", "lightning", "pytorch_lightning", "hydra", "omegaconf", "timm", "torchvision")

IMPORT_WITH_TORCH_ALONE = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
import torch
import attnce_plugin
from attnce_plugin.losses import attentionnce_loss_func
a, p = torch.randn(4, 8), torch.randn(2, 3, 8)
print(float(attentionnce_loss_func(a, p, torch.arange(2))), attnce_plugin.__version__)
"""


def test_losses_import_and_run_with_torch_alone():
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_WITH_TORCH_ALONE], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    loss, version = proc.stdout.split()
    assert float(loss) > 0 and version


def test_wheel_holds_the_library_and_all_configs_only(tmp_path):
    # Built from a copy, so that setuptools' build/ and egg-info stay out of the checkout.
    src = tmp_path / "src"
    # benchmarks/results (the committed run records) is most of a clone and none of the wheel.
    skip = shutil.ignore_patterns(
        ".git", ".gpucheck", "__pycache__", "*.egg-info", "build", ".*", "results", "bench_out"
    )
    shutil.copytree(REPO, src, ignore=skip)
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run(pip + ["-w", str(tmp_path / "dist"), str(src)], check=True, capture_output=True)
    wheel = zipfile.ZipFile(next((tmp_path / "dist").glob("attnce_plugin-*.whl")))
    names = set(wheel.namelist())
    dist_info = next(n.split("/")[0] for n in names if ".dist-info/" in n)
    tops = {n.split("/")[0] for n in names}
    assert tops == {"attnce_plugin", dist_info}  # no benchmark, no tests
    configs = {str(p.relative_to(REPO)) for p in (REPO / "attnce_plugin/configs").rglob("*.yaml")}
    assert len(configs) > 20 and configs <= names, sorted(configs - names)
    assert "attnce_plugin/losses.py" in names
    entry_points = wheel.read(f"{dist_info}/entry_points.txt").decode()
    for command in ("attnce-knn", "attnce-umap", "attnce-configs"):
        assert f"{command} = attnce_plugin.cli:" in entry_points
