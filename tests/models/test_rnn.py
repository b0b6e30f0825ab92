"""The recurrent layer: CPU path against the packed cuDNN path, and its precision handling."""
import pytest
import torch

from speechscale.models import build_model
from speechscale.models.layers import length_mask
from speechscale.models.rnn import RecurrentLayer


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
