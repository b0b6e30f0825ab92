#!/usr/bin/env bash
# The GPU benches of BENCHMARKS.md ("On a GPU"), as run on a lent H100 (issue #20): its image's PyTorch,
# our package from this checkout, the missing pure-data wheels (soundfile, soxr, num2words...) carried in .whl,
# and ../shared/data's LDC93S1 and yesno carried in .gpudata/shared.
#   bash docs/figures/gpu/run.sh OUT [BENCHES]     e.g. BENCHES=gpu-train,gpu-train-b128 or gpu-recipes
# Then copy OUT/*.json and *.png to docs/figures/gpu/ and render the tables here:
#   speechscale bench all --gpu --tables-only --out docs/figures/gpu
set -euo pipefail
out=${1:?usage: run.sh OUT [BENCHES]}
benches=${2:-gpu-train,gpu-train-b128,gpu-recipes}
source docs/figures/gpu/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version(), "cpus", __import__("os").cpu_count())'
python3 -m speechscale.cli -q bench all --only "$benches" --out "$out" --benchmarks ''
