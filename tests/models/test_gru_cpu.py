"""The CPU GRU direction with a hand-written backward through time equals torch.nn.GRU, values and gradients."""
import pytest
import torch

from speechscale.models.gru_cpu import GRUDirection


@pytest.mark.parametrize("batch, steps, inputs, hidden", [(3, 7, 5, 4), (2, 1, 3, 2), (4, 30, 16, 8)])
def test_values_and_gradients_equal_torchs_gru(batch, steps, inputs, hidden):
    torch.manual_seed(0)
    gru = torch.nn.GRU(inputs, hidden, batch_first=True).double()
    x = torch.randn(batch, steps, inputs, dtype=torch.double, requires_grad=True)
    weights = [gru.weight_ih_l0, gru.weight_hh_l0, gru.bias_ih_l0, gru.bias_hh_l0]
    ref, _ = gru(x)
    out = GRUDirection.apply(x, *weights)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    grad = torch.randn_like(ref)
    for a, b in zip(torch.autograd.grad(out, [x, *weights], grad), torch.autograd.grad(ref, [x, *weights], grad)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_the_training_layer_uses_it_and_matches_the_packed_reference():
    """RecurrentLayer on CPU with grad: its bidirectional output over a padded batch equals packed nn.GRU."""
    from speechscale.models.rnn import RecurrentLayer

    torch.manual_seed(1)
    layer = RecurrentLayer(6, 5, "gru", True, "concat", norm=False).double()
    lengths = torch.tensor([9, 4, 7])
    x = torch.randn(3, 9, 6, dtype=torch.double, requires_grad=True)
    mask = torch.arange(9)[None] < lengths[:, None]
    out = layer(x, lengths, mask)
    ref = layer._packed(x, lengths, None) * mask[..., None]
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    g = torch.randn_like(out)
    torch.testing.assert_close(torch.autograd.grad(out, x, g)[0], torch.autograd.grad(ref, x, g)[0], rtol=0, atol=1e-12)
