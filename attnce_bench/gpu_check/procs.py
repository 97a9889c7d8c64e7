"""Subprocesses with a hard timeout that also ends their children (dataloader workers, DDP ranks).

Each subprocess gets its own session, so its whole process group can be killed at its timeout. A
part that starts such subprocesses is itself killed by the driver through its own group, which
does not reach theirs: :func:`install_term_handler` makes the part kill them when it is told to
stop.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Any, Dict, List, Optional, Set

#: Subprocesses started by :func:`run_group` and still running (each leads its own group).
_ACTIVE: Set[subprocess.Popen] = set()


def kill_active_children(signum: Optional[int] = None, frame: Any = None) -> None:
    """SIGKILL the process group of every running :func:`run_group` child; as a signal handler,
    exit afterwards."""
    for proc in list(_ACTIVE):
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a session leader's group id is its pid
        except (ProcessLookupError, PermissionError):
            pass
    if signum is not None:
        raise SystemExit(128 + signum)


def install_term_handler() -> None:
    """On SIGTERM (the driver's timeout), take this process's subprocess groups down with it."""
    signal.signal(signal.SIGTERM, kill_active_children)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group of ``proc`` (its own session), then SIGKILL what is left."""
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            # The leader is gone; workers of the same group may linger: one SIGKILL for them.
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return
        except subprocess.TimeoutExpired:
            continue


def run_group(
    cmd: List[str], cwd: Path, stdout: IO[Any], timeout: float, env: Optional[Dict[str, str]] = None
) -> Dict[str, Any]:
    """Run ``cmd`` in its own session (process group); kill the group when ``timeout`` passes.

    Returns:
        ``{"rc": exit code or None when killed, "timed_out": bool, "seconds": float}``.
    """
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=str(cwd), stdout=stdout, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    _ACTIVE.add(proc)
    try:
        rc: Optional[int] = proc.wait(timeout=max(timeout, 0.1))
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        rc, timed_out = None, True
    except BaseException:
        _kill_group(proc)  # Ctrl-C or an error in the caller: leave nothing running
        raise
    finally:
        _ACTIVE.discard(proc)
    return {"rc": rc, "timed_out": timed_out, "seconds": time.monotonic() - start}
