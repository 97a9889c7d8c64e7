#!/usr/bin/env bash
# The GPU check: the tests marked `gpu` and the step-cost benchmark on a device (docs/performance.md,
# "On a GPU").
#
#   bash scripts/gpu_check.sh prepare            # here, where pip reaches PyPI: builds .gpucheck/
#   OUT=/some/dir bash scripts/gpu_check.sh run  # on the GPU machine, with .gpucheck carried
#   bash scripts/gpu_check.sh run --cpu          # the same on this CPU, small sizes
#
# prepare copies solo-learn's solo/ and main_*.py from the installed checkout and the pure-Python
# wheels the GPU machine lacks (Python 3.12 there; those missing from $GPUCHECK_WHEEL_CACHE are
# fetched into it once) into .gpucheck/ (git-ignored, at most 48 MiB).
# run unpacks the wheels into a temporary folder put first on PYTHONPATH (torchmetrics 0.11.4
# then shadows the machine's 1.x), runs each command under `timeout` within one 9-minute deadline,
# writes its output and log under $OUT (default bench_out/gpu_check) and summary.md there, and
# exits 1 if a command failed or did not fit, 2 if .gpucheck is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
B=.gpucheck
# name==version of every wheel carried: the versions installed here, where the suite passes (the
# check's own test builds its wheel cache from them). setuptools only unpacked where pkg_resources
# is missing (torchmetrics 0.11.4 imports it); antlr4 4.9.3 is an sdist on PyPI, built here.
PINS=(omegaconf==2.3.1 hydra_core==1.3.8 antlr4_python3_runtime==4.9.3 torchmetrics==0.11.4
  setuptools==81.0.0 pytest==9.0.3 iniconfig==2.3.0 pluggy==1.6.0 pygments==2.20.0)

prepare() {
  local cache=${GPUCHECK_WHEEL_CACHE:-$HOME/.cache/attnce_plugin/gpucheck-wheels} solo pin
  solo=$("$PY" -c 'from attnce_plugin.seam import solo_checkout_dir as d; print(d())') ||
    { echo "prepare copies solo-learn from its checkout: install it first" >&2; return 2; }
  rm -rf "$B" && mkdir -p "$B/wheels" "$B/solo-learn" "$cache" || return 2
  cp -r "$solo/solo" "$solo"/main_*.py "$solo/LICENSE" "$B/solo-learn/" || return 2
  find "$B" -name __pycache__ -prune -exec rm -rf {} +
  git -C "$solo" rev-parse HEAD >"$B/solo-learn/COMMIT" 2>/dev/null
  for pin in "${PINS[@]}"; do
    if ! compgen -G "$cache/${pin/==/-}-*.whl" >/dev/null; then
      if [ "${pin%%==*}" = antlr4_python3_runtime ]; then
        "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$cache" "$pin"
      else
        "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
          --implementation py --platform any -d "$cache" "$pin"
      fi || { echo "pip could not get $pin (needs PyPI once; cache: $cache)" >&2; return 2; }
    fi
    cp "$cache/${pin/==/-}"-*.whl "$B/wheels/" || return 2
  done
  local bytes
  bytes=$(du -sb "$B" | cut -f1)
  echo "$B: $((bytes / 1024)) KiB (solo-learn $(du -sh "$B/solo-learn" | cut -f1), wheels" \
    "$(du -sh "$B/wheels" | cut -f1)); limit 48 MiB"
  [ "$bytes" -le $((48 * 1024 * 1024)) ] || { echo "$B is over 48 MiB" >&2; return 2; }
}

