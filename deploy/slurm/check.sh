#!/bin/bash
# `make deploy-check`: deploy/slurm/train.sbatch under a real SLURM on this machine. Starts the one-node
# cluster (local-cluster.sh, root), submits yesno on NPROC_PER_NODE CPU workers, sends the preemption notice
# (`scancel --signal=TERM`) after the first checkpoint, and checks that the job checkpointed, was requeued,
# resumed from that checkpoint and trained to its last epoch. Prints one JSON line of figures; exit 1 if not.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
venv=${VENV:-.venv}
case "$venv" in /*) ;; *) venv="$root/$venv" ;; esac
export PATH="$venv/bin:$PATH"
command -v speechscale > /dev/null || { echo "deploy-check: speechscale is not installed (make setup)" >&2; exit 1; }
job=
cleanup() {  # no job or daemon is left behind (KEEP_CLUSTER=1 keeps slurmctld and slurmd running)
  [ -z "${job:-}" ] || scancel "$job" 2> /dev/null || true
  [ -n "${KEEP_CLUSTER:-}" ] || deploy/slurm/local-cluster.sh stop
}
trap cleanup EXIT
deploy/slurm/local-cluster.sh start

work=$(mktemp -d /tmp/speechscale-slurm.XXXXXX)
export NPROC_PER_NODE=${NPROC_PER_NODE:-2} CONFIG=configs/yesno.yaml OUT_DIR="$work/run" RDZV_PORT=${RDZV_PORT:-29411}
export OVERRIDES="data.root=$root/../shared/data/yesno trainer.max_epochs=${EPOCHS:-6} trainer.threads=1 trainer.progress=false trainer.target_wer=-1"
started=$(date +%s.%N)
job=$(sbatch --parsable --nodes=1 --gpus-per-node=0 --cpus-per-task="$(nproc)" --time=30:00 \
  --output="$work/%x-%j.out" deploy/slurm/train.sbatch)
echo "deploy-check: submitted job $job ($NPROC_PER_NODE workers, yesno); log $work/speechscale-$job.out"

state() { scontrol show job "$job" 2> /dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
wait_until() {  # wait_until SECONDS COMMAND...
  local end=$(( $(date +%s) + $1 )); shift
  until "$@"; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.5
  done
}
has_checkpoint() { [ -f "$OUT_DIR/checkpoints/latest" ]; }
finished() {
  case "$(state)" in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) return 0 ;;
  esac
  return 1
}

if ! wait_until 600 has_checkpoint; then
  echo "deploy-check: no checkpoint within 10 minutes (job state $(state))" >&2
  tail -n 20 "$work/speechscale-$job.out" >&2 || true
  exit 1
fi
notice=$(date +%s.%N)
scancel --signal=TERM "$job"
echo "deploy-check: sent SIGTERM to job $job's training step (SLURM's preemption notice)"
if ! wait_until 1200 finished; then
  echo "deploy-check: job $job did not finish within 20 minutes (state $(state))" >&2
  tail -n 20 "$work/speechscale-$job.out" >&2 || true
  exit 1
fi
ended=$(date +%s.%N)
restarts=$(scontrol show job "$job" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')

python3 - "$OUT_DIR/metrics.jsonl" "$(state)" "${restarts:-0}" "$started" "$notice" "$ended" "${EPOCHS:-6}" <<'EOF'
import json, sys
path, state, restarts, started, notice, ended, epochs = sys.argv[1:]
rows = [json.loads(x) for x in open(path) if x.strip()]
stops = [r for r in rows if r["kind"] == "stop"]
vals = [r for r in rows if r["kind"] == "val"]
preempted = [s for s in stops if s.get("stopped_by") in ("SIGTERM", "SIGUSR1")]
result = {
    "job_state": state, "requeues": int(restarts), "attempts": len(stops),
    "preempted_at_step": preempted[0]["step"] if preempted else None,
    "seconds_to_checkpoint_after_notice": round(preempted[0]["time"] - float(notice), 2) if preempted else None,
    "last_stop": stops[-1] if stops else None, "epochs": int(epochs),
    "final_epoch": vals[-1]["epoch"] if vals else None, "final_wer": vals[-1]["wer"] if vals else None,
    "wall_seconds": round(float(ended) - float(started), 1)}
ok = (state == "COMPLETED" and int(restarts) >= 1 and preempted and stops[-1].get("stopped_by") is None
      and vals and vals[-1]["epoch"] == int(epochs))
print(json.dumps({"deploy_check": "passed" if ok else "FAILED", **result}))
sys.exit(0 if ok else 1)
EOF
