#!/usr/bin/env bash
# Make the python3 on PATH ready for `make bench` and `make test`; idempotent.
#
# Where everything is already installed (our machines, CI) it only re-points the editable install
# of attnce-plugin at this checkout and reaches no network. On a fresh machine with internet it
# installs torch, solo-learn from its pinned upstream commit (PyPI only has the unusable 1.0.2),
# the test/benchmark tools, the pinned DALI and the Fashion-MNIST data package.
set -euo pipefail
PY=${PYTHON:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SOLO_URL=https://github.com/vturrisi/solo-learn
SOLO_COMMIT=9187ea3
SOLO_DIR=${SOLO_LEARN_DIR:-$ROOT/.deps/solo-learn}
export PIP_ROOT_USER_ACTION=ignore
pip_install() { "$PY" -m pip install -q --disable-pip-version-check "$@"; }

if ! "$PY" -c "import torch, torchvision" 2>/dev/null; then
  echo "[setup] installing torch and torchvision"
  pip_install torch torchvision
fi

# solo-learn >= 1.0.6 (1.0.2, PyPI's, has no MoCo v3), checked without importing attnce_plugin.
solo_ok=$("$PY" -c "
import importlib.util as u
print(int(u.find_spec('solo') is not None and u.find_spec('solo.methods.mocov3') is not None))" 2>/dev/null || echo 0)
if [ "$solo_ok" != 1 ]; then
  echo "[setup] solo-learn >= 1.0.6 not found: installing $SOLO_URL@$SOLO_COMMIT into $SOLO_DIR"
  if [ ! -d "$SOLO_DIR/.git" ]; then
    git clone -q "$SOLO_URL" "$SOLO_DIR"
  fi
  git -C "$SOLO_DIR" checkout -q "$SOLO_COMMIT"
  # solo's setup.py imports pkg_resources (gone in setuptools 82); torchmetrics 1.x breaks its kNN.
  pip_install "setuptools<82" "torchmetrics==0.11.4"
  pip_install --no-build-isolation --use-pep517 -e "$SOLO_DIR" "torchmetrics==0.11.4"
fi

missing=$("$PY" -c "
import importlib.util
print(' '.join(m for m in ('pytest', 'matplotlib', 'tqdm', 'black', 'ruff') if importlib.util.find_spec(m) is None))")
if [ -n "$missing" ]; then
  echo "[setup] installing $missing"
  pip_install $missing
fi

# DALI (solo-learn's data.format=dali), pinned: solo-learn's temp_dali_fix.py subclasses private
# DALI internals. Installed without its declared dependencies, whose nvidia-nvimgcodec-cu12[all]
# also pulls nvidia-libnvcomp-cu12 (hundreds of MB) that CPU decoding does not use; what DALI needs
# without a GPU is listed (nvimgcodec; nvjpeg, nvjpeg2k, nvtiff only silence error prints). The pins
# equal pyproject.toml's `dali` extra (tests/plugin/test_dali.py checks the installed version).
if ! "$PY" -c "import nvidia.dali" 2>/dev/null; then
  echo "[setup] installing DALI 2.4.0 (pinned; its CPU operators run the DALI tests without a GPU)"
  pip_install --no-deps nvidia-dali-cuda120==2.4.0 nvidia-nvimgcodec-cu12==0.9.0.20 \
    nvidia-nvjpeg-cu12==12.4.0.76 nvidia-nvjpeg2k-cu12==0.11.0.51 nvidia-nvtiff-cu12==0.8.0.82
  # DALI's operators and conditionals (autograph) import these; gast and astunparse within the
  # bounds DALI 2.4.0 declares.
  pip_install optree "astunparse>=1.6.0,<=1.6.3" "gast>=0.3.3,<=0.7.0" makefun nvtx
fi

# Editable, without dependencies or build isolation: nothing is downloaded, and a clone in another
# folder (CI's) replaces whichever checkout was installed before.
pip_install --no-deps --no-build-isolation -e "$ROOT"

if [ ! -d /usr/share/datasets/fashion-mnist ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  echo "[setup] installing Debian's dataset-fashion-mnist (the benchmark's default data)"
  (apt-get install -y -qq dataset-fashion-mnist || (apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist)) >/dev/null ||
    echo "[setup] could not install dataset-fashion-mnist; the benchmark will say what to do"
fi
"$PY" -c "import attnce_plugin, solo; print('[setup] ready: attnce_plugin', attnce_plugin.__version__, 'from', attnce_plugin.__file__)" 2>/dev/null
