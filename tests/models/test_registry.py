"""Every preset: output lengths, padding invariance, analytic FLOPs against torch's counter."""
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from speechscale.config import ConfigError
from speechscale.models import MODELS, build_model


@pytest.mark.parametrize("name", sorted(set(MODELS) - {"deepspeech-pytorch"}))  # its conv front end is ds2-small's
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


@pytest.mark.parametrize("name", ["ds2-tiny", "ds2-streaming", "wav2letter+-tiny", "lstm-ctc-tiny", "conformer-tiny"])
def test_padding_does_not_change_any_output(name):
    torch.manual_seed(0)
    model = build_model(name, {}, 81, 29).eval()
    feats, lengths = torch.randn(3, 81, 120), torch.tensor([120, 77, 31])
    with torch.no_grad():
        batched, out_lens = model(feats, lengths)
        for b in range(3):
            alone, _ = model(feats[b:b + 1, :, : lengths[b]], lengths[b:b + 1])
            torch.testing.assert_close(batched[b, : out_lens[b]], alone[0], atol=1e-5, rtol=1e-4)



# The backward of ds2-streaming and conformer-tiny is left out: torch's counter counts the weight gradient
# of a depthwise conv (the lookahead, the conv module) as if it were ungrouped; their forward is checked.
@pytest.mark.parametrize("name, backward", [("ds2-tiny", True), ("ds2-streaming", False),
                                            ("wav2letter+-tiny", True), ("lstm-ctc-tiny", True),
                                            ("conformer-tiny", False)])
@pytest.mark.parametrize("frames", [101, 160])
@pytest.mark.filterwarnings("ignore:TF32 acceleration")
def test_analytic_flops_match_torchs_flop_counter(name, backward, frames):
    torch.manual_seed(0)
    model = build_model(name, {}, 64, 29)
    x = torch.randn(1, 64, frames)
    # oneDNN's fused LSTM kernel is invisible to the counter; without it LSTMs decompose into matmuls
    with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as counter:
        logits, _ = model(x, torch.tensor([frames]))
        forward = counter.get_total_flops()
        logits.float().square().sum().backward()
    expected = model.flops(frames)
    assert expected[0] == forward
    if backward:
        assert expected[1] == counter.get_total_flops() - forward


@pytest.mark.parametrize("modes", ["alternate", "both"])
def test_a_streaming_conformer_counts_its_passes_a_training_batch(modes):
    """train_modes both runs the blocks and the output layer twice a batch, the subsampling once."""
    torch.manual_seed(0)
    model = build_model("conformer-streaming-tiny", {"train_modes": modes}, 64, 29).train()
    with FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 64, 160), torch.tensor([160]))
    assert model.flops(160)[0] == counter.get_total_flops()


def test_overrides_change_the_preset_and_unknown_fields_fail():
    model = build_model("wav2letter+-tiny", {"blocks": [{"channels": 8, "kernel": 3, "stride": 2}]}, 64, 29)
    assert len(model.blocks) == 1 and model.blocks[0].conv.out_channels == 8
    with pytest.raises(ConfigError, match="unknown key"):
        build_model("lstm-ctc-tiny", {"cells": 3}, 64, 29)
