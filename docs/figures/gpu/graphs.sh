#!/usr/bin/env bash
# Issue #40 on a lent GPU, in one lease: the gpu test tier, eager against graphed `bench train` (ds2-large in true
# fp32, TF32 and bf16 at 32 x 10 s and bf16 at 128 x 10 s; the other full-size presets in bf16), the limit probe
# (../shared/tools/gpu_limit_probe.py, carried in .gpudata) and a real `speechscale train` of ds2-large in bf16
# with graphs on yesno, its audio-s/s read from its own run log.
#   bash docs/figures/gpu/graphs.sh OUT [PARTS]      PARTS: bench,tests,probe,b128,others,train (the default),
#   or train-det, tests-quick, bench-bf16; issue #56's lease: probe56,schemes,tests,b128s,others56,train,nccl
#   (bidirectional schemes side by side, the graphed update, an fp16 graphed row, one nccl rank graphed); its second
#   lease: profile56,b64,trainbench,train,yesno (the kernels behind each scheme, batch 64, the bench at the train's
#   shape beside the real trainer, the gpu tier's yesno test alone); its third: infer56,tests56,loader56,trainfeat
#   (inference RTFx eager/graphed/onnx, the gpu tier of the new tests, the loader per worker with the features in
#   the loader or the step, speechscale train with features.device=loader and cuda side by side); then
#   train,evalgraphs (eval of the trained ds2-large on yesno x 20, eager against --graphs), ctc56 (CTC captured in a
#   graph through cuDNN's device-length path, benchmarks/ctc_graph.py), fused56 (bias-free recurrent layers as one
#   exact fused bidirectional call), recompute56 (activation checkpointing's memory and step rate); the next lease,
#   15 minutes in all: probe56,fused56,ctc56,tests56 in one call, then recompute56,train,evalgraphs if time is left
# Carry .whl and .gpudata (see env.sh). Each part has its own time limit, so one failing part keeps the others.
set -uo pipefail
out=${1:?usage: graphs.sh OUT [PARTS]}
parts=${2:-bench,tests,probe,b128,others,train}
source docs/figures/gpu/env.sh
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())'
echo "commit ${SPEECHSCALE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)} date $(date -u '+%F %R UTC')"
bench() { timeout "$1" python3 -m speechscale.cli -q bench train --warmup 3 --seconds 10 "${@:2}"; }
has() { [[ ",$parts," == *",$1,"* ]]; }
if has bench; then  # the headline: ds2-large, eager and graphed, interleaved step by step in one process
    bench 150 --model ds2-large --precision fp32,tf32,bf16 --graphs both --batch-size 32 --steps 6 \
        | tee "$out/graphs.jsonl"
fi
if has probe56; then  # the limit beside our bench: ds2-large-shaped, bf16, eager padded and graphed model, B 32 and 128
    B=32 timeout 50 python3 .gpudata/gpu_limit_probe.py bf16 padded,graphed-model | tee "$out/probe.jsonl"
    B=128 STEPS=6 timeout 40 python3 .gpudata/gpu_limit_probe.py bf16 graphed-model | tee -a "$out/probe.jsonl"
fi
if has schemes; then  # ds2-large: eager, the two exact bidirectional schemes graphed, and fp16 graphed, interleaved
    bench 110 --model ds2-large --precision bf16,bf16+graphs@split,bf16+graphs@stacked,fp16+graphs@stacked \
        --batch-size 32 --steps 6 | tee "$out/schemes.jsonl"
fi
if has profile56; then  # where the GPU time goes: each scheme's top kernels, and the probe's padded eager step
    bench 80 --model ds2-large --precision bf16+graphs@split,bf16+graphs@stacked --batch-size 32 --steps 4 \
        --warmup 2 | tee "$out/profile.jsonl"
    PROFILE=1 B=32 STEPS=4 timeout 40 python3 .gpudata/gpu_limit_probe.py bf16 padded | tee "$out/probe-profile.jsonl"
fi
if has b64; then
    bench 60 --model ds2-large --precision bf16+graphs@split,bf16+graphs@stacked --batch-size 64 --steps 4 \
        --warmup 2 | tee "$out/schemes-b64.jsonl"
fi
if has trainbench; then  # the bench at the train part's batch (32 yesno files of about 6 s), the layers' own scheme
    timeout 60 python3 -m speechscale.cli -q bench train --warmup 2 --seconds 6.3 --model ds2-large \
        --precision bf16+graphs --batch-size 32 --steps 6 --manifest ../shared/data/yesno/manifest.jsonl \
        | tee "$out/train-bench.jsonl"
fi
if has tests; then
    timeout ${TESTS_LIMIT:-150} python3 -m pytest -q -p no:cacheprovider -m gpu --tb=short tests/training/test_cuda_graphs.py \
        > "$out/gpu-tests.log" 2>&1
    grep -E "passed|failed|^E " "$out/gpu-tests.log" | tail -30
fi
if has probe; then
    B=32 timeout 45 python3 .gpudata/gpu_limit_probe.py tf32,bf16 padded,graphed-model | tee "$out/probe.jsonl"
