#!/usr/bin/env bash
# `make gpu-wheels`: download the wheels pinned in scripts/gpu-wheels.txt for CPython 3.12 on
# manylinux x86-64 (the GPU machine) into .whl/ (git-ignored; it travels with the working tree),
# replacing what was there, and print each file and the total size.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEST=${WHEELS_DIR:-.whl}
PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 \
         manylinux1_x86_64; do PLATFORMS+=(--platform "$p"); done
rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${PLATFORMS[@]}" -d "$DEST.tmp" -r scripts/gpu-wheels.txt
rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
# one wheel per pinned name, nothing else
want=$(grep -cvE '^\s*(#|$)' scripts/gpu-wheels.txt)
have=$(find "$DEST" -type f -name '*.whl' | wc -l)
if [ "$want" != "$have" ]; then
    echo "error: $have wheels in $DEST for $want pins in scripts/gpu-wheels.txt" >&2
    exit 1
fi
ls -l "$DEST"/*.whl | awk '{printf "  %8.1f KiB  %s\n", $5 / 1024, $NF; s += $5}
    END {printf "%d wheels, %.2f MiB in all\n", NR, s / 1048576}'
