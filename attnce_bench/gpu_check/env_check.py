"""Part 0: the environment the other parts get (versions, where each package comes from, CUDA).

Fails when a module is missing, when torchmetrics is 1.x (solo-learn's kNN needs < 1.0), when solo
or attnce_plugin do not come from the carried copy / this checkout, or, without ``--cpu``, when
CUDA is not usable.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import platform
import sys
import warnings
from pathlib import Path
from typing import List, Optional

from attnce_bench.gpu_check import REPO_ROOT
from attnce_bench.gpu_check.common import PartContext, check, part_main

#: (module, distribution for the version) imported by the parts; "" = take module.__version__.
MODULES = (
    ("torch", "torch"),
    ("torchvision", "torchvision"),
    ("lightning", "lightning"),
    ("torchmetrics", "torchmetrics"),
    ("omegaconf", "omegaconf"),
    ("hydra", "hydra-core"),
    ("antlr4", "antlr4-python3-runtime"),
    ("timm", "timm"),
    ("PIL", "pillow"),
    ("pkg_resources", "setuptools"),
    ("solo", ""),
    ("attnce_plugin", ""),
)


def _version(module: object, dist: str) -> str:
    if dist:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            pass
    return str(getattr(module, "__version__", "?"))


def _inside(path: Optional[str], folder: Path) -> bool:
    if not path:
        return False
    try:
        Path(path).resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def run(ctx: PartContext) -> None:
    warnings.filterwarnings("ignore")
    import torch

    rows: List[List[str]] = []
    missing: List[str] = []
    found = {}
    for name, dist in MODULES:
        try:
            module = importlib.import_module(name)
        except Exception as err:  # noqa: BLE001  (report every broken import, not the first)
            missing.append(f"{name} ({type(err).__name__}: {err})")
            rows.append([name, "MISSING", f"{type(err).__name__}: {err}"[:120]])
            continue
        found[name] = module
        rows.append(
            [name, _version(module, dist), str(Path(getattr(module, "__file__", "") or "?").parent)]
        )
    cuda = torch.cuda.is_available()
    ctx.emit(
        f"python {platform.python_version()} ({sys.executable}), torch {torch.__version__}, "
        f"CUDA build {torch.version.cuda}, torch.cuda.is_available() = {cuda}"
    )
    if cuda:
        props = torch.cuda.get_device_properties(0)
        ctx.emit(
            f"device 0: {props.name}, {props.total_memory / 2**30:.0f} GiB, "
            f"capability {props.major}.{props.minor}, {torch.cuda.device_count()} device(s)"
        )
        ctx.data["device_name"] = props.name
    ctx.emit()
    ctx.table(["module", "version", "from"], rows)
    ctx.data.update({"cuda": cuda, "torch": torch.__version__, "python": platform.python_version()})
    versions = {r[0]: r[1] for r in rows}
    ctx.data["versions"] = versions
    ctx.key = (
        f"torch {torch.__version__}, Lightning {versions.get('lightning')}, torchmetrics "
        f"{versions.get('torchmetrics')}, CUDA {'yes' if cuda else 'no'}"
        + (f" ({ctx.data['device_name']})" if cuda else "")
    )
    check(not missing, "missing modules: " + "; ".join(missing))
    tm = versions["torchmetrics"].split(".")
    check(
        tm[0] == "0",
        f"torchmetrics {versions['torchmetrics']} is imported; solo-learn's kNN "
        "needs < 1.0 (the carried wheel must come first on PYTHONPATH)",
    )
    gpucheck = Path(ctx.args["gpucheck"])
    check(
        _inside(getattr(found["solo"], "__file__", None), gpucheck),
        f"solo is imported from {found['solo'].__file__}, not from the carried {gpucheck}",
    )
    check(
        _inside(getattr(found["attnce_plugin"], "__file__", None), REPO_ROOT),
        f"attnce_plugin is imported from {found['attnce_plugin'].__file__}, not {REPO_ROOT}",
    )
    import attnce_plugin

    registered = attnce_plugin.register()
    ctx.emit(f"registered in solo.methods.METHODS: {', '.join(sorted(registered))}")
    if ctx.cuda:
        check(cuda, "CUDA is not usable by torch here; run with --cpu for the CPU parts")


if __name__ == "__main__":
    sys.exit(part_main(run))
