#!/usr/bin/env bash
# `make gpu-check-dryrun`: the offline GPU check (scripts/gpu-check.sh --no-cuda) on a machine
# without a GPU, as the GPU machine would run it:
#   1. a stand-in for that machine's Python: a fresh virtual environment of CPython 3.12 with
#      torch 2.11.0 and the packages in scripts/gpu-dryrun-image.txt (--no-deps; no pydantic),
#      made once per version of that file under $RECALL_LAB_CACHE (default ~/.cache/recall-lab);
#      FRESH=1 makes it again;
#   2. a copy of what travels to the GPU machine: the tracked and untracked-not-ignored files of
#      this checkout, and .whl/ (make gpu-wheels);
#   3. in that copy, with the network cut (`unshare -n`, where this user may), and a fresh cache
#      for the native kernels: scripts/gpu-check.sh --no-cuda, its budgets times BUDGET_SCALE
#      (default 4: this is a small shared CPU); then scripts/torch_names.py on that torch.
#      Results under runs/gpu-dryrun-<UTC time>/ (DRYRUN_OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
IMAGE_PINS=scripts/gpu-dryrun-image.txt
CACHE=${RECALL_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/recall-lab}
OUT=${DRYRUN_OUT:-$ROOT/runs/gpu-dryrun-$(date -u +%Y%m%d-%H%M%S)}

find_py312() {
    for c in "${DRYRUN_PYTHON:-}" python3.12 "$(command -v pyenv >/dev/null 2>&1 && \
            ls -d "$(pyenv root)"/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)"; do
        [ -n "$c" ] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' \
            >/dev/null 2>&1 && { echo "$c"; return; }
    done
    return 1
}
PY312=$(find_py312) || { echo "error: no CPython 3.12 here (the GPU machine's; the wheels" \
    "are cp312): set DRYRUN_PYTHON" >&2; exit 2; }
if ! ls .whl/*.whl >/dev/null 2>&1; then
    echo "error: no wheels in .whl/: run make gpu-wheels first" >&2
    exit 2
fi

key=$(sha256sum "$IMAGE_PINS" | cut -c1-12)
IMG=$CACHE/gpu-dryrun/py312-$key
t0=$(date +%s)
if [ "${FRESH:-0}" = 1 ] || [ ! -e "$IMG/.complete" ]; then
    echo "dry run: making the stand-in Python in $IMG (torch 2.11.0, no pydantic)"
    rm -rf "$IMG" && mkdir -p "$(dirname "$IMG")"
    "$PY312" -m venv "$IMG"
    "$IMG/bin/python" -m pip install --quiet --no-deps --no-compile -r "$IMAGE_PINS"
    touch "$IMG/.complete"
fi
t1=$(date +%s)
if "$IMG/bin/python" -c "import pydantic" >/dev/null 2>&1; then
    echo "error: the stand-in Python has pydantic; the GPU machine has none" >&2
    exit 1
fi
echo "dry run: stand-in Python ready in $((t1 - t0)) s: $("$IMG/bin/python" -c \
    'import sys, torch; print(f"Python {sys.version.split()[0]}, torch {torch.__version__}, cuda available: {torch.cuda.is_available()}")')"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/recall-lab-dryrun-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/checkout"
git ls-files -z --cached --others --exclude-standard \
    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$WORK/checkout"
cp -r .whl "$WORK/checkout/.whl"
echo "dry run: copied the checkout as it would travel ($(du -sh "$WORK/checkout" | cut -f1)," \
    "$(ls .whl/*.whl | wc -l) wheels)"

NET=()
if unshare -n true 2>/dev/null; then
    NET=(unshare -n)
    echo "dry run: network cut (unshare -n)"
else
    echo "dry run: this user cannot cut the network (unshare -n); pip still runs with --no-index"
fi
mkdir -p "$(dirname "$OUT")"
set +e
"${NET[@]}" env -C "$WORK/checkout" PYTHON="$IMG/bin/python" RECALL_LAB_CACHE="$WORK/cache" \
    OMP_NUM_THREADS=1 bash -c '
    "$PYTHON" -c "
import socket
try:
    socket.create_connection((\"pypi.org\", 443), timeout=5)
    print(\"dry run: pypi.org is reachable from here\")
except OSError as exc:
    print(f\"dry run: no network here (pypi.org: {exc})\")"
    site="$1/recall-lab-gpu-site"
    bash scripts/gpu-check.sh --no-cuda --out "$0" --budget-scale "${BUDGET_SCALE:-4}" \
        --site "$site"
    rc=$?
    echo "dry run: the torch names that the lab and its tests use, on this torch:"
    PYTHONPATH="$site:$PWD" "$PYTHON" scripts/torch_names.py || rc=1
    exit $rc
' "$OUT" "$WORK"
rc=$?
set -e
echo "dry run: exit $rc in $(($(date +%s) - t1)) s after the stand-in was ready; results in $OUT"
exit $rc
