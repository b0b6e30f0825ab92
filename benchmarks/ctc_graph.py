"""Can CTC join the training step's CUDA graph? A probe for a lent GPU.

The trainer's CTC (models/ctc.py) takes padded int64 targets and reads the lengths on the host, so it runs eagerly
after the graphed model. PyTorch also has cuDNN's CTC with the lengths on the device (int32 lengths and int32
targets concatenated into one vector): that path is the one torch allows inside a graph capture. Per frame count,
in a process of its own (a failed device-side assert ends the process's CUDA context), this measures forward and
backward of the trainer's eager CTC, of the device-length path run eagerly, and of that path captured and replayed
as a graph, and checks each one's per-row losses and gradients against the trainer's.

    python -m benchmarks.ctc_graph [--frames 251,501] [--batch 32] [--labels 150] [--vocab 29] [--iters 20]

One JSON line per frame count. On a machine without CUDA it says so in one line and exits 2.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Callable

import torch
import torch.nn.functional as F


def packed_targets(targets: torch.Tensor, target_lens: torch.Tensor) -> torch.Tensor:
    """Padded targets (B, S) as the one int32 vector of B * S labels that the device-length CTC reads: each row's
    first `target_lens[b]` labels one after another, zeros after them. Its size depends on the shape only (a graph
    needs that); the labels read are the first sum(target_lens). No host read-back."""
    rows, width = targets.shape
    keep = torch.arange(width, device=targets.device) < target_lens[:, None]  # (B, S)
    dest = (torch.cumsum(target_lens, 0) - target_lens)[:, None] + torch.arange(width, device=targets.device)
    dest = torch.where(keep, dest, rows * width)  # (B, S): a label's place, or the one slot past the end
    out = torch.zeros(rows * width + 1, dtype=torch.int32, device=targets.device)
    out.scatter_(0, dest.flatten(), targets.flatten().to(torch.int32))
    return out[:-1]


def _problem(frames: int, batch: int, labels: int, vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random log-probabilities (T, B, V) and targets whose lengths vary, as a training batch's do."""
    g = torch.Generator().manual_seed(seed)
    in_lens = torch.randint(int(frames * 0.7), frames + 1, (batch,), generator=g)
    in_lens[0] = frames
    tl = torch.minimum(torch.randint(labels // 2, labels + 1, (batch,), generator=g), in_lens // 2)
    targets = torch.randint(1, vocab, (batch, labels), generator=g)
    logits = torch.randn(frames, batch, vocab, generator=g) * 3
    return {"logits": logits, "in_lens": in_lens, "target_lens": tl, "targets": targets}


def _row_mean(rows: torch.Tensor, target_lens: torch.Tensor) -> torch.Tensor:
    return (rows / target_lens.clamp(min=1)).mean()


def _time(fn: Callable[[], None], iters: int) -> float:
    """Milliseconds a call, by CUDA events, after two warm-up calls."""
    for _ in range(2):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def probe(frames: int, batch: int, labels: int, vocab: int, iters: int) -> dict:
    """The three CTC paths at one shape on the current CUDA device: times and agreement with the trainer's."""
    p = {k: v.cuda() for k, v in _problem(frames, batch, labels, vocab).items()}
    logits = p["logits"].requires_grad_()
    host_in, host_tl = p["in_lens"].cpu(), p["target_lens"].cpu()
    packed = packed_targets(p["targets"], p["target_lens"])
    in32, tl32 = p["in_lens"].to(torch.int32), p["target_lens"].to(torch.int32)
    result: dict = {"frames": frames, "batch": batch, "labels": labels, "vocab": vocab,
                    "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "cudnn": torch.backends.cudnn.version()}

    def trainers() -> torch.Tensor:  # models/ctc.py's criterion with padded int64 targets and host lengths
        return F.ctc_loss(logits.log_softmax(-1), p["targets"], host_in, host_tl, blank=0, reduction="none",
                          zero_infinity=True)

    def device_lengths() -> torch.Tensor:
        return F.ctc_loss(logits.log_softmax(-1), packed, in32, tl32, blank=0, reduction="none", zero_infinity=True)

    want = trainers()
    _row_mean(want, p["target_lens"]).backward()
    want_grad, logits.grad = logits.grad.clone(), None
    got = device_lengths()
    _row_mean(got, p["target_lens"]).backward()
    got_grad, logits.grad = logits.grad.clone(), None
    result["uses_cudnn"] = bool(torch._use_cudnn_ctc_loss(logits.log_softmax(-1), packed, in32, tl32, 0))
    result["device_lengths_loss_max_rel_err"] = float(((got - want).abs() / want.abs().clamp(min=1e-6)).max())
    result["device_lengths_grad_max_abs_err"] = float((got_grad - want_grad).abs().max())

    def step(fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            logits.grad = None
            _row_mean(fn(), p["target_lens"]).backward()
        return run

    result["trainer_ms"] = round(_time(step(trainers), iters), 3)
    result["device_lengths_ms"] = round(_time(step(device_lengths), iters), 3)
    try:  # capture forward and backward of the device-length path (warm-up on a side stream first)
        logits.grad = torch.zeros_like(logits)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                _row_mean(device_lengths(), p["target_lens"]).backward()
        torch.cuda.current_stream().wait_stream(side)
        logits.grad.zero_()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _row_mean(device_lengths(), p["target_lens"]).backward()
        logits.grad.zero_()
        graph.replay()
        torch.cuda.synchronize()
        result["graphed_grad_max_abs_err"] = float((logits.grad - want_grad).abs().max())

        def replay() -> None:
            logits.grad.zero_()
            graph.replay()

        result["graphed_ms"] = round(_time(replay, iters), 3)
        result["captured"] = True
    except RuntimeError as e:  # torch refuses the capture, or a device-side check fails on replay
        result["captured"], result["capture_error"] = False, str(e).splitlines()[0][:300]
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--frames", default="251,501", help="output frames per utterance, comma-separated")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--labels", type=int, default=150, help="the longest target (characters)")
    p.add_argument("--vocab", type=int, default=29)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # a child: this frame count only
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("ctc_graph: needs a CUDA GPU (it measures CTC inside a CUDA graph)", file=sys.stderr)
        sys.exit(2)
    if args.one is not None:
        print(json.dumps(probe(args.one, args.batch, args.labels, args.vocab, args.iters)))
        return
    for frames in (int(f) for f in args.frames.split(",")):
        child = subprocess.run([sys.executable, "-m", "benchmarks.ctc_graph", "--one", str(frames),
                                "--batch", str(args.batch), "--labels", str(args.labels), "--vocab", str(args.vocab),
                                "--iters", str(args.iters)], capture_output=True, text=True, timeout=120)
        line = child.stdout.strip().splitlines()[-1:] if child.returncode == 0 else []
        print(line[0] if line else json.dumps({"frames": frames, "exit": child.returncode,
                                               "error": child.stderr.strip().splitlines()[-1:]}), flush=True)


if __name__ == "__main__":
    main()
