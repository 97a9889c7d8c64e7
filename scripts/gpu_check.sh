#!/usr/bin/env bash
# One prepared, self-contained GPU check (docs/performance.md, "GPU (H200)").
#
#   bash scripts/gpu_check.sh prepare                  # here (pip reaches PyPI): builds .gpucheck/
#   OUT=/some/dir bash scripts/gpu_check.sh run        # on the GPU machine, with .gpucheck/ carried
#   bash scripts/gpu_check.sh run --cpu [--tiny]       # the parts that need no CUDA, on this CPU
#
# prepare copies solo-learn (solo/ and main_*.py), downloads the pure-Python wheels the GPU machine
# lacks and writes a small Fashion-MNIST subset, at most 48 MiB in all. run installs the wheels
# offline into a temporary folder put first on PYTHONPATH, then runs every part in priority order
# under one 9-minute deadline and writes summary.md, report.md, results.json and logs.tar.gz to
# $OUT (default bench_out/gpu_check). All the logic is in attnce_bench/gpu_check/ (python3 -m
# attnce_bench.gpu_check --help); exit codes: 0 ok, 1 a part failed or timed out, 2 .gpucheck
# missing or damaged, 3 CUDA not usable (without --cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
# No arguments: `run` (the earlier script took none; its command line keeps working).
[ "$#" -gt 0 ] || set -- run
exec "${PYTHON:-python3}" -m attnce_bench.gpu_check "$@"
