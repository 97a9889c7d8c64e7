"""scripts/gpu_check.sh: ``prepare`` builds the carried folder, ``run --cpu --tiny`` runs every part
that needs no CUDA, and the driver keeps going past failures and inside its deadline.

Needs what ``prepare`` needs: solo-learn's checkout, the Fashion-MNIST IDX files and, the first
time only, pip access to PyPI (wheels are then kept in ``$ATTNCE_GPUCHECK_WHEEL_CACHE`` or
``~/.cache/attnce_plugin/gpucheck-wheels``). These tests FAIL, not skip, when one is missing: the
GPU check is prepared where the tests run, and a check that cannot be prepared has rotted.
About a minute on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path
from typing import Dict, List

import pytest
from helpers.scripts import REPO_ROOT as REPO  # noqa: E402

from attnce_bench.gpu_check import MAX_BYTES
from attnce_bench.gpu_check.common import FAIL, OK, SKIPPED, TIMEOUT
from attnce_bench.gpu_check.knn_check import parse_results
from attnce_bench.gpu_check.prepare import WHEELS, tree_bytes

pytestmark = pytest.mark.integration  # trains through solo-learn or runs its scripts


SCRIPT = REPO / "scripts" / "gpu_check.sh"


def _env(**extra: str) -> Dict[str, str]:
    env = dict(os.environ)
    env.update({"PYTHONWARNINGS": "ignore", "PYTHON": sys.executable, **extra})
    return env


def _script(args: List[str], timeout: float, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=str(REPO),
        env=_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``prepare`` into a fresh folder (wheels from the download cache, downloaded if absent)."""
    folder = tmp_path_factory.mktemp("gpucheck") / ".gpucheck"
    proc = _script(["prepare", "--dir", str(folder)], timeout=300)
    assert proc.returncode == 0, f"prepare failed:\n{proc.stdout[-4000:]}"
    assert "MiB (limit 48 MiB)" in proc.stdout, proc.stdout
    return folder


def test_prepare_builds_a_complete_folder_within_48_mib(prepared: Path) -> None:
    manifest = json.loads((prepared / "manifest.json").read_text())
    total = tree_bytes(prepared)
    assert manifest["bytes"] + (prepared / "manifest.json").stat().st_size == total <= MAX_BYTES
    assert sorted(p.name for p in prepared.iterdir()) == [
        "data",
        "manifest.json",
        "solo-learn",
        "wheels",
    ]
    # solo-learn: the package and its scripts, no byte code.
    solo = prepared / "solo-learn"
    for name in (
        "solo/__init__.py",
        "solo/methods/base.py",
        "solo/utils/knn.py",
        "main_pretrain.py",
        "main_knn.py",
        "LICENSE",
    ):
        assert (solo / name).is_file(), name
    assert not list(solo.rglob("__pycache__"))
    # Every pinned wheel, pure Python, as the manifest lists it.
    wheels = sorted(p.name for p in (prepared / "wheels").iterdir())
    assert len(wheels) == len(WHEELS)
    for pin in WHEELS:
        assert any(pin.matches(w) for w in wheels), (pin.spec, wheels)
    assert sorted(w["file"] for w in manifest["wheels"]) == wheels
    assert any(w.startswith("torchmetrics-0.11.4-") for w in wheels)
    # Fashion-MNIST image folders: 10 classes, the manifest's counts.
    data = manifest["data"]
    for split, n in (("train", data["num_train"]), ("val", data["num_val"])):
        root = prepared / data[split]
        assert len([d for d in root.iterdir() if d.is_dir()]) == 10
        assert len(list(root.rglob("*.png"))) == n


def test_repository_ignores_the_prepared_folder() -> None:
    # It travels with `carry`, never in a commit.
    proc = subprocess.run(["git", "check-ignore", "-q", ".gpucheck/manifest.json"], cwd=str(REPO))
    assert proc.returncode == 0, ".gpucheck/ is not git-ignored"


def test_prepare_again_needs_no_network(prepared: Path, tmp_path: Path) -> None:
    # The wheels are in the cache now: pip must not be asked (an unreachable index would fail it).
    proc = _script(
        ["prepare", "--dir", str(tmp_path / "again")],
        timeout=300,
        PIP_NO_INDEX="1",
        PIP_INDEX_URL="http://127.0.0.1:9/simple",
        PIP_FIND_LINKS="",
    )
    assert proc.returncode == 0, proc.stdout[-4000:]