fi
if has b128; then
    bench 75 --model ds2-large --precision bf16 --graphs both --batch-size 128 --steps 5 | tee "$out/graphs-b128.jsonl"
fi
if has others; then
    bench 120 --model lstm-ctc,conformer,wav2letter+ --precision bf16 --graphs both --batch-size 32 --steps 6 \
        | tee "$out/graphs-others.jsonl"
fi
train() {  # $1: trainer.deterministic, $2: steps, $3: the metrics file to keep, then more overrides
    timeout 130 python3 -m speechscale.cli -q train --config yesno data.root=../shared/data/yesno "${@:4}" \
        data.train_manifest=/tmp/yesno20.jsonl data.train_slice=[] data.batch_seconds=215 data.max_batch_size=32 \
        data.fixed_shapes=2 data.num_workers=12 augment.word_crop=0 model.name=ds2-large features.sample_rate=16000 \
        trainer.device=cuda trainer.precision=bf16 trainer.max_epochs=1 trainer.max_steps="$2" trainer.log_every=6 \
        trainer.deterministic="$1" trainer.out_dir="/tmp/train-graphs-${3%.jsonl}" trainer.progress=false
    cp "/tmp/train-graphs-${3%.jsonl}/metrics.jsonl" "$out/$3"
}
if has train || has train-det || has nccl || has trainfeat || has recompute56; then  # yesno x 20 (1,200 files, 2.1 h), batches of 32; 2 shapes; audio_s_per_s per 6 steps
    python3 - <<'EOF2'
import json
from pathlib import Path
src = Path("../shared/data/yesno").resolve()
lines = [json.loads(x) for x in (src / "manifest.jsonl").read_text().splitlines()]
with open("/tmp/yesno20.jsonl", "w") as f:
    for _ in range(20):
        for u in lines:
            f.write(json.dumps({**u, "audio_filepath": str(src / u["audio_filepath"])}) + "\n")
EOF2
fi
if has train; then
    train true 36 train-metrics.jsonl
fi
if has train-det; then  # the same run with trainer.deterministic on and off, 24 steps each
    train true 24 train-deterministic.jsonl
    train false 24 train-nondeterministic.jsonl
fi
if has tests-quick; then
    timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu --tb=short -k "equal or resumed or fp16_overflow" \
        tests/training/test_cuda_graphs.py > "$out/gpu-tests-quick.log" 2>&1
    grep -E "passed|failed|^E " "$out/gpu-tests-quick.log" | tail -30
fi
if has bench-bf16; then
    bench 90 --model ds2-large --precision bf16 --graphs both --batch-size 32 --steps 6 | tee "$out/graphs-bf16.jsonl"
fi
if has b128s; then
    bench 80 --model ds2-large --precision bf16+graphs@split,bf16+graphs@stacked --batch-size 128 --steps 4 \
        | tee "$out/schemes-b128.jsonl"
fi
if has others56; then  # lstm-ctc's schemes; conformer and wav2letter+ eager and graphed (model and update)
    bench 50 --model lstm-ctc --precision bf16+graphs@split,bf16+graphs@stacked --batch-size 32 --steps 6 \
        | tee "$out/others.jsonl"
    bench 70 --model conformer,wav2letter+ --precision bf16 --graphs both --batch-size 32 --steps 6 \
        | tee -a "$out/others.jsonl"
fi
if has nccl; then  # allreduce with nccl, one rank, graphed: the reduction path of a multi-GPU run, on one GPU
    timeout 90 python3 -m torch.distributed.run --standalone --nproc-per-node 1 -m speechscale.cli -q train \
        --config yesno data.root=../shared/data/yesno data.train_manifest=/tmp/yesno20.jsonl data.train_slice=[] \
        data.batch_seconds=215 data.max_batch_size=32 data.fixed_shapes=2 data.num_workers=12 augment.word_crop=0 \
        model.name=ds2-large features.sample_rate=16000 trainer.device=cuda trainer.precision=bf16 \
        trainer.cuda_graphs=on trainer.max_epochs=1 trainer.max_steps=18 trainer.log_every=6 \
        trainer.out_dir=/tmp/train-nccl trainer.progress=false > "$out/nccl.log" 2>&1
    echo "nccl exit $?"; tail -3 "$out/nccl.log"
    cp /tmp/train-nccl/metrics.jsonl "$out/nccl-metrics.jsonl"
fi
if has yesno; then
    timeout 90 python3 -m pytest -q -p no:cacheprovider -m gpu --tb=short -k yesno tests/training/test_cuda_graphs.py \
        > "$out/gpu-yesno.log" 2>&1
    grep -E "passed|failed|^E " "$out/gpu-yesno.log" | tail -5
fi
if has infer56; then  # inference: ds2-large and conformer, eager against graphed (and onnxruntime's CUDA provider)
    timeout 120 python3 -m speechscale.cli -q bench infer --model ds2-large,conformer --batch-size 32 --seconds 10 \
        --modes eager,graphed,onnx --precision bf16 --steps 5 | tee "$out/infer.jsonl"
