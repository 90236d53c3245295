#!/usr/bin/env bash
# The GPU check, offline, on the Python that already has a CUDA torch (no venv, no registry):
#     bash scripts/gpu-check.sh --out DIR [--full] [--budget PART=SECONDS] [--no-cuda]
# PYTHON picks that Python (default python3). The carried wheels in .whl/ (make gpu-wheels) are
# installed with --no-index --no-deps --target into a temporary folder, the lab is read from this
# checkout (PYTHONPATH), and recall_lab/bench/gpu_check.py runs the parts, each within its time
# budget, writing its JSON and summary under DIR. --no-cuda is the dry run on a machine without
# a GPU (make gpu-check-dryrun). Other options: python -m recall_lab.bench.gpu_check run --help.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)  # the checkout; --out stays relative to the caller
PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1; then
    echo "error: no Python at '$PY' (set PYTHON to the Python that has torch)" >&2
    exit 2
fi
# stdlib only: a machine without an NVIDIA driver stops here with one line (unless --no-cuda)
case " $* " in
    *" --no-cuda "*) ;;
    *) PYTHONPATH="$ROOT" "$PY" -m recall_lab.bench.gpu_check preflight ;;
esac
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "error: $PY cannot import torch; set PYTHON to the Python that has a CUDA torch" >&2
    exit 2
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m recall_lab.bench.gpu_check run "$@"
