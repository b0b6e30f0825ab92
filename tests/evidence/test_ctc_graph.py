"""benchmarks/ctc_graph.py: the target layout its device-length CTC reads, checked on the CPU against the padded
layout the trainer uses (the graph capture itself needs a GPU)."""
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from benchmarks.ctc_graph import _problem, masked_ctc, packed_targets, probe
from tests.conftest import ROOT


def test_packed_targets_hold_each_rows_labels_in_order_and_give_the_padded_targets_losses():
    p = _problem(frames=60, batch=5, labels=20, vocab=12, seed=3)
    p["target_lens"][2] = 0  # an empty transcript: its labels take no place
    packed = packed_targets(p["targets"], p["target_lens"])
    assert packed.dtype == torch.int32 and packed.shape == (5 * 20,)  # fixed by the shape alone
    n = int(p["target_lens"].sum())
    want_labels = torch.cat([p["targets"][b, :t] for b, t in enumerate(p["target_lens"].tolist())])
    assert torch.equal(packed[:n].long(), want_labels) and not packed[n:].any()
    grads = []  # the CPU's CTC wants exactly the labels read; cuDNN's reads the first sum(target_lens) of them
    for targets, in_lens, tl in ((p["targets"], p["in_lens"], p["target_lens"]),
                                 (packed[:n], p["in_lens"].int(), p["target_lens"].int())):
        logits = p["logits"].clone().requires_grad_()
        rows = F.ctc_loss(logits.log_softmax(-1), targets, in_lens, tl, blank=0, reduction="none", zero_infinity=True)
        (rows / tl.clamp(min=1)).mean().backward()
        grads.append((rows.detach(), logits.grad))
    torch.testing.assert_close(grads[1][0], grads[0][0], rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(grads[1][1], grads[0][1], rtol=1e-6, atol=1e-7)


def test_masked_ctc_is_torchs_ctc_in_losses_and_gradients_impossible_and_empty_rows_included():
    p = _problem(frames=70, batch=6, labels=24, vocab=10, seed=1)
    p["target_lens"][1] = 0  # empty transcript: all blanks
    p["target_lens"][2], p["in_lens"][2] = 24, 10  # more labels than frames: infinite, zeroed
    p["targets"][3, :6] = 4  # repeated labels need a blank between them
    for dtype, tol in ((torch.float64, 1e-9), (torch.float32, 1e-4)):
        got = []
        for ctc in (lambda lp: F.ctc_loss(lp, p["targets"], p["in_lens"], p["target_lens"], blank=0,
                                          reduction="none", zero_infinity=True),
                    lambda lp: masked_ctc(lp, p["targets"], p["in_lens"], p["target_lens"])):
            logits = p["logits"].to(dtype).requires_grad_()
            rows = ctc(logits.log_softmax(-1))
            (rows / p["target_lens"].clamp(min=1)).mean().backward()
            got.append((rows.detach(), logits.grad))
        assert got[1][0][2] == 0 and got[1][0][1] > 0 and torch.isfinite(got[1][1]).all()
        torch.testing.assert_close(got[1][0], got[0][0], rtol=tol, atol=tol)
        torch.testing.assert_close(got[1][1], got[0][1], rtol=tol, atol=tol * 1e-2)


def test_the_probes_eager_paths_run_and_agree_on_the_cpu():
    row = probe(frames=40, batch=3, labels=12, vocab=9, iters=1, device="cpu")
    assert row["masked_grad_max_abs_err"] < 1e-5 and row["masked_loss_max_rel_err"] < 1e-5
    assert row["trainer_eager_ms"] > 0 and row["masked_eager_ms"] > 0


def test_the_probe_says_in_one_line_that_it_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the probe runs for real there (docs/figures/gpu/graphs.sh, ctc56)")
    res = subprocess.run([sys.executable, "-m", "benchmarks.ctc_graph", "--frames", "50"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stderr.strip() == "ctc_graph: needs a CUDA GPU (it measures CTC inside a CUDA graph)"
