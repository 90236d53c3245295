#!/usr/bin/env bash
# `make lock`: resolve requirements-test.in into requirements-test.lock with uv (installed into
# a throwaway venv under the cache), for CPython 3.11 on x86_64 Linux (the CI machine). The new
# lock is written beside the old one and moved over it only when the resolution succeeded, so a
# failure (no network, a conflict) keeps the old lock and says why in one line.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
tools=${RECALL_LAB_CACHE:-$HOME/.cache/recall-lab}/lock-tools
new=requirements-test.lock.new
log=$(mktemp)
trap 'rm -f "$new" "$log"' EXIT
if ! { test -x "$tools/bin/uv" || { "$PYTHON" -m venv "$tools" && "$tools/bin/python" -m pip \
        install --quiet "uv>=0.5"; }; } >"$log" 2>&1; then
    echo "make lock: could not install uv (no network?); requirements-test.lock is unchanged" >&2
    exit 1
fi
if ! "$tools/bin/uv" pip compile requirements-test.in -o "$new" --python-version 3.11 \
        --python-platform x86_64-unknown-linux-gnu --no-header --annotation-style line \
        --no-emit-package recall-lab >"$log" 2>&1; then
    echo "make lock: resolution failed ($(grep -m1 -iE 'error|fail' "$log" || tail -n1 "$log"));" \
        "requirements-test.lock is unchanged" >&2
    exit 1
fi
{
    echo "# The locked test environment: \`make lock\` writes it from requirements-test.in (uv pip"
    echo "# compile, CPython 3.11, x86_64 Linux); \`make test\` and \`make demo\` install under it as"
    echo "# constraints. Regenerate it, then run \`make test\` before committing it."
    grep -v '^-e ' "$new"
} >requirements-test.lock
echo "requirements-test.lock: $(grep -c '==' requirements-test.lock) packages pinned"
