import pytest
import torch

from speechscale.models import MODELS, build_model
from speechscale.models.layers import MaskedBatchNorm, length_mask


@pytest.mark.parametrize("name", sorted(MODELS))
def test_output_lengths_match_the_real_output_for_odd_lengths(name):
    torch.manual_seed(0)
    model = build_model(name, {}, num_features=81, vocab_size=29).eval()
    lengths = torch.tensor([37, 101, 64, 9])
    feats = torch.randn(4, 81, 101)
    with torch.no_grad():
        logits, out_lens = model(feats, lengths)
    assert torch.equal(out_lens, model.output_lengths(lengths))
    assert logits.shape == (4, int(out_lens.max()), 29)
    for b, n in enumerate(lengths.tolist()):  # each utterance alone has exactly that many frames
        alone, alone_len = model(feats[b:b + 1, :, :n], lengths[b:b + 1])
        assert alone.shape[1] == int(alone_len) == int(out_lens[b])


def test_padding_does_not_change_any_output():
    torch.manual_seed(0)
    model = build_model("ds2-tiny", {}, 81, 29).eval()
    feats, lengths = torch.randn(3, 81, 120), torch.tensor([120, 77, 31])
    with torch.no_grad():
        batched, out_lens = model(feats, lengths)
        for b in range(3):
            alone, _ = model(feats[b:b + 1, :, : lengths[b]], lengths[b:b + 1])
            torch.testing.assert_close(batched[b, : out_lens[b]], alone[0], atol=1e-5, rtol=1e-4)


def test_cpu_rnn_path_equals_the_packed_cudnn_path_in_values_and_gradients():
    torch.manual_seed(0)
    model = build_model("ds2-tiny", {}, 81, 29)
    layer = model.rnns[1]
    x = torch.randn(4, 50, layer.rnn.input_size, requires_grad=True)
    lengths = torch.tensor([50, 41, 50, 7])
    mask = length_mask(lengths, 50)[..., None]
    a = layer._packed(x, lengths) * mask
    b = layer._unpacked(x, lengths) * mask
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    ga = torch.autograd.grad(a.square().sum(), [x, layer.rnn.weight_hh_l0_reverse])
    gb = torch.autograd.grad(b.square().sum(), [x, layer.rnn.weight_hh_l0_reverse])
    for u, v in zip(ga, gb):
        torch.testing.assert_close(u, v, atol=1e-4, rtol=1e-3)


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
