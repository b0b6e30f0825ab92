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


def test_reverse_within_reverses_each_row_in_its_length_and_its_gradient_is_the_gathers():
    """The reversal and its hand-written backward against autograd's own gather, with a causal consumer (a cumulative
    sum stands in for the RNN) between two reversals and the padding masked, as the bidirectional layer uses it."""
    from speechscale.models.layers import reverse_within

    torch.manual_seed(0)
    x = torch.randn(3, 7, 2, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([7, 4, 0])
    y = reverse_within(x, lengths)
    assert torch.equal(y[1, :4], x[1, :4].flip(0)) and torch.equal(y[0], x[0].flip(0))
    assert torch.equal(reverse_within(y, lengths)[1, :4], x[1, :4])
    idx = (lengths[:, None] - 1 - torch.arange(7)[None]).clamp(min=0)[..., None].expand(-1, -1, 2)
    mask = length_mask(lengths, 7)[..., None]
    w = torch.randn(3, 7, 2, dtype=torch.float64)
    ours = (reverse_within(reverse_within(x, lengths).cumsum(1), lengths) * mask * w).sum()
    plain = (x.gather(1, idx).cumsum(1).gather(1, idx) * mask * w).sum()
    torch.testing.assert_close(ours, plain)
    torch.testing.assert_close(torch.autograd.grad(ours, x)[0], torch.autograd.grad(plain, x)[0])
    assert torch.autograd.gradcheck(lambda v: reverse_within(v, torch.tensor([7, 4, 0])) * mask, (x,))
