"""Can CTC join the training step's CUDA graph? A probe for a lent GPU.

The trainer's CTC (models/ctc.py) takes padded int64 targets and reads the lengths on the host, so it runs eagerly
after the graphed model. PyTorch also has cuDNN's CTC with the lengths on the device (int32 lengths and int32
targets concatenated into one vector): that path is the one torch allows inside a graph capture. Per frame count,
in a process of its own (a failed device-side assert ends the process's CUDA context), this measures forward and
backward of the trainer's eager CTC, of the device-length path run eagerly, and of that path captured and replayed
as a graph, and the same for `masked_ctc` (CTC as plain tensor operations, which any graph can hold); it checks each
one's per-row losses and gradients against the trainer's.

    python -m benchmarks.ctc_graph [--frames 251,501] [--batch 32] [--labels 150] [--vocab 29] [--iters 20]

One JSON line per frame count. On a machine without CUDA it says so in one line and exits 2.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
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


NEG = -1e30  # log(0) for the recursion: finite, so that no gradient of an impossible path is NaN


def masked_ctc(log_probs: torch.Tensor, targets: torch.Tensor, in_lens: torch.Tensor,
               target_lens: torch.Tensor) -> torch.Tensor:
    """CTC written as tensor operations of fixed shape (blank 0, an impossible row's loss zeroed): the forward
    (alpha) recursion over the padded time axis, each row frozen past its length. No host read-back, so a graph can
    hold it; autograd gives the backward. log_probs (T, B, V), targets (B, S) padded, lengths (B,) on the device.
    Returns the per-row losses (B,), as F.ctc_loss(reduction="none", zero_infinity=True)."""
    frames, rows, _ = log_probs.shape
    width = 2 * targets.shape[1] + 1
    ext = torch.zeros(rows, width, dtype=torch.long, device=targets.device)
    ext[:, 1::2] = targets  # (B, L): blank, t1, blank, t2, ..., blank
    skip = torch.zeros(rows, width, dtype=torch.bool, device=targets.device)  # s-2 -> s allowed
    skip[:, 3::2] = targets[:, 1:] != targets[:, :-1]
    emit = log_probs.gather(2, ext[None].expand(frames, -1, -1))  # (T, B, L)
    s = torch.arange(width, device=targets.device)
    neg = torch.full((rows, 2), NEG, dtype=log_probs.dtype, device=log_probs.device)
    alpha = torch.where(s[None] < 2, emit[0], NEG)  # (B, L)
    for t in range(1, frames):
        one = torch.cat([neg[:, :1], alpha[:, :-1]], 1)
        two = torch.where(skip, torch.cat([neg, alpha[:, :-2]], 1), NEG)
        step = torch.logsumexp(torch.stack([alpha, one, two]), 0) + emit[t]
        alpha = torch.where((t < in_lens)[:, None], step, alpha)
    last = (2 * target_lens)[:, None]  # the final blank; the final label sits one before it
    ends = torch.cat([alpha.gather(1, last), torch.where(last > 0, alpha.gather(1, (last - 1).clamp(min=0)), NEG)], 1)
    loss = -torch.logsumexp(ends, 1)  # (B,)
    return torch.where(loss < -NEG / 2, loss, 0.0)


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


def _time(fn: Callable[[], None], iters: int, cuda: bool = True) -> float:
    """Milliseconds a call, by CUDA events (on the CPU by the clock), after two warm-up calls."""
    for _ in range(2):
        fn()
    if not cuda:
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) * 1e3 / iters
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def _graphed(logits: torch.Tensor, loss: Callable[[], torch.Tensor], want_grad: torch.Tensor,
             iters: int) -> dict:
    """`loss()` and its backward captured as one CUDA graph (after a warm-up on a side stream) and replayed: its
    milliseconds a replay and its gradient's largest difference from `want_grad`, or why it did not capture."""
    try:
        logits.grad = torch.zeros_like(logits)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                loss().backward()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            loss().backward()
        logits.grad.zero_()
        graph.replay()
        torch.cuda.synchronize()
        err = float((logits.grad - want_grad).abs().max())

        def replay() -> None:
            logits.grad.zero_()
            graph.replay()

        return {"captured": True, "ms": round(_time(replay, iters), 3), "grad_max_abs_err": err}
    except RuntimeError as e:  # torch refuses the capture, or a device-side check fails on replay
        return {"captured": False, "error": str(e).splitlines()[0][:300]}
    finally:
        logits.grad = None


def probe(frames: int, batch: int, labels: int, vocab: int, iters: int, device: str = "cuda") -> dict:
    """Each CTC path at one shape: eager and graphed times, agreement with the trainer's. cuDNN's capture comes
    last: a failed device-side assert leaves the process no CUDA. On the CPU (a test of this code): the eager
    trainer and masked paths only."""
    cuda = device == "cuda"
    p = {k: v.to(device) for k, v in _problem(frames, batch, labels, vocab).items()}
    logits = p["logits"].requires_grad_()
    host_in, host_tl = p["in_lens"].cpu(), p["target_lens"].cpu()
    packed = packed_targets(p["targets"], p["target_lens"])
    in32, tl32 = p["in_lens"].to(torch.int32), p["target_lens"].to(torch.int32)
    paths: dict[str, Callable[[], torch.Tensor]] = {  # each: the per-row losses (B,)
        # models/ctc.py's criterion as the trainer calls it: padded int64 targets, lengths on the host
        "trainer": lambda: F.ctc_loss(logits.log_softmax(-1), p["targets"], host_in, host_tl, blank=0,
                                      reduction="none", zero_infinity=True),
        "masked": lambda: masked_ctc(logits.log_softmax(-1), p["targets"], p["in_lens"], p["target_lens"])}
    result: dict = {"frames": frames, "batch": batch, "labels": labels, "vocab": vocab, "torch": torch.__version__}
    if cuda:  # the CPU's CTC reads exactly sum(target_lens) labels, so the packed vector is for the GPU only
        paths["cudnn"] = lambda: F.ctc_loss(logits.log_softmax(-1), packed, in32, tl32, blank=0, reduction="none",
                                            zero_infinity=True)
        result.update(device=torch.cuda.get_device_name(), cudnn_version=torch.backends.cudnn.version())
        try:  # torch's own dispatch test (outside a capture it reads the lengths back)
            result["cudnn_chosen"] = bool(torch._use_cudnn_ctc_loss(logits.log_softmax(-1), packed, in32, tl32, 0))
        except (RuntimeError, TypeError, AttributeError) as e:
            result["cudnn_chosen"] = str(e).splitlines()[0][:200]
    grads, losses = {}, {}
    for name, rows in paths.items():
        def step(rows: Callable[[], torch.Tensor] = rows) -> None:
            logits.grad = None
            _row_mean(rows(), p["target_lens"]).backward()

        try:  # a path torch refuses at this shape is reported, and the others still run
            rows_once = rows()
            _row_mean(rows_once, p["target_lens"]).backward()
            losses[name], grads[name] = rows_once.detach(), logits.grad.clone()
            result[f"{name}_eager_ms"] = round(_time(step, iters, cuda), 3)
        except RuntimeError as e:
            if name == "trainer":
                raise
            result[f"{name}_eager_error"] = str(e).splitlines()[0][:300]
            continue
        finally:
            logits.grad = None
        if name != "trainer":
            result[f"{name}_loss_max_rel_err"] = float(
                ((losses[name] - losses["trainer"]).abs() / losses["trainer"].abs().clamp(min=1e-6)).max())
            result[f"{name}_grad_max_abs_err"] = float((grads[name] - grads["trainer"]).abs().max())
    for name in ("masked", "cudnn") if cuda else ():
        graphed = _graphed(logits, lambda rows=paths[name]: _row_mean(rows(), p["target_lens"]), grads["trainer"],
                           iters)
        result.update({f"{name}_graphed_{k}": v for k, v in graphed.items()})
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
        print(json.dumps(probe(args.one, args.batch, args.labels, args.vocab, args.iters)), flush=True)
        return
    for frames in (int(f) for f in args.frames.split(",")):
        child = subprocess.run([sys.executable, "-m", "benchmarks.ctc_graph", "--one", str(frames),
                                "--batch", str(args.batch), "--labels", str(args.labels), "--vocab", str(args.vocab),
                                "--iters", str(args.iters)], capture_output=True, text=True, timeout=120)
        # the child prints its line before it exits; a broken CUDA context may still fail its exit
        line = [x for x in child.stdout.splitlines() if x.startswith("{")][-1:]
        row = json.loads(line[0]) if line else {"frames": frames, "error": child.stderr.strip().splitlines()[-1:]}
        print(json.dumps({**row, **({"exit": child.returncode} if child.returncode else {})}), flush=True)


if __name__ == "__main__":
    main()
