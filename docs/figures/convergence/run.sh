#!/usr/bin/env bash
# FSDD convergence (issue #43 §3) on a lent machine's CPU cores: `speechscale bench convergence`, 4 learners a
# distributed run, as many runs at a time as the cores allow (4 cores each). The GPU is hidden, so the learners
# train on the CPU as on a machine without one and the runs join those made here (the same settings).
#   bash docs/figures/convergence/run.sh OUT [SEEDS] [STRATEGIES] [MINUTES]
# Resumes from .gpudata/conv-fsdd.jsonl when it is there (carry .gpudata: FSDD lies in .gpudata/shared/data/fsdd),
# starts no run after MINUTES (default 4; runs under way finish) and keeps OUT/runs.jsonl current, the old runs
# and the new, also when the call is cut off. Then:
#   cp OUT/runs.jsonl docs/figures/convergence/fsdd.jsonl (and .gpudata/conv-fsdd.jsonl, to resume from it)
set -euo pipefail
out=${1:?usage: run.sh OUT [SEEDS] [STRATEGIES] [MINUTES]}
seeds=${2:-1,2,3}
strategies=${3:-single,allreduce,adpsgd-fixed_ring,adpsgd-random_ring,adpsgd-delay_by_one}
minutes=${4:-4}
source docs/figures/gpu/env.sh
export CUDA_VISIBLE_DEVICES=
runs=/tmp/conv-fsdd
parallel=$(( $(nproc) / 4 )); [ "$parallel" -ge 1 ] || parallel=1
mkdir -p "$runs" "$out"
[ -f .gpudata/conv-fsdd.jsonl ] && cp .gpudata/conv-fsdd.jsonl "$runs/runs.jsonl"
python3 -c 'import os, torch; print("cpus", os.cpu_count(), "torch", torch.__version__, "cuda", torch.cuda.is_available())'
(while sleep 5; do [ -f "$runs/runs.jsonl" ] && cp "$runs/runs.jsonl" "$out/runs.jsonl"; done) &
copier=$!
python3 -m speechscale.cli bench convergence --config configs/fsdd.yaml --data-root ../shared/data/fsdd --procs 4 \
    --seeds "$seeds" --strategies "$strategies" --parallel "$parallel" --start-within "$minutes" \
    --out "$runs" || echo "bench convergence failed (exit $?)"
kill "$copier"
if [ -f "$runs/runs.jsonl" ]; then cp "$runs/runs.jsonl" "$out/runs.jsonl"; wc -l "$out/runs.jsonl"; else echo "no runs yet"; fi
