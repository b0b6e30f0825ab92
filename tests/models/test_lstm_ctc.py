"""LSTM-CTC specifics: deltas and frame stacking."""
import torch

from speechscale.models.lstm_ctc import LSTMCTC, LSTMConfig, deltas


def test_deltas_are_the_regression_formula_with_each_utterance_edge_padded_at_its_own_end():
    x = torch.arange(12, dtype=torch.float32).square().view(1, 1, 12).repeat(2, 1, 1)  # (2, 1, 12)
    lengths = torch.tensor([12, 7])
    d = deltas(x, lengths)
    xs = x[0, 0]
    for t in range(2, 10):  # interior: sum_n n (x[t+n] - x[t-n]) / (2 sum_n n^2)
        expect = ((xs[t + 1] - xs[t - 1]) + 2 * (xs[t + 2] - xs[t - 2])) / 10
        assert torch.isclose(d[0, 0, t], expect)
    alone = deltas(x[1:, :, :7], lengths[1:])
    torch.testing.assert_close(d[1, :, :7], alone[0])


def test_stacking_puts_consecutive_frames_side_by_side_and_subsamples():
    model = LSTMCTC(LSTMConfig(deltas=False, stack=3, stride=2, layers=1, hidden=4, projection=0), 2, 5)
    seen = {}
    model.rnns[0].register_forward_pre_hook(lambda m, args: seen.update(x=args[0]))
    feats = torch.arange(14, dtype=torch.float32).view(1, 2, 7)  # features f0 = 0..6, f1 = 7..13
    model(feats, torch.tensor([7]))
    x = seen["x"]  # (1, ceil(7/2)=4, 3 frames x 2 features)
    assert x.shape == (1, 4, 6)
    assert x[0, 1].tolist() == [2, 9, 3, 10, 4, 11]  # frames 2, 3, 4
    assert x[0, 3].tolist() == [6, 13, 0, 0, 0, 0]   # past the end: zeros
