#!/bin/bash
# Re-measures the multi-node figures of BENCHMARKS.md ("Many nodes", issue #23): the node tests REPEATS times
# and `make deploy-check` once (root), each JSON figure line the tests print kept with its provenance.
#   docs/figures/multinode/run.sh [REPEATS]      -> docs/figures/multinode/nodes.jsonl
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=docs/figures/multinode/nodes.jsonl
repeats=${1:-3}
py=${VENV:-.venv}/bin/python
prov=$($py - <<'PY'
import json, os, platform, subprocess, time, torch
commit = subprocess.run(["git", "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
print(json.dumps({"machine": f"{os.cpu_count()} cores, {cpu}", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "commit": commit + ("+changes" if dirty else ""), "torch": torch.__version__}))
PY
)
[ -n "${APPEND:-}" ] || : > "$out"   # APPEND=1: add to the file (e.g. REPEATS=0 for deploy-check alone)
for i in $(seq "$repeats"); do
  $py -m pytest -q -s -p no:cacheprovider tests/distributed/test_nodes.py 2>&1 | grep -o '{"test".*' |
    while read -r line; do echo "{\"provenance\": $prov, \"repeat\": $i, \"command\": \"pytest -s tests/distributed/test_nodes.py\", \"figures\": $line}"; done >> "$out"
done
if [ "$(id -u)" = 0 ]; then
  make -s deploy-check VENV="${VENV:-.venv}" -o "${VENV:-.venv}/.installed" 2>/dev/null | grep -o '{"deploy_check".*' |
    while read -r line; do echo "{\"provenance\": $prov, \"repeat\": 1, \"command\": \"make deploy-check\", \"figures\": $line}"; done >> "$out"
fi
wc -l "$out"
