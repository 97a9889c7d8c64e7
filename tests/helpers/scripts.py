"""Running solo-learn's own scripts (and the repository's) as subprocesses, and reading what they
wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

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


#: Runs a solo-learn script with an explicit CSV logger (see that file for why).
CSV_LOGGER_LAUNCHER = Path(__file__).resolve().parent / "run_with_csv_logger.py"


def run_script(
    argv: Sequence[str],
    cwd: Path,
    *,
    timeout: float = 600,
    threads: int = 2,
    check: bool = True,
    csv_logger: bool = False,
) -> subprocess.CompletedProcess:
    """Run ``python <argv...>`` in ``cwd``; with ``check`` fail the test showing the output tail.

    Args:
        csv_logger: run the script (``argv[0]``) through :data:`CSV_LOGGER_LAUNCHER`, so that its
            metrics land in ``cwd/lightning_logs/*/metrics.csv`` (:func:`read_metrics_csv`) also
            where tensorboard is installed and Lightning would default to TensorBoard.

    Returns:
        The completed process, ``stdout`` holding stdout and stderr together.
    """
    if csv_logger:
        argv = [str(CSV_LOGGER_LAUNCHER), *argv]
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


def read_metrics_csv(cwd: Path) -> Optional[List[Dict[str, str]]]:
    """Rows of the CSV logger's ``metrics.csv`` written under ``cwd/lightning_logs``, or None.

    Only a run started with ``run_script(..., csv_logger=True)`` is sure to have one: otherwise
    Lightning logs to TensorBoard wherever tensorboard is installed.
    """
    import csv

    files = sorted(cwd.glob("lightning_logs/*/metrics.csv"))
    if not files:
        return None
    with open(files[-1]) as fh:
        return list(csv.DictReader(fh))