run() {
  local dev=cuda
  [ "${1:-}" = --cpu ] && dev=cpu
  OUT=${OUT:-bench_out/gpu_check}
  mkdir -p "$OUT" && rm -f "$OUT/summary.md"
  if [ ! -f "$B/solo-learn/main_pretrain.py" ] || ! compgen -G "$B/wheels/*.whl" >/dev/null; then
    echo "$B missing: run 'bash scripts/gpu_check.sh prepare' here first, then carry $B" >&2
    return 2
  fi
  local site whl=()
  site=$(mktemp -d)
  # shellcheck disable=SC2064 # expanded now: $site is local to this function
  trap "rm -rf '$site'" EXIT
  for w in "$B"/wheels/*.whl; do
    case $w in */setuptools-*) "$PY" -c 'import pkg_resources' 2>/dev/null && continue ;; esac
    whl+=("$w")
  done
  # A pure-Python wheel is a zip of the installed files: unpacking it is installing it.
  "$PY" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
    "$site" "${whl[@]}" || return 2
  export PYTHONPATH="$site:$PWD/$B/solo-learn:$PWD" PYTHONWARNINGS=ignore WANDB_MODE=disabled

  local small_step=() precisions=(16-mixed bf16-mixed)
  if [ "$dev" = cpu ]; then  # 16-mixed is CUDA's (fp16 autocast + GradScaler)
    # two of the four methods: the CPU run checks the commands, the GPU run times every method
    small_step=(--size 32 --batch-size 8 --steps 3 --warmup 1 --rounds 2
      --methods simclr attentionnce)
    precisions=(32 bf16-mixed)
  fi
  local deadline=$((SECONDS + ${GPUCHECK_DEADLINE:-540})) failed=0
  printf '| command | exit | seconds | output |\n|---|---|---|---|\n' >"$OUT/summary.md"
  step() {  # step NAME CAP OUTPUT COMMAND...: run under min(CAP, time left), log to $OUT/NAME.log
    local name=$1 cap=$2 out=$3 left=$((deadline - SECONDS)) start=$SECONDS rc=skipped
    shift 3
    if [ "$left" -gt 10 ]; then
      timeout -k 10 $((cap < left ? cap : left)) "$@" >"$OUT/$name.log" 2>&1
      rc=$?
    fi
    [ "$rc" = 0 ] || failed=1
    echo "| $name | $rc$([ "$rc" = 124 ] && echo ' (timed out)') | $((SECONDS - start)) | $out |" \
      >>"$OUT/summary.md"
  }
  step env 60 env.log "$PY" -c "
import sys, torch, lightning, torchmetrics, omegaconf, hydra, solo
print('python', sys.version.split()[0], '| torch', torch.__version__, '| lightning',
      lightning.__version__, '| torchmetrics', torchmetrics.__version__, '| omegaconf',
      omegaconf.__version__, '| hydra', hydra.__version__, '| solo', solo.__file__)
print('cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')
sys.exit(3 if '$dev' == 'cuda' and not torch.cuda.is_available() else 0)"
  # GPUCHECK_TESTS narrows the tests (the check's own test, which runs inside the suite). DALI is
  # not carried (424 MB) and test_dali.py fails its collection without it, so it is left out.
  # shellcheck disable=SC2086
  step tests 300 "tests.log, tests.xml" "$PY" -m pytest -q -p no:cacheprovider -m gpu \
    --device "$dev" --junitxml "$OUT/tests.xml" --ignore tests/plugin/test_dali.py \
    ${GPUCHECK_TESTS:-tests}
  for p in "${precisions[@]}"; do
    # shellcheck disable=SC2016 # sh -c's own "$@": the table to its file, the rest to the log
    step "step_cost_$p" 150 "step_cost_$p.md" sh -c '"$@" >"$0"' "$OUT/step_cost_$p.md" \
      "$PY" -m benchmarks.step_cost --device "$dev" --precision "$p" "${small_step[@]}"
  done
  # the device tool brings back a few files only: the tests' verdict travels in the summary
  echo "tests: $(tail -n 1 "$OUT/tests.log" 2>/dev/null)" >>"$OUT/summary.md"
  cat "$OUT/summary.md"
  echo "outputs and logs in $OUT"
  return "$failed"
}

case ${1:-run} in  # no argument: run (as the first script, which took none)
  prepare) prepare ;;
  run) shift $(($# > 0)) && run "$@" ;;
  *) echo "usage: bash scripts/gpu_check.sh prepare | run [--cpu]" >&2 && exit 2 ;;
esac