def test_run_cpu_tiny_runs_every_cpu_part(prepared: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _script(
        [
            "run",
            "--cpu",
            "--tiny",
            "--dir",
            str(prepared),
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
        ],
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-6000:]
    # What the device tool brings back: at most 8 plain files, plain names.
    assert sorted(p.name for p in out.iterdir()) == [
        "logs.tar.gz",
        "report.md",
        "results.json",
        "summary.md",
    ]
    results = json.loads((out / "results.json").read_text())
    status = {p["id"]: p for p in results["parts"]}
    assert list(status) == ["0", "1", "2", "3", "4", "5", "6a", "6b"]
    for pid in ("0", "1", "2", "4", "5", "6a"):
        assert status[pid]["status"] == OK, (pid, status[pid]["key"])
    assert status["3"]["status"] == SKIPPED and "CUDA" in status["3"]["key"]
    assert status["6b"]["status"] == SKIPPED and "compiling" in status["6b"]["key"]
    # Part 2: solo-learn's main_pretrain.py on the three shipped custom configs.
    runs = status["2"]["data"]["runs"]
    assert sorted(r["config"] for r in runs) == [
        "attentionnce",
        "attentionnce_multicrop",
        "mocov3_attentionnce",
    ]
    for r in runs:
        assert r["crops_args"] == [2, 4] and r["finite"] and r["checkpoint_dir"], r
    multicrop = next(r for r in runs if r["config"] == "attentionnce_multicrop")
    assert multicrop["crop_sizes"] == [32, 32, 16, 16, 16, 16]
    # The environment the parts saw: the carried torchmetrics and solo-learn, this checkout.
    assert status["0"]["data"]["versions"]["torchmetrics"] == "0.11.4"
    summary = (out / "summary.md").read_text()
    assert "| part | what | status | s | key numbers |" in summary
    assert "## Part 6a" in (out / "report.md").read_text()
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    assert "part2/log.txt" in names and not any(n.endswith(".ckpt") for n in names)


FAKE_PART = textwrap.dedent("""
    import os, sys, time
    from attnce_bench.gpu_check.common import check, part_main

    def run(ctx):
        behave = ctx.args["behave"]
        ctx.emit("| fake | table |")
        ctx.key = behave + " started"
        ctx.save()
        if behave == "fail":
            check(False, "told to fail")
        if behave == "crash":
            os._exit(7)
        if behave == "sleep":
            # A child in its own session, as main_pretrain.py runs: it must die with the part.
            from attnce_bench.gpu_check.common import run_logged
            pid_file = ctx.out.parent.parent / "child.pid"
            code = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid()))"
            run_logged([sys.executable, "-c", code + "; time.sleep(120)"], ctx.out,
                       ctx.out / "child.log", 300)
        ctx.key = "finished"

    if __name__ == "__main__":
        sys.exit(part_main(run))
    """)


def test_driver_keeps_going_past_failures_and_inside_its_deadline(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from attnce_bench.gpu_check.driver import Part, run_all

    (tmp_path / "fake_gpucheck_part.py").write_text(FAKE_PART)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    fake = "fake_gpucheck_part"
    parts = [
        Part("1", "fails", fake, 60, 60, 1, args={"behave": "fail"}),
        Part("2", "crashes", fake, 60, 60, 1, args={"behave": "crash"}),
        Part("3", "sleeps past its timeout", fake, 60, 4, 1, args={"behave": "sleep"}),
        Part("4", "passes", fake, 60, 60, 1, args={"behave": "ok"}),
        Part("5", "needs more than is left", fake, 60, 60, 10**5, args={"behave": "ok"}),
        Part("6", "GPU only", fake, 60, 60, 1, cpu_skip="needs CUDA", args={"behave": "ok"}),
    ]
    out = tmp_path / "out"
    rc = run_all(prepared, out, tmp_path / "work", cpu=True, tiny=True, deadline_s=120, parts=parts)
    assert rc == 1
    got = {p["id"]: p for p in json.loads((out / "results.json").read_text())["parts"]}
    assert got["1"]["status"] == FAIL and "told to fail" in got["1"]["key"]
    assert got["2"]["status"] == FAIL and "exit code 7" in got["2"]["key"]
    assert got["3"]["status"] == TIMEOUT and "sleep started" in got["3"]["key"]
    assert got["3"]["seconds"] < 30
    child = int((tmp_path / "child.pid").read_text())
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):  # the part's own child went down with it
        os.kill(child, 0)
    assert got["4"]["status"] == OK and got["4"]["key"] == "finished"
    assert got["5"]["status"] == SKIPPED and "does not fit" in got["5"]["key"]
    assert got["6"]["status"] == SKIPPED and got["6"]["key"] == "needs CUDA"
    report = (out / "report.md").read_text()
    assert "| fake | table |" in report and "Log tail:" in report


def test_run_without_prepared_folder_says_what_to_do(tmp_path: Path) -> None:
    proc = _script(
        [
            "run",
            "--cpu",
            "--dir",
            str(tmp_path / "missing"),
            "--out",
            str(tmp_path / "out"),
            "--work",
            str(tmp_path / "work"),
        ],
        timeout=60,
    )
    assert proc.returncode == 2
    assert "gpu_check.sh prepare" in proc.stdout
    assert "**FAIL**" in (tmp_path / "out" / "summary.md").read_text()


def test_knn_output_parsing() -> None:
    text = textwrap.dedent("""
        ### BACKBONE ###
        ---
        Running k-NN with params: distance_fx=cosine, k=20, T=0.07...
        Result: acc@1=61.328125, acc@5=98.4375
        ---
        Running k-NN with params: distance_fx=euclidean, k=20, T=None...
        Result: acc@1=57.03125, acc@5=98.4375

        ### PROJECTOR ###
        ---
        Running k-NN with params: distance_fx=cosine, k=20, T=0.07...
        Result: acc@1=51.5625, acc@5=94.140625
        """)
    rows = parse_results(text)
    assert [(r["feature"], r["distance"], r["T"], r["acc1"]) for r in rows] == [
        ("backbone", "cosine", "0.07", 61.328125),
        ("backbone", "euclidean", "None", 57.03125),
        ("projector", "cosine", "0.07", 51.5625),
    ]
