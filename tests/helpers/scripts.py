"""Running solo-learn's own scripts (and the repository's) as subprocesses, and reading what they
wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence

import pytest

#: This checkout, put first on the subprocesses' PYTHONPATH so that they test this code even when
#: the editable install points at another clone.
REPO_ROOT = Path(__file__).resolve().parents[2]


def subprocess_env(threads: int = 2) -> Dict[str, str]:
    """Environment for the script subprocesses: quiet warnings, bounded threads, no wandb."""
    env = dict(os.environ)
    env.update(
        {
            "PYTHONWARNINGS": "ignore",
            "OMP_NUM_THREADS": str(threads),
            "MKL_NUM_THREADS": str(threads),
            "WANDB_MODE": "disabled",
            "HYDRA_FULL_ERROR": "1",
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
    )
    return env


def run_script(
    argv: Sequence[str],
    cwd: Path,
    *,
    timeout: float = 600,
    threads: int = 2,
    check: bool = True,
) -> subprocess.CompletedProcess:
    """Run ``python <argv...>`` in ``cwd``; with ``check`` fail the test showing the output tail.

    Returns:
        The completed process, ``stdout`` holding stdout and stderr together.
    """
    proc = subprocess.run(
        [sys.executable, *argv],
        cwd=str(cwd),
        env=subprocess_env(threads),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        pytest.fail(
            f"{' '.join(argv[:3])} ... exited with {proc.returncode}:\n{proc.stdout[-6000:]}",
            pytrace=False,
        )
    return proc


def find_checkpoints(ckpt_dir: Path) -> List[Path]:
    """All ``*.ckpt`` files under ``ckpt_dir``, sorted by path."""
    return sorted(ckpt_dir.rglob("*.ckpt"))
