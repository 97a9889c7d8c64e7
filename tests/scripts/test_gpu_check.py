"""scripts/gpu_check.sh: ``prepare`` builds the bundle, ``run --cpu`` runs every command of the GPU
check on this CPU under the bundle's Lightning and leaves its tables under $OUT; without the bundle
``run`` stops at once, saying what to run. No network: the wheel cache that ``prepare`` would fill
from PyPI is built here from the installed distributions of the pinned versions."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
import torch

from attnce_plugin.losses import attentionnce_loss_func

pytestmark = pytest.mark.integration  # runs the cost benchmarks through Lightning (minutes)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_check.sh"


def _sh(*args: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess:
    command = ["bash", str(cwd / "scripts" / "gpu_check.sh"), *args]
    output = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # in one string
    return subprocess.run(command, cwd=cwd, env={**os.environ, **env}, timeout=900, **output)


def _wheel_cache(cache: Path) -> Path:
    """A wheel per pin of the script, zipped from the installed distribution (its files and
    dist-info, as a pure-Python wheel holds them); an installed version other than the pin fails."""
    pins = re.search(r"PINS=\(([^)]*)\)", SCRIPT.read_text()).group(1).split()
    cache.mkdir()
    for pin in pins:
        name, version = pin.split("==")
        dist = metadata.distribution(name)
        assert dist.version == version, f"{pin} pinned in gpu_check.sh, {dist.version} installed"
        with zipfile.ZipFile(cache / f"{name}-{version}-py3-none-any.whl", "w") as whl:
            for f in dist.files:
                if not str(f).startswith("..") and "__pycache__" not in f.parts:
                    whl.write(f.locate(), str(f))
    return cache


def _table_rows(path: Path):
    lines = [line for line in path.read_text().splitlines() if line.startswith("|")]
    assert len(lines) >= 3 and set(lines[1]) <= set("|-"), path.read_text()  # head, rule, rows
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


def test_prepare_then_run_cpu_leaves_every_table(tmp_path):
    cache = _wheel_cache(tmp_path / "wheels")
    proc = _sh("prepare", GPUCHECK_WHEEL_CACHE=str(cache), PIP_NO_INDEX="1")  # no download
    assert proc.returncode == 0, proc.stdout[-3000:]
    bundle = REPO / ".gpucheck"
    assert (bundle / "solo-learn" / "solo" / "methods" / "mocov3.py").is_file()
    wheels = {p.name.split("-")[0] for p in (bundle / "wheels").glob("*.whl")}
    want = "omegaconf hydra_core antlr4_python3_runtime torchmetrics lightning pytest".split()
    assert set(want) <= wheels
    assert len(list((bundle / "data" / "val").rglob("*.png"))) == 48
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    assert size <= 48 * 2**20

    out = tmp_path / "out"
    test = "tests/scripts/test_gpu_check.py::test_the_loss_on_the_device"
    proc = _sh("run", "--cpu", OUT=str(out), GPUCHECK_TESTS=test)
    assert proc.returncode == 0, proc.stdout[-3000:]
    summary = {r[0]: r for r in _table_rows(out / "summary.md")}
    names = ["env", "loss_sync", "pretrain_attentionnce_32", "pretrain_mocov3_attentionnce_32"]
    names += ["linear", "tests", "step_cost_32", "step_cost_bf16-mixed", "step_cost_multicrop"]
    assert list(summary) == names and all(summary[n][1] == "0" for n in names), summary
    env = (out / "env.log").read_text()
    assert "torchmetrics 0.11.4" in env and "lightning 2.1.2" in env  # the bundle's, first
    assert any((out / "ckpt" / "linear").rglob("*.ckpt"))
    assert "\ntests: 1 passed" in (out / "summary.md").read_text()  # the verdict comes back there
    for name, precision in (("step_cost_32", "32-true"), ("step_cost_bf16-mixed", "bf16-mixed")):
        rows = _table_rows(out / f"{name}.md")
        assert [r[0] for r in rows] == ["simclr", "attentionnce"]
        assert {r[3] for r in rows} == {precision}
    assert [r[1] for r in _table_rows(out / "step_cost_multicrop.md")] == [
        "attentionnce",
        "attentionnce_multicrop",
    ]


def test_run_without_the_bundle_says_to_prepare(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPT, tmp_path / "scripts" / "gpu_check.sh")
    proc = _sh("run", "--cpu", cwd=tmp_path, OUT=str(tmp_path / "out"))
    assert proc.returncode == 2 and "gpu_check.sh prepare" in proc.stdout, proc.stdout


@pytest.mark.gpu
def test_the_loss_on_the_device(device):
    """What `run` selects: a loss call and its gradient, finite, on the --device given."""
    g = torch.Generator().manual_seed(0)
    anchors = torch.randn(16, 8, generator=g).to(device).requires_grad_(True)
    positives = torch.randn(8, 4, 8, generator=g).to(device)
    loss = attentionnce_loss_func(anchors, positives, torch.arange(8, device=device))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(anchors.grad).all()
