#!/usr/bin/env bash
# One prepared GPU run of the loss and step benchmarks (docs/performance.md, "GPU (H200)").
#
#   OUT=/some/dir bash scripts/gpu_check.sh
#
# Installs nothing. Prints the torch version and CUDA availability first and stops with exit
# code 3 if CUDA is not usable. Writes the markdown tables and logs to $OUT/ (default
# ./bench_out/gpu). Each part has a timeout (180 + 75 + 75 s), so it ends in under 6 minutes: the full loss grid
# (B in {64, 256, 1024, 4096}, M in {1, 2, 4, 8}) and the step benchmark at batch 256.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-bench_out/gpu}"
mkdir -p "$OUT"
start=$(date +%s)

python3 - <<'PY' 2>&1 | tee "$OUT/env.txt"
import sys
try:
    import torch
except Exception as exc:  # noqa: BLE001
    print(f"FAIL: cannot import torch: {exc}")
    sys.exit(3)
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, cuda build {torch.version.cuda}")
ok = torch.cuda.is_available()
print(f"torch.cuda.is_available() = {ok}")
if not ok:
    print("FAIL: CUDA is not available to torch; nothing to measure")
    sys.exit(3)
print(f"device 0: {torch.cuda.get_device_name(0)}, "
      f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.0f} GiB")
for mod in ("solo", "lightning", "omegaconf"):
    try:
        m = __import__(mod)
        print(f"{mod} {getattr(m, '__version__', '?')}")
    except Exception as exc:  # noqa: BLE001
        print(f"FAIL: cannot import {mod}: {exc}")
        sys.exit(3)
PY
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
    echo "gpu_check: environment check failed (exit $rc), see $OUT/env.txt" >&2
    exit "$rc"
fi

status=0
echo "== bench_loss.py --device cuda (full grid)"
timeout 180 python3 scripts/bench_loss.py --device cuda --out "$OUT/loss_cuda.md" \
    > "$OUT/loss_cuda.log" 2>&1 || { echo "bench_loss failed or timed out (exit $?)"; status=1; }
tail -n 60 "$OUT/loss_cuda.log"
echo "== elapsed $(( $(date +%s) - start )) s"

echo "== bench_step.py --device cuda (batch 256, 32 px, and batch 64, 96 px)"
timeout 75 python3 scripts/bench_step.py --device cuda --batch-size 256 --warmup 3 --repeats 15 \
    --out "$OUT/step_cuda_b256_32px.md" > "$OUT/step_cuda_b256_32px.log" 2>&1 \
    || { echo "bench_step (32 px) failed or timed out (exit $?)"; status=1; }
tail -n 12 "$OUT/step_cuda_b256_32px.log"
timeout 75 python3 scripts/bench_step.py --device cuda --batch-size 64 --size 96 --small-size 48 \
    --warmup 3 --repeats 10 --out "$OUT/step_cuda_b64_96px.md" > "$OUT/step_cuda_b64_96px.log" 2>&1 \
    || { echo "bench_step (96 px) failed or timed out (exit $?)"; status=1; }
tail -n 12 "$OUT/step_cuda_b64_96px.log"
echo "== total elapsed $(( $(date +%s) - start )) s, status $status"
exit "$status"
