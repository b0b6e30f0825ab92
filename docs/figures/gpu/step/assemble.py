"""Assemble docs/figures/gpu/gpu-step.json and gpu-infer.json from the raw output of issue #56's leases (the folders
beside this file, written by docs/figures/gpu/graphs.sh), in the shape `speechscale bench all --tables-only` renders.
Run from the repository root: python3 docs/figures/gpu/step/assemble.py"""
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
MACHINE = "16 cores, Intel(R) Xeon(R) Processor, NVIDIA H200 (driver 580.159.04)"
LEASES = {  # folder: (date, commit, graphs.sh parts)
    "lease1": ("2026-11-27 15:58 UTC", "c034ac7", "probe56,schemes,tests,train,b128s,others56,nccl"),
    "lease2": ("2026-11-27 16:04 UTC", "3f2062d", "profile56,b64,trainbench,train,yesno"),
    "lease3": ("2026-11-27 16:19 UTC", "b9dbdd0", "infer56,tests56,loader56,trainfeat"),
    "lease4": ("2026-11-27 16:25 UTC", "47353be", "bench infer and features' check, by hand: see console"),
}


def rows(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.startswith("{")] if path.is_file() else []


def provenance(leases, what):
    return {"machine": MACHINE, "date": ", ".join(LEASES[k][0] for k in leases),
            "commit": ", ".join(LEASES[k][1] for k in leases), "torch": "2.11.0+cu130", "python": "3.12.3",
            "command": "; ".join(f"{k}: bash docs/figures/gpu/graphs.sh OUT {LEASES[k][2]}" for k in leases) + what}


step = []
for lease, files in {"lease1": ["probe.jsonl", "schemes.jsonl", "schemes-b128.jsonl", "others.jsonl"],
                     "lease2": ["profile.jsonl", "schemes-b64.jsonl", "train-bench.jsonl"]}.items():
    for name in files:
        for r in rows(HERE / lease / name):
            if "B" in r:  # the probe: ../shared/tools/gpu_limit_probe.py beside the bench
                step.append({"kind": "probe", "lease": lease, "file": name, **r})
            elif "model" in r:
                step.append({"kind": "bench", "lease": lease, "file": name, **r})
for lease, name, features in (("lease2", "train-metrics.jsonl", "loader"), ("lease3", "train-loader.jsonl", "loader"),
                              ("lease3", "train-features-cuda.jsonl", "cuda")):
    log = rows(HERE / lease / name)
    step.append({"kind": "train-log", "lease": lease, "features": features,
                 "rows": [{k: r[k] for k in ("step", "loss", "audio_s_per_s", "host_ms_per_step") if k in r}
                          for r in log if r["kind"] == "train"],
                 "val": next(({"wer": r["wer"], "cer": r["cer"]} for r in log if r["kind"] == "val"), None)})
for r in rows(HERE / "lease3" / "loader.jsonl"):
    step.append({"kind": "loader", "lease": "lease3", **r})
doc = {"provenance": provenance(["lease1", "lease2", "lease3"], " (speechscale train: ds2-large bf16 graphed on "
                                                                "yesno x 20 at batch 32)"),
       "seconds": None, "results": step}
(HERE.parent / "gpu-step.json").write_text(json.dumps(doc, indent=1) + "\n")
infer = [{"lease": "lease4", **r} for r in rows(HERE / "lease4" / "infer.jsonl")]
doc = {"provenance": {**provenance(["lease4"], ""), "command": "speechscale -q bench infer --model ds2-large,conformer "
                      "--batch-size 32 --seconds 10 --modes eager,graphed,onnx --precision bf16 --steps 4"},
       "seconds": None, "results": infer}
(HERE.parent / "gpu-infer.json").write_text(json.dumps(doc, indent=1) + "\n")
print(len(step), len(infer))
