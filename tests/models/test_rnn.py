"""The recurrent layer: CPU path against the packed cuDNN path, and its precision handling."""
import pytest
import torch

from speechscale.config import ConfigError
from speechscale.models import build_model
from speechscale.models.layers import align_left, align_right, length_mask
from speechscale.models.rnn import RecurrentLayer, set_bidirectional_scheme


def test_cpu_rnn_path_equals_the_packed_cudnn_path_in_values_and_gradients():
    torch.manual_seed(0)
    model = build_model("ds2-tiny", {}, 81, 29)
    layer = model.rnns[1]
    x = torch.randn(4, 50, layer.rnn.input_size, requires_grad=True)
    lengths = torch.tensor([50, 41, 50, 7])
    mask = length_mask(lengths, 50)[..., None]
    a = layer._packed(x, lengths, None) * mask
    b = layer._unpacked(x, lengths, None) * mask
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    ga = torch.autograd.grad(a.square().sum(), [x, layer.rnn.weight_hh_l0_reverse])
    gb = torch.autograd.grad(b.square().sum(), [x, layer.rnn.weight_hh_l0_reverse])
    for u, v in zip(ga, gb):
        torch.testing.assert_close(u, v, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_under_autocast_the_rnn_runs_in_the_autocast_dtype_and_stays_close(rnn_type, dtype):
    torch.manual_seed(0)
    layer = RecurrentLayer(16, 24, rnn_type, bidirectional=True, merge="concat", norm=True)
    x = torch.randn(3, 40, 16)
    lengths = torch.tensor([40, 33, 12])
    mask = length_mask(lengths, 40)
    ref = layer(x, lengths, mask)
    with torch.autocast("cpu", dtype=dtype):
        low = layer(x, lengths, mask)
    assert low.dtype == dtype
    torch.testing.assert_close(low.float(), ref, atol=0.05, rtol=0.05)
    low.float().square().sum().backward()  # gradients reach the fp32 master weights
    assert layer.rnn.weight_ih_l0.grad is not None and layer.rnn.weight_ih_l0.grad.dtype == torch.float32


def test_the_gpu_packed_path_with_cast_weights_matches_the_cpu_path():
    """The packed path (cuDNN's on GPUs) with bf16 weights cast per call, run here on the CPU."""
    torch.manual_seed(0)
    layer = RecurrentLayer(12, 16, "gru", bidirectional=True, merge="sum", norm=False)
    x = torch.randn(3, 30, 12).bfloat16()
    lengths = torch.tensor([30, 21, 5])
    mask = length_mask(lengths, 30)[..., None]
    packed = layer._packed(x, lengths, torch.bfloat16) * mask
    assert packed.dtype == torch.bfloat16
    torch.testing.assert_close(packed.float(), (layer._unpacked(x, lengths, torch.bfloat16) * mask).float(),
                               atol=0.03, rtol=0.03)


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_the_stacked_fused_call_equals_the_packed_path_in_values_and_gradients(rnn_type):
    """The graphed path's one bidirectional call over 2B rows (each row as is and aligned to the end), run here on
    the CPU in float64: equal to the packed path to round-off, forward and backward, on random lengths."""
    torch.manual_seed(1)
    layer = RecurrentLayer(10, 12, rnn_type, bidirectional=True, merge="concat", norm=False).double()
    t = 37
    lengths = torch.randint(1, t + 1, (6,))
    lengths[0] = t  # the batch's longest row fills the time axis, as in a padded batch
    mask = length_mask(lengths, t)[..., None]
    x = torch.randn(6, t, 10, dtype=torch.float64, requires_grad=True)
    packed = layer._packed(x, lengths, None) * mask
    stacked = layer._stacked(x, lengths, None) * mask
    torch.testing.assert_close(stacked, packed, atol=1e-12, rtol=1e-10)
    w = torch.randn_like(packed)  # a loss that weighs every valid output differently
    params = [x, *layer.rnn.parameters()]
    ga = torch.autograd.grad((packed * w).sum(), params)
    gb = torch.autograd.grad((stacked * w).sum(), params)
    for name, u, v in zip(["x", *(n for n, _ in layer.rnn.named_parameters())], ga, gb):
        torch.testing.assert_close(v, u, atol=1e-12, rtol=1e-10, msg=lambda m, name=name: f"{name}: {m}")
    # the input's padding reaches nothing: its gradient is exactly zero there
    assert float(gb[0][~mask[..., 0]].abs().max()) == 0.0


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_without_biases_one_fused_call_over_the_padded_rows_equals_the_packed_path(rnn_type):
    """The `fused` scheme: one bidirectional call over the B rows as they are, padding zeroed, run here on the CPU in
    float64. Without biases a zero input keeps the zero state exactly zero, so the reverse pass starts each row at
    its last frame from zero, as packing does: equal to the packed path to round-off, forward and backward, on
    random lengths, with garbage in the padded input frames."""
    torch.manual_seed(2)
    layer = RecurrentLayer(10, 12, rnn_type, bidirectional=True, merge="concat", norm=False, bias=False).double()
    assert not any("bias" in n for n, _ in layer.named_parameters())
    t = 41
    lengths = torch.randint(1, t + 1, (7,))
    lengths[0] = t
    mask = length_mask(lengths, t)
    x = torch.randn(7, t, 10, dtype=torch.float64, requires_grad=True)  # the padding holds garbage, not zeros
    packed = layer._packed(x, lengths, None) * mask[..., None]
    fused = layer._fused(x, lengths, None, mask) * mask[..., None]
    torch.testing.assert_close(fused, packed, atol=1e-12, rtol=1e-10)
    w = torch.randn_like(packed)
    params = [x, *layer.rnn.parameters()]
    ga = torch.autograd.grad((packed * w).sum(), params)
    gb = torch.autograd.grad((fused * w).sum(), params)
    for name, u, v in zip(["x", *(n for n, _ in layer.rnn.named_parameters())], ga, gb):
        torch.testing.assert_close(v, u, atol=1e-12, rtol=1e-10, msg=lambda m, name=name: f"{name}: {m}")
    assert float(gb[0][~mask].abs().max()) == 0.0  # the zeroed padding passes no gradient on
    # the mask can also come from the lengths alone (what the layer builds when none is given)
    torch.testing.assert_close(layer._fused(x, lengths, None, None) * mask[..., None], fused, atol=0, rtol=0)
    # the CPU's own padded path (split) agrees too, without biases
    torch.testing.assert_close(layer._unpacked(x, lengths, None, mask) * mask[..., None], packed,
                               atol=1e-12, rtol=1e-10)


def test_with_biases_the_fused_call_would_start_the_reverse_pass_in_the_padding():
    """Why `fused` needs bias-free layers: with biases, a zero input moves the state, and the same one call over
    zero-padded rows differs from the packed path in the reverse direction."""
    torch.manual_seed(3)
    layer = RecurrentLayer(6, 8, "gru", bidirectional=True, merge="concat", norm=False).double()
    lengths = torch.tensor([20, 9])
    mask = length_mask(lengths, 20)
    x = torch.randn(2, 20, 6, dtype=torch.float64) * mask[..., None]
    packed = layer._packed(x, lengths, None)
    one_call = layer.rnn(x)[0]
    torch.testing.assert_close(one_call[0], packed[0], atol=1e-12, rtol=1e-10)  # the full-length row: the same
    assert float((one_call[1, :9, 8:] - packed[1, :9, 8:]).abs().max()) > 1e-3  # the short row's reverse: not
    with pytest.raises(ConfigError, match="exact only without recurrent biases"):
        layer._fused(x, lengths, None, mask)


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_a_bias_free_unidirectional_layer_steps_chunk_by_chunk_as_it_runs_whole(rnn_type):
    """Streaming and export call the RNN op with the layer's bias setting: chunks from a carried state give the
    whole utterance's outputs."""
    torch.manual_seed(4)
    layer = RecurrentLayer(5, 7, rnn_type, bidirectional=False, merge="sum", norm=False, bias=False).eval()
    layer.requires_grad_(False)  # traced with its weights as constants, as an export traces them
    x = torch.randn(2, 30, 5)
    lengths = torch.tensor([30, 30])
    with torch.no_grad():
        whole = layer(x, lengths, length_mask(lengths, 30))
        state, outs = layer.stream_init(2), []
        for start in range(0, 30, 7):
            chunk = x[:, start:start + 7]
            y, state = layer.step(chunk, state, torch.ones(chunk.shape[:2], dtype=torch.bool))
            outs.append(y)
        traced = torch.jit.trace(lambda v: layer._one_way_run(v, layer._weights(layer._weight_names, None)), (x,))
    torch.testing.assert_close(torch.cat(outs, 1), whole, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(traced(x), whole, atol=1e-5, rtol=1e-5)


def test_align_right_and_left_are_inverse_shifts_within_each_row():
    lengths = torch.tensor([5, 3, 0, 1])
    x = torch.arange(4 * 5, dtype=torch.float64).view(4, 5, 1).requires_grad_()
    right = align_right(x, lengths)
    for b, n in enumerate(lengths.tolist()):  # the valid frames, moved to the end of the time axis in order
        assert right[b, 5 - n:, 0].tolist() == x[b, :n, 0].tolist()
    back = align_left(right, lengths)
    mask = length_mask(lengths, 5)[..., None]
    torch.testing.assert_close(back * mask, x * mask)
    # gradients: each valid input frame receives the gradient of the output frame it moved to, padding none
    w = torch.randn(4, 5, 1, dtype=torch.float64)
    (g,) = torch.autograd.grad((align_right(x, lengths) * w).sum(), [x])
    for b, n in enumerate(lengths.tolist()):
        expect = [float(w[b, 5 - n + s, 0]) for s in range(n)] + [0.0] * (5 - n)
        assert g[b, :, 0].tolist() == expect
    (g,) = torch.autograd.grad((align_left(x, lengths) * w * mask).sum(), [x])
    for b, n in enumerate(lengths.tolist()):
        assert g[b, :, 0].tolist() == [0.0] * (5 - n) + [float(w[b, s, 0]) for s in range(n)]


def test_an_unknown_bidirectional_scheme_is_a_config_error():
    model = build_model("ds2-tiny", {}, 81, 29)
    set_bidirectional_scheme(model, "split")
    assert {m.scheme for m in model.modules() if isinstance(m, RecurrentLayer)} == {"split"}
    with pytest.raises(ConfigError, match="scheme 'zigzag' is unknown; use auto, stacked, split, fused"):
        set_bidirectional_scheme(model, "zigzag")
    with pytest.raises(ConfigError, match="exact only without recurrent biases"):  # ds2-tiny has them
        set_bidirectional_scheme(model, "fused")


def test_a_model_is_capturable_only_when_made_so():
    """The padded (graph-capturable) path is chosen by a flag set at set-up, never by where the lengths are."""
    from speechscale.models.rnn import set_capturable

    model = build_model("ds2-tiny", {}, 81, 29)
    layers = [m for m in model.modules() if isinstance(m, RecurrentLayer)]
    assert layers and not any(m.capturable for m in layers)
    set_capturable(model)
    assert all(m.capturable for m in layers)
    set_capturable(model, False)
    assert not any(m.capturable for m in layers)


@pytest.mark.gpu
@pytest.mark.parametrize("overrides", [{}, {"rnn_bias": False}], ids=["biases", "bias-free"])
def test_on_a_gpu_the_capturable_path_gives_the_packed_paths_values(overrides, monkeypatch):
    """ds2-tiny's eager forward with its layers capturable (padded) and not (cuDNN packed), lengths on the device;
    bias-free, `auto` runs each layer as one fused call."""
    from speechscale.models.rnn import set_capturable

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (the gpu tier)")
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    model = build_model("ds2-tiny", overrides, 81, 29).cuda().eval()
    fused, run_fused = [], RecurrentLayer._fused
    monkeypatch.setattr(RecurrentLayer, "_fused", lambda self, *a: fused.append(1) or run_fused(self, *a))
    feats, lengths = torch.randn(4, 81, 120, device="cuda"), torch.tensor([120, 97, 64, 3], device="cuda")
    with torch.no_grad():
        packed, packed_lens = model(feats, lengths)
        set_capturable(model)
        padded, padded_lens = model(feats, lengths)
    assert torch.equal(packed_lens, padded_lens)
    for b, n in enumerate(packed_lens.tolist()):
        torch.testing.assert_close(padded[b, :n], packed[b, :n], atol=1e-5, rtol=1e-4)
    assert bool(fused) == ("rnn_bias" in overrides)  # auto: one fused call a layer exactly when bias-free
