"""``prepare``: build the ``.gpucheck/`` folder that travels to the GPU machine (see the package).

Runs where pip can reach PyPI (here, CI). Wheels are kept in a download cache
(``$ATTNCE_GPUCHECK_WHEEL_CACHE``, default ``~/.cache/attnce_plugin/gpucheck-wheels``) and taken
from it when present, so a second ``prepare`` needs no network. Everything the GPU machine lacks is
pure Python, so one ``py3-none-any`` wheel of each serves its Python 3.12.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from attnce_bench.gpu_check import MANIFEST_FORMAT, MAX_BYTES, REPO_ROOT

#: The run-tool limit on everything that travels (working tree + carried paths).
TRAVEL_LIMIT_BYTES = 64 * 2**20

#: Fashion-MNIST subset: enough images for 30 steps of batch 32 per run (drop_last), and a
#: validation split for the online kNN and ``attnce-knn``.
DEFAULT_NUM_TRAIN = 1024
DEFAULT_NUM_VAL = 256


class PrepareError(RuntimeError):
    """``prepare`` could not build a complete ``.gpucheck`` folder."""


@dataclass(frozen=True)
class WheelPin:
    """One wheel carried to the GPU machine.

    Attributes:
        name: distribution name as pip takes it.
        version: exact version.
        why: why the GPU machine needs it (kept in the manifest).
        sdist_only: PyPI has no wheel: build one here with ``pip wheel`` (pure Python).
        only_if_missing: module whose absence on the target makes ``run`` install this wheel
            ("" = always installed).
    """

    name: str
    version: str
    why: str
    sdist_only: bool = False
    only_if_missing: str = ""

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"

    def matches(self, filename: str) -> bool:
        """Whether ``filename`` is a pure-Python wheel of this pin (names normalised like pip's)."""
        stem = re.sub(r"[-_.]+", "_", self.name).lower()
        return filename.lower().startswith(f"{stem}-{self.version}-") and filename.endswith(
            "-none-any.whl"
        )


#: What the GPU machine lacks (docs: shared solo-learn.md, "The lent GPU machine"). Checked against
#: solo-learn's imports: wandb (auto_umap, guarded by try/except; Lightning's WandbLogger module
#: imports it lazily), umap-learn (auto_umap) and DALI (try/except in main_pretrain.py) are
#: optional; tqdm, scipy, scikit-learn, h5py, einops, timm, PIL, yaml and lightning-utilities are
#: there.
WHEELS: Sequence[WheelPin] = (
    WheelPin("omegaconf", "2.3.1", "solo-learn's configs (not on the GPU machine)"),
    WheelPin("hydra-core", "1.3.8", "main_pretrain.py is a Hydra app (not on the GPU machine)"),
    WheelPin(
        "antlr4-python3-runtime",
        "4.9.3",
        "omegaconf 2.3 / hydra-core 1.3 pin antlr4 4.9.*; PyPI has only its sdist, built here",
        sdist_only=True,
    ),
    WheelPin(
        "torchmetrics",
        "0.11.4",
        "solo-learn's kNN passes compute_on_step, removed in torchmetrics 1.0 (the machine: 1.9)",
    ),
    WheelPin(
        "setuptools",
        "80.10.2",
        "torchmetrics 0.11.4 imports pkg_resources, which setuptools >= 82 no longer ships",
        only_if_missing="pkg_resources",
    ),
)

#: Not carried, and why (kept in the manifest so a reader of a failed run knows it was deliberate).
NOT_CARRIED: Dict[str, str] = {
    "wandb": "imported only by solo.utils.auto_umap inside try/except, and lazily by Lightning's "
    "WandbLogger; every run sets wandb.enabled=False",
    "umap-learn": "only main_umap.py / auto_umap need it; not exercised",
    "nvidia-dali": "the wheel is 424 MB, over the 64 MiB travel limit",
}


def wheel_cache_dir() -> Path:
    """Where downloaded wheels are kept between ``prepare`` runs."""
    env = os.environ.get("ATTNCE_GPUCHECK_WHEEL_CACHE")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "attnce_plugin" / "gpucheck-wheels"


def find_wheel(folder: Path, pin: WheelPin) -> Optional[Path]:
    """The wheel of ``pin`` in ``folder``, or None."""
    if not folder.is_dir():
        return None
    hits = sorted(p for p in folder.iterdir() if p.is_file() and pin.matches(p.name))
    return hits[0] if hits else None


def _pip(args: Sequence[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def fetch_wheel(pin: WheelPin, cache: Path) -> Path:
    """The wheel of ``pin`` from ``cache``, downloaded (or built) into it first when missing.

    Raises:
        PrepareError: pip failed (the message holds its output and what to do).
    """
    found = find_wheel(cache, pin)
    if found is not None:
        return found
    cache.mkdir(parents=True, exist_ok=True)
    if pin.sdist_only:
        # Pure Python, so the wheel built by this interpreter serves Python 3.12 as well. Without
        # build isolation pip needs no network for setuptools; retry with it if that fails.
        attempts = [
            ["wheel", "--no-deps", "--no-build-isolation", "-w", str(cache), pin.spec],
            ["wheel", "--no-deps", "-w", str(cache), pin.spec],
        ]
    else:
        attempts = [
            [
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--implementation",
                "py",
                "--platform",
                "any",
                "-d",
                str(cache),
                pin.spec,
            ],
        ]
    output = ""
    for args in attempts:
        proc = _pip(args)
        output = proc.stdout
        found = find_wheel(cache, pin)
        if proc.returncode == 0 and found is not None:
            return found
    raise PrepareError(
        f"could not get a pure-Python wheel of {pin.spec} into {cache}.\n"
        f"pip said:\n{output[-3000:]}\n"
        "prepare needs pip to reach PyPI once; later runs take the wheel from that cache "
        "($ATTNCE_GPUCHECK_WHEEL_CACHE). Or put the wheel there by hand."
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def tree_bytes(path: Path) -> int:
    """Sum of the sizes of the files under ``path`` (what the transfer counts)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _git(args: Sequence[str], cwd: Path) -> Optional[str]:
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=str(cwd),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def copy_solo(dest: Path) -> Dict[str, object]:
    """Copy the installed solo-learn's ``solo/`` package, ``main_*.py`` and LICENSE to ``dest``.

    Raises:
        PrepareError: solo-learn or its checkout is missing here.
    """
    from attnce_plugin.solo_compat import SoloLearnMissingError, solo_checkout_dir

    try:
        checkout = Path(solo_checkout_dir())
    except SoloLearnMissingError as err:
        raise PrepareError(f"prepare copies solo-learn from its checkout: {err}") from err
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copytree(
        checkout / "solo",
        dest / "solo",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"),
    )
    scripts = sorted(checkout.glob("main_*.py"))
    if not any(p.name == "main_pretrain.py" for p in scripts):
        raise PrepareError(f"{checkout} has no main_pretrain.py")
    for path in [*scripts, checkout / "LICENSE"]:
        if path.is_file():
            shutil.copy2(path, dest / path.name)
    commit = _git(["rev-parse", "HEAD"], checkout)
    dirty = _git(["status", "--porcelain", "--", "solo", *[p.name for p in scripts]], checkout)
    return {
        "source": str(checkout),
        "commit": commit,
        "modified_locally": bool(dirty) if dirty is not None else None,
        "scripts": [p.name for p in scripts],
        "bytes": tree_bytes(dest),
    }


def prepare_data(dest: Path, num_train: int, num_val: int) -> Dict[str, object]:
    """The Fashion-MNIST subset as 32 px PNG folders under ``dest`` (reused when already there)."""
    from attnce_bench.data import DatasetMissingError, prepare_fashion_mnist

    try:
        splits = prepare_fashion_mnist(dest, num_train=num_train, num_val=num_val, image_size=32)
    except DatasetMissingError as err:
        raise PrepareError(str(err)) from err
    keep = splits.train.parent
    for other in dest.iterdir():  # subsets of other sizes would only take travel room
        if other != keep:
            shutil.rmtree(other, ignore_errors=True) if other.is_dir() else other.unlink()
    root = dest.parent
    return {
        "train": str(splits.train.relative_to(root)),
        "val": str(splits.val.relative_to(root)),
        "num_train": splits.num_train,
        "num_val": splits.num_val,
        "image_size": splits.image_size,
        "bytes": tree_bytes(keep),
    }


def travelling_repo_bytes() -> Optional[int]:
    """Bytes of the working tree that the device tool sends (tracked + untracked-not-ignored)."""
    listing = _git(["ls-files", "-co", "--exclude-standard", "-z"], REPO_ROOT)
    if listing is None:
        return None
    total = 0
    for name in listing.split("\0"):
        path = REPO_ROOT / name
        if name and path.is_file():
            total += path.stat().st_size
    return total


def prepare(
    folder: Path,
    num_train: int = DEFAULT_NUM_TRAIN,
    num_val: int = DEFAULT_NUM_VAL,
    cache: Optional[Path] = None,
    log=print,
) -> Dict[str, object]:
    """Build (or refresh) ``folder``; return the manifest written to ``folder/manifest.json``.

    Raises:
        PrepareError: something is missing, or the folder exceeds :data:`MAX_BYTES`.
    """
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = folder / "manifest.json"
    # The manifest is the completeness marker: remove it first, write it last.
    manifest_path.unlink(missing_ok=True)
    cache = wheel_cache_dir() if cache is None else Path(cache)

    log(f"[prepare] solo-learn -> {folder / 'solo-learn'}")
    solo = copy_solo(folder / "solo-learn")

    log(f"[prepare] wheels (cache {cache}) -> {folder / 'wheels'}")
    wheels_dir = folder / "wheels"
    shutil.rmtree(wheels_dir, ignore_errors=True)
    wheels_dir.mkdir()
    wheels: List[Dict[str, object]] = []
    for pin in WHEELS:
        src = fetch_wheel(pin, cache)
        dst = wheels_dir / src.name
        shutil.copy2(src, dst)
        wheels.append(
            {
                "file": dst.name,
                "name": pin.name,
                "version": pin.version,
                "sha256": _sha256(dst),
                "bytes": dst.stat().st_size,
                "why": pin.why,
                "only_if_missing": pin.only_if_missing,
            }
        )

    log(f"[prepare] Fashion-MNIST {num_train} train / {num_val} val images -> {folder / 'data'}")
    data = prepare_data(folder / "data", num_train, num_val)

    for stray in folder.iterdir():  # anything else would travel too
        if stray.name not in ("solo-learn", "wheels", "data"):
            shutil.rmtree(stray) if stray.is_dir() else stray.unlink()
    manifest: Dict[str, object] = {
        "format": MANIFEST_FORMAT,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "prepared_with_python": sys.version.split()[0],
        "solo_learn": solo,
        "wheels": wheels,
        "data": data,
        "not_carried": NOT_CARRIED,
    }
    total = tree_bytes(folder)
    manifest["bytes"] = total  # every file but the manifest itself
    if total > MAX_BYTES:
        raise PrepareError(
            f"{folder} holds {total / 2**20:.1f} MiB, over the {MAX_BYTES / 2**20:.0f} MiB limit "
            f"(solo-learn {int(solo['bytes']) / 2**20:.1f}, wheels "
            f"{sum(int(w['bytes']) for w in wheels) / 2**20:.1f}, data "
            f"{int(data['bytes']) / 2**20:.1f} MiB); use fewer images (--num-train / --num-val)"
        )
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    total = tree_bytes(folder)
    if total > MAX_BYTES:  # only a huge manifest could get here
        manifest_path.unlink()
        raise PrepareError(
            f"{folder} holds {total / 2**20:.1f} MiB with its manifest, over "
            f"{MAX_BYTES / 2**20:.0f} MiB"
        )

    log(f"[prepare] {folder}: {total / 2**20:.2f} MiB (limit {MAX_BYTES / 2**20:.0f} MiB)")
    for name in ("solo-learn", "wheels", "data"):
        log(f"  {name + '/':<12} {tree_bytes(folder / name) / 2**20:7.2f} MiB")
    for wheel in wheels:
        log(f"    {wheel['file']} ({int(wheel['bytes']) / 2**10:.0f} KiB)")
    repo = travelling_repo_bytes()
    if repo is not None:
        both = repo + total
        note = "" if both <= TRAVEL_LIMIT_BYTES else "  OVER THE DEVICE TOOL'S 64 MiB LIMIT"
        log(
            f"[prepare] travels with the working tree ({repo / 2**20:.2f} MiB): "
            f"{both / 2**20:.2f} of 64 MiB{note}"
        )
    return manifest


def load_manifest(folder: Path) -> Dict[str, object]:
    """Read and check ``folder/manifest.json`` and the wheels it lists.

    Raises:
        PrepareError: the folder is missing, incomplete or altered (the message says what to run).
    """
    folder = Path(folder)
    hint = "run `bash scripts/gpu_check.sh prepare` first (where pip reaches PyPI)"
    path = folder / "manifest.json"
    if not path.is_file():
        raise PrepareError(
            f"{path} not found: {folder} is missing or incomplete; {hint}, and "
            'carry it (run tool: carry [".gpucheck"])'
        )
    manifest = json.loads(path.read_text())
    if manifest.get("format") != MANIFEST_FORMAT:
        raise PrepareError(
            f"{path}: format {manifest.get('format')}, expected {MANIFEST_FORMAT}; " f"{hint}"
        )
    for wheel in manifest["wheels"]:
        whl = folder / "wheels" / wheel["file"]
        if not whl.is_file() or _sha256(whl) != wheel["sha256"]:
            raise PrepareError(f"{whl} is missing or differs from the manifest; {hint}")
    for key in ("train", "val"):
        if not (folder / manifest["data"][key]).is_dir():
            raise PrepareError(f"{folder / manifest['data'][key]} is missing; {hint}")
    if not (folder / "solo-learn" / "main_pretrain.py").is_file():
        raise PrepareError(f"{folder / 'solo-learn'} has no main_pretrain.py; {hint}")
    return manifest
