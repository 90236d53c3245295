#!/usr/bin/env bash
# What a lent GPU buys, offline, in one command on the Python that already has a CUDA torch:
#     bash scripts/gpu-campaign.sh --out DIR --budget SECONDS [--resume PATH] [--pieces LIST]
# Pieces, in order, each cut at its share of the budget: (0) workers: runs per minute of
# `sweep --workers N`; (a) check: the GPU check's zoo on FLA's kernels and the ELU bf16 probe;
# (c) frontier64: the zoo-frontier's 64-pair table; (b) zoology: the files ZOOLOGY_GLOB matches
# (skipped with one line where none does). Each finished run's record is copied under DIR/data as
# it finishes; DIR/campaign.tar.gz packs them all (pass it to --resume on the next lease).
# PYTHON picks the Python (default python3); the carried wheels in .whl/ (make gpu-wheels) are
# installed as the GPU check installs them. --no-cuda --steps N is the dry run on a CPU
# (make gpu-campaign-dryrun). Other options: python -m recall_lab.bench.gpu_campaign run --help.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)  # the checkout; --out stays relative to the caller
PY=${PYTHON:-python3}
# the experiment files of each training piece (relative to the checkout)
WORKERS_EXPERIMENT=${WORKERS_EXPERIMENT:-experiments/gpu/gpu-workers.toml}
FRONTIER_EXPERIMENT=${FRONTIER_EXPERIMENT:-experiments/zoo-frontier/zoo-frontier-64.toml}
ZOOLOGY_GLOB=${ZOOLOGY_GLOB:-'experiments/zoology/zoology-fig2-gpu*.toml'}
if ! command -v "$PY" >/dev/null 2>&1; then
    echo "error: no Python at '$PY' (set PYTHON to the Python that has torch)" >&2
    exit 2
fi
case " $* " in
    *" --no-cuda "*) ;;
    *) PYTHONPATH="$ROOT" "$PY" -m recall_lab.bench.gpu_check preflight ;;
esac
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    echo "error: $PY cannot import torch; set PYTHON to the Python that has a CUDA torch" >&2
    exit 2
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m recall_lab.bench.gpu_campaign run --workers-experiment "$WORKERS_EXPERIMENT" \
    --frontier-experiment "$FRONTIER_EXPERIMENT" --zoology-glob "$ZOOLOGY_GLOB" "$@"
