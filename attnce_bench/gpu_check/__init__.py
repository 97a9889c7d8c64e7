"""One prepared, self-contained GPU check (``scripts/gpu_check.sh``, docs/performance.md "GPU").

The lent GPU machine has torch, Lightning, timm and tensorboard but no solo-learn, omegaconf,
hydra-core or antlr4, a torchmetrics (1.x) that breaks solo-learn's kNN, and no network. So the
check is prepared here and carried there:

``python -m attnce_bench.gpu_check prepare`` (:mod:`.prepare`) builds ``.gpucheck/`` (git-ignored,
at most 48 MiB)::

    .gpucheck/solo-learn/      solo-learn's ``solo`` package and ``main_*.py`` (copied, unmodified)
    .gpucheck/wheels/          pure-Python wheels for Python 3.12 (omegaconf, hydra-core, antlr4,
                               torchmetrics 0.11.4, setuptools for pkg_resources)
    .gpucheck/data/            a small Fashion-MNIST subset as 32 px PNG image folders
    .gpucheck/manifest.json    what is there, with sizes and checksums (written last)

``python -m attnce_bench.gpu_check run [--cpu]`` (:mod:`.driver`) installs the wheels offline into
a temporary folder put first on ``PYTHONPATH`` (so torchmetrics 0.11.4 shadows the machine's), then
runs the parts below in priority order under one deadline, each in its own subprocess with its own
timeout; a part that fails or times out does not stop the next, one that no longer fits is
reported as skipped. Tables and logs go to ``$OUT`` (``summary.md``, ``report.md``,
``results.json``, ``logs.tar.gz``: the device tool brings back at most 8 files).

1. :mod:`.loss_check`: the loss against the float64 reference, fp32 / TF32 / fp16 / bf16;
2. :mod:`.pretrain_check`: solo-learn's own ``main_pretrain.py`` on the shipped custom configs;
3. :mod:`.pretrain_check` (``knn``): ``attnce-knn`` on one of those checkpoints;
4. :mod:`.dist_check`: two ranks (gloo) give one process's loss and gradients;
5. :mod:`.loss_bench`: ``attnce_bench.cost.bench_loss`` against solo-learn's SimCLR loss;
6. :mod:`.step_check`: step time through Lightning (``attnce_bench.cost.bench_step_lightning``),
   eager then compiled.

This package's driver and preparation import only the standard library (and, for ``prepare``,
numpy and PIL through :mod:`attnce_bench.data`): they run before the carried wheels are installed.
"""

from __future__ import annotations

from pathlib import Path

#: The repository root (this file is ``<root>/attnce_bench/gpu_check/__init__.py``).
REPO_ROOT = Path(__file__).resolve().parents[2]

#: Default folder that ``prepare`` fills and ``run`` reads.
DEFAULT_DIR = REPO_ROOT / ".gpucheck"

#: ``.gpucheck`` must travel with the working tree, 64 MiB in all: keep room for the repository.
MAX_BYTES = 48 * 2**20

#: Format of manifest.json; bumped when the layout changes.
MANIFEST_FORMAT = 1
