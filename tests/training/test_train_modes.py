"""A streaming Conformer trained in both modes every batch (model.overrides train_modes: both): the step's loss is
the CTC of the full-context rows and of the chunk's rows averaged, plus `distill` times the chunk's divergence from
the full context, recomputed here with torch's own ctc_loss and kl_div; a real run trains and scores in chunks."""
import json

import torch
import torch.nn.functional as F

from speechscale.data.dataset import Batch
from speechscale.distributed.strategy import LocalStrategy
from speechscale.models import build_model
from speechscale.training.precision import Precision
from speechscale.training.step import EagerStep, chunk_divergence
from speechscale.training.trainer import Trainer
from tests.conftest import main_cli
from tests.training.tiny import ldc_config


def _kl(log_probs, out_lens, target_lens):
    """KL(full || chunk) per row over its frames / target length, averaged, with F.kl_div."""
    b = log_probs.shape[1] // 2
    rows = []
    for i in range(b):
        t = int(out_lens[i])
        rows.append(F.kl_div(log_probs[:t, b + i], log_probs[:t, i].detach(), log_target=True, reduction="sum")
                    / target_lens[i])
    return torch.stack(rows).mean()


def test_the_divergence_is_kl_of_the_chunk_from_the_full_context_over_real_frames_and_trains_only_the_chunk():
    torch.manual_seed(0)
    log_probs = torch.randn(9, 4, 6, dtype=torch.float64).log_softmax(-1).requires_grad_()  # (T', 2B, V)
    out_lens, target_lens = torch.tensor([9, 5, 9, 5]), torch.tensor([3, 2])
    got = chunk_divergence(log_probs, out_lens, target_lens)
    torch.testing.assert_close(got, _kl(log_probs, out_lens, target_lens), atol=1e-12, rtol=0)
    got.backward()
    assert torch.all(log_probs.grad[:, :2] == 0) and log_probs.grad[:5, 2:].abs().sum() > 0
    assert torch.all(log_probs.grad[5:, 3] == 0)  # frames past the row's end
    same = torch.cat([log_probs[:, :2], log_probs[:, :2]], 1)
    assert float(chunk_divergence(same, out_lens, target_lens).detach()) == 0.0
    weighted = chunk_divergence(log_probs, out_lens, target_lens, torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(weighted, _kl(log_probs[:, [0, 2]], out_lens[[0, 2]], target_lens[:1]))


def test_the_step_loss_in_both_modes_is_the_two_ctcs_averaged_plus_the_weighted_divergence():
    torch.manual_seed(0)
    over = {"layers": 1, "d_model": 32, "heads": 2, "subsampling_channels": 8, "dropout": 0.0, "conv_context": "chunk",
            "train_modes": "both", "distill": 0.7}
    model = build_model("conformer-streaming-tiny", over, 40, 29).train()
    feats, lengths = torch.randn(3, 40, 400), torch.tensor([400, 260, 180])
    targets, target_lens = torch.randint(1, 29, (15,)), torch.tensor([7, 5, 3])
    batch = Batch(feats, lengths, targets, target_lens, ["", "", ""], [0, 1, 2])
    step = EagerStep(model, model, torch.optim.SGD(model.parameters(), lr=0.1), Precision("fp32", torch.device("cpu")),
                     LocalStrategy(), 0.0, torch.device("cpu"))
    torch.manual_seed(3)
    got = step.loss(batch)
    torch.manual_seed(3)
    logits, out_lens = model(feats, lengths)
    lp = logits.log_softmax(-1).transpose(0, 1)  # (T', 6, V)
    padded = torch.zeros(3, 7, dtype=torch.long)
    for i, row in enumerate(torch.split(targets, target_lens.tolist())):
        padded[i, :len(row)] = row
    ctc = [F.ctc_loss(lp[:, half], padded, out_lens[half], target_lens, zero_infinity=True)
           for half in (slice(0, 3), slice(3, 6))]
    want = (ctc[0] + ctc[1]) / 2 + 0.7 * _kl(lp, out_lens, target_lens)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert abs(float((ctc[0] - ctc[1]).detach())) > 1e-6  # the chunk's rows are not the full context's


def test_a_run_in_both_modes_trains_saves_and_scores_in_chunks(tmp_path, capsys):
    out = tmp_path / "run"
    cfg = ldc_config(out, "model.name=conformer-streaming-tiny", "features.kind=logmel", "features.n_mels=40",
                     "model.overrides={layers: 1, d_model: 32, heads: 2, subsampling_channels: 8, conv_context: chunk, "
                     "train_modes: both, distill: 1.0}", "trainer.max_steps=4", "trainer.log_every=1")
    summary = Trainer(cfg).fit()
    assert summary["step"] == 4
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if r["kind"] == "train"]
    assert len(losses) == 4 and all(map(torch.isfinite, torch.tensor(losses))), losses
    m = cfg.data.val_manifest
    code, stdout, err = main_cli(capsys, "eval", "--checkpoint", str(out / "checkpoints" / "last.pt"), "--manifest", m,
                                 "--attention-chunk", "4", "--json")
    assert code == 0, err
    lines = len(open(m).read().splitlines())
    assert json.loads(stdout)["utterances"] == lines
