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
# --campaign (`make gpu-campaign-dryrun`): step 3 runs scripts/gpu-campaign.sh --no-cuda instead,
# with tiny budgets (CAMPAIGN_BUDGET, default 420 s in all; every training run DRYRUN_STEPS steps,
# default 5; workers 1 and 2); results under runs/gpu-campaign-dryrun-<UTC time>/; then a second
# lease resumed from the first one's tarball (frontier64 and zoology, with a stand-in zoology
# file), results beside it with the suffix -lease2. DRYRUN_IMAGE
# names a Python with torch to use in place of the stand-in (the campaign's logic does not depend
# on torch 2.11); the carried wheels are cp312, so with another Python version they are not
# installed (--no-wheels, said in one line) and that Python's own packages are used.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODE=check
[ "${1:-}" = "--campaign" ] && MODE=campaign
IMAGE_PINS=scripts/gpu-dryrun-image.txt
CACHE=${RECALL_LAB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/recall-lab}
OUT=${DRYRUN_OUT:-$ROOT/runs/gpu-$([ $MODE = campaign ] && echo campaign-)dryrun-$(date -u +%Y%m%d-%H%M%S)}

find_py312() {
    for c in "${DRYRUN_PYTHON:-}" python3.12 "$(command -v pyenv >/dev/null 2>&1 && \
            ls -d "$(pyenv root)"/versions/3.12*/bin/python3.12 2>/dev/null | tail -1)"; do
        [ -n "$c" ] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' \
            >/dev/null 2>&1 && { echo "$c"; return; }
    done
    return 1
}
key=$(sha256sum "$IMAGE_PINS" | cut -c1-12)
IMG=$CACHE/gpu-dryrun/py312-$key
if [ -n "${DRYRUN_IMAGE:-}" ]; then  # a Python with torch in place of the stand-in
    IMG=$(cd "$(dirname "$DRYRUN_IMAGE")/.." && pwd)
    echo "dry run: $DRYRUN_IMAGE in place of the stand-in (DRYRUN_IMAGE)"
else
    PY312=$(find_py312) || { echo "error: no CPython 3.12 here (the GPU machine's; the" \
        "wheels are cp312): set DRYRUN_PYTHON" >&2; exit 2; }
fi
if ! ls .whl/*.whl >/dev/null 2>&1; then
    if [ $MODE = check ]; then
        echo "error: no wheels in .whl/: run make gpu-wheels first" >&2
        exit 2
    fi
    echo "dry run: no wheels in .whl/ (make gpu-wheels): the campaign says so and goes on"
fi
t0=$(date +%s)
if [ -z "${DRYRUN_IMAGE:-}" ] && { [ "${FRESH:-0}" = 1 ] || [ ! -e "$IMG/.complete" ]; }; then
    echo "dry run: making the stand-in Python in $IMG (torch 2.11.0, no pydantic)"
    rm -rf "$IMG" && mkdir -p "$(dirname "$IMG")"
    "$PY312" -m venv "$IMG"
    "$IMG/bin/python" -m pip install --quiet --no-deps --no-compile -r "$IMAGE_PINS"
    touch "$IMG/.complete"
fi
t1=$(date +%s)
if [ -z "${DRYRUN_IMAGE:-}" ] && "$IMG/bin/python" -c "import pydantic" >/dev/null 2>&1; then
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
[ -d .whl ] && cp -r .whl "$WORK/checkout/.whl"
echo "dry run: copied the checkout as it would travel ($(du -sh "$WORK/checkout" | cut -f1)," \
    "$(ls .whl/*.whl 2>/dev/null | wc -l) wheels)"

NET=()
if unshare -n true 2>/dev/null; then
    NET=(unshare -n)
    echo "dry run: network cut (unshare -n)"
else
    echo "dry run: this user cannot cut the network (unshare -n); pip still runs with --no-index"
fi
mkdir -p "$(dirname "$OUT")"
if [ $MODE = campaign ]; then
    WHEELS=()
    "$IMG/bin/python" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null \
        || { WHEELS=(--no-wheels); echo "dry run: $IMG/bin/python is not CPython 3.12: the" \
             "cp312 wheels are not installed (--no-wheels)"; }
    set +e
    "${NET[@]}" env -C "$WORK/checkout" PYTHON="$IMG/bin/python" \
        RECALL_LAB_CACHE="$WORK/cache" OMP_NUM_THREADS=1 bash scripts/gpu-campaign.sh --no-cuda \
        --out "$OUT" --work "$WORK/work" --budget "${CAMPAIGN_BUDGET:-420}" \
        --steps "${DRYRUN_STEPS:-5}" --workers-list 1,2 "${WHEELS[@]}"
    rc=$?
    # a second lease: from the first one's tarball, the finished run skipped; the zoology piece
    # with experiments/gpu/gpu-workers.toml standing in for its files (none may exist yet)
    if [ $rc = 0 ]; then
        echo "dry run: a second lease, resumed from $OUT/campaign.tar.gz"
        "${NET[@]}" env -C "$WORK/checkout" PYTHON="$IMG/bin/python" \
            RECALL_LAB_CACHE="$WORK/cache" OMP_NUM_THREADS=1 \
            ZOOLOGY_GLOB=experiments/gpu/gpu-workers.toml bash scripts/gpu-campaign.sh --no-cuda \
            --out "$OUT-lease2" --work "$WORK/work2" --budget 200 --steps "${DRYRUN_STEPS:-5}" \
            --pieces frontier64,zoology --resume "$OUT/campaign.tar.gz" "${WHEELS[@]}"
        rc=$?
    fi
    set -e
    echo "dry run: campaign exit $rc in $(($(date +%s) - t1)) s after the Python was ready;" \
        "results in $OUT and $OUT-lease2"
    exit $rc
fi
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
