"""Masked batch norm: statistics without padding, eval mode agreeing with training."""
import torch

from speechscale.models import build_model
from speechscale.models.layers import MaskedBatchNorm, length_mask


def test_masked_batchnorm_statistics_ignore_padding():
    bn = MaskedBatchNorm(4, momentum=1.0)
    x = torch.randn(2, 4, 10)
    lengths = torch.tensor([10, 6])
    padded = x.clone()
    padded[1, :, 6:] = 1000.0  # garbage in padding must not move the statistics
    bn(padded, length_mask(lengths, 10))
    valid = torch.cat([x[0], x[1, :, :6]], dim=1)  # (C, 16)
    torch.testing.assert_close(bn.running_mean, valid.mean(1))
    torch.testing.assert_close(bn.running_var, valid.var(1, unbiased=True))


def test_eval_mode_agrees_with_train_mode_after_statistics_settle():
    torch.manual_seed(0)
    model = build_model("ds2-tiny", {}, 81, 29)
    feats, lengths = torch.randn(6, 81, 80), torch.tensor([80, 80, 60, 40, 70, 33])
    model.train()
    for m in model.modules():
        if isinstance(m, MaskedBatchNorm):
            m.momentum = 1.0
    with torch.no_grad():
        train_out, n = model(feats, lengths)
        eval_out, _ = model.eval()(feats, lengths)
    mask = length_mask(n, train_out.shape[1])
    # With momentum 1 the running statistics are this batch's (unbiased vs biased variance aside).
    assert (train_out - eval_out)[mask].abs().max() < 0.05 * train_out[mask].abs().max()


def test_presets_sizes():
    large = build_model("ds2-large", {}, 161, 29)
    assert len(large.rnns) == 5 and large.rnns[0].rnn.hidden_size == 800 and large.rnns[0].rnn.bidirectional
    assert 50e6 < sum(p.numel() for p in large.parameters()) < 70e6
    streaming = build_model("ds2-streaming", {}, 161, 29)
    assert streaming.lookahead is not None and not streaming.rnns[0].rnn.bidirectional
    lstm = build_model("ds2-tiny", {"rnn_type": "lstm", "rnn_layers": 2}, 81, 29)
    assert isinstance(lstm.rnns[0].rnn, torch.nn.LSTM)
