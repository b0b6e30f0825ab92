#!/usr/bin/env bash
# configs/yesno_adpsgd.yaml (4 asynchronous learners) on one GPU, each ADPSGD variant, as run on a lent H100
# (issue #20): the learners share the GPU, nccl is the default group, the gossip runs on gloo through host
# memory. Writes OUT/adpsgd-h100.json (provenance + one row per variant); set-up in env.sh.
#   bash docs/figures/gpu/adpsgd.sh OUT      (env: DEVICE=cpu, EXTRA="more overrides",
#   NAME=output file stem, VARIANTS="fixed_ring random_ring")
set -euo pipefail
out=${1:?usage: adpsgd.sh OUT}
source docs/figures/gpu/env.sh
port=29611
for v in ${VARIANTS:-fixed_ring random_ring delay_by_one}; do
    run=/tmp/adpsgd-$v
    rm -rf "$run"; mkdir -p "$run"
    start=$(date +%s.%N)
    timeout 240 python3 -m torch.distributed.run --nproc-per-node 4 --master-port $((port++)) -m speechscale.cli -q \
        train --config configs/yesno_adpsgd.yaml "trainer.device=${DEVICE:-cuda}" "distributed.adpsgd.variant=$v" \
        "trainer.out_dir=$run" trainer.progress=false ${EXTRA:-} > "$run/stdout" 2> "$run/stderr" || echo "$v failed: $(tail -3 "$run/stderr")"
    python3 -c "import time; print(time.time() - $start)" > "$run/wall"
    tail -1 "$run/stdout"
done
python3 - "$out" <<'PY'
import json, os, sys
from pathlib import Path
from speechscale.bench.harness import write_json
rows = []
for v in os.environ.get("VARIANTS", "fixed_ring random_ring delay_by_one").split():
    run = Path(f"/tmp/adpsgd-{v}")
    lines = (run / "stdout").read_text().strip().splitlines()
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()] if (run / "metrics.jsonl").is_file() else []
    val = [m for m in metrics if m["kind"] == "val"]
    rows.append({"variant": v, "summary": json.loads(lines[-1]) if lines else None, "wall_seconds": float((run / "wall").read_text()),
                 "val": [{k: m.get(k) for k in ("epoch", "step", "wer", "cer", "val_loss")} for m in val],
                 "stderr_tail": (run / "stderr").read_text().splitlines()[-3:]})
write_json(Path(sys.argv[1], os.environ.get("NAME", "adpsgd-h100") + ".json"), rows,
           ["bash", "docs/figures/gpu/adpsgd.sh", "OUT"],
           settings={"config": "configs/yesno_adpsgd.yaml", "procs": 4,
                     "overrides": ["trainer.device=" + os.environ.get("DEVICE", "cuda"), *os.environ.get("EXTRA", "").split()]})
PY