fi
if has tests56; then  # the gpu tier of the schemes, the graphed update, features on the device, graphed inference and
    # eval/transcribe --graphs
    timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu --tb=short -k "not yesno" \
        tests/training/test_cuda_graphs.py tests/training/test_step_features.py tests/bench/test_infer.py \
        tests/serving/test_fixed_shapes.py tests/models/test_rnn.py > "$out/gpu-tests.log" 2>&1
    grep -E "passed|failed|^E " "$out/gpu-tests.log" | tail -30
fi
if has loader56; then  # the loader's CPU per audio second, features in the loader or in the step, one worker
    timeout 90 python3 -m speechscale.cli -q bench loader --workers 1 --augment both --features both \
        --clip-seconds 12 --limit 120 | tee "$out/loader.jsonl"
fi
if has trainfeat; then  # the real trainer, features in the loader and on the GPU, 24 steps each
    train true 24 train-loader.jsonl
    train true 24 train-features-cuda.jsonl features.device=cuda
fi
if has fused56; then  # bias-free recurrent layers: one exact fused bidirectional call (fused) against stacked on the same
    # model; ds2-large at 32 and 128 rows, lstm-ctc at 32; the preset with biases runs in the bench/schemes parts
    bench 100 --model ds2-large --model-overrides '{rnn_bias: false}' --batch-size 32 --steps 6 \
        --precision bf16,bf16+graphs@fused,bf16+graphs@stacked | tee "$out/fused.jsonl"
    bench 80 --model ds2-large --model-overrides '{rnn_bias: false}' --batch-size 128 --steps 4 \
        --precision bf16+graphs@fused,bf16+graphs@stacked | tee -a "$out/fused.jsonl"
    bench 60 --model lstm-ctc --model-overrides '{bias: false}' --batch-size 32 --steps 6 \
        --precision bf16+graphs@fused,bf16+graphs@stacked | tee -a "$out/fused.jsonl"
fi
if has ctc56; then  # can CTC join the graph: the trainer's CTC; cuDNN's with device lengths and masked_ctc, eager and
    # captured, at the conformer's frames for 10 s (251) and ds2-large's (501), 32 rows, 150 labels; a process each
    timeout 120 python3 -m benchmarks.ctc_graph --frames 251,501 | tee "$out/ctc-graph.jsonl"
fi
if has recompute56; then  # activation checkpointing on the GPU, eager both ways (graphs stay off with it): the
    # pre-scan's peak memory (its log line) and the step rate of 12 steps each, ds2-large in bf16 on yesno x 20;
    # first the bench's side-by-side rows (recompute_speed, activations_mb) for ds2-large and conformer
    bench 120 --model ds2-large,conformer --precision bf16 --batch-size 32 --steps 4 \
        --activation-checkpointing both | tee "$out/recompute-bench.jsonl"
    for rc in false true; do
        timeout 150 python3 -m speechscale.cli train --config yesno data.root=../shared/data/yesno \
            data.train_manifest=/tmp/yesno20.jsonl data.train_slice=[] data.batch_seconds=215 data.max_batch_size=32 \
            data.fixed_shapes=2 data.num_workers=12 augment.word_crop=0 model.name=ds2-large \
            features.sample_rate=16000 trainer.device=cuda trainer.precision=bf16 trainer.cuda_graphs=off \
            trainer.prescan=true trainer.activation_checkpointing=$rc trainer.max_epochs=1 trainer.max_steps=12 \
            trainer.log_every=6 trainer.out_dir=/tmp/train-recompute-$rc trainer.progress=false 2>&1 \
            | grep -E "pre-scan|activation_checkpointing" | tee -a "$out/recompute.log"
        cp /tmp/train-recompute-$rc/metrics.jsonl "$out/recompute-$rc-metrics.jsonl"
    done
fi
if has evalgraphs; then  # eval on yesno x 20 (1,200 files) with the `train` part's ds2-large, eager and --graphs
    # interleaved twice; each line: the mode, the whole command's seconds (start-up and load included), WER
    ckpt=/tmp/train-graphs-train-metrics/checkpoints/last.pt
    for round in 1 2; do
        for mode in eager graphs; do
            flag=$([ "$mode" = graphs ] && echo --graphs)
            t0=$(date +%s.%N)
            res=$(timeout 120 python3 -m speechscale.cli -q eval --checkpoint "$ckpt" --manifest /tmp/yesno20.jsonl \
                --device cuda --batch-seconds 200 --json $flag)
            t1=$(date +%s.%N)
            python3 -c 'import json, sys; r = json.loads(sys.argv[3]); print(json.dumps({"mode": sys.argv[1],
                "seconds": round(float(sys.argv[2]), 2), "wer": r["wer"], "utterances": r["utterances"]}))' \
                "$mode" "$(python3 -c "print($t1 - $t0)")" "$res" | tee -a "$out/eval-graphs.jsonl"
        done
    done
fi
