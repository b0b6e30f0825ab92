"""Conformer-CTC's own parts: the relative-position shift, masking of padded keys, the depthwise conv's
padding and its reach within an attention chunk, dropout only in training."""
import pytest
import torch

from speechscale.config import ConfigError
from speechscale.models import build_model
from speechscale.models.conformer import (
    ConformerConfig,
    ConvModule,
    RelPositionAttention,
    chunk_mask,
    rel_shift,
    relative_index,
    relative_positions,
)


@pytest.mark.parametrize("frames", [1, 2, 7])
def test_rel_shift_puts_the_score_of_position_i_minus_j_at_i_j(frames):
    t = torch.arange(frames)
    positions = relative_positions(t)  # (2T-1,) T-1 .. -(T-1)
    assert positions.tolist() == list(range(frames - 1, -frames, -1))
    scores = (positions.float() * 10)[None, None, None, :].expand(2, 3, frames, -1)  # score = 10 x position
    shifted = rel_shift(scores, relative_index(t, t))
    want = (t[:, None] - t[None, :]).float() * 10  # (T, T)
    assert shifted.shape == (2, 3, frames, frames) and torch.equal(shifted[1, 2], want)


def test_rel_shift_of_a_chunk_against_its_left_context_and_the_chunk_mask():
    """Queries 0..C-1 after L cached keys: key j sits L + i - j positions before query i."""
    c, left = 3, 4
    positions = torch.arange(left + c - 1, -c, -1)  # what the streaming step embeds
    scores = (positions.float() * 10)[None, None, None, :].expand(1, 1, c, -1)
    shifted = rel_shift(scores, relative_index(torch.arange(c), torch.arange(left + c)))
    want = (left + torch.arange(c)[:, None] - torch.arange(left + c)[None, :]).float() * 10
    assert shifted.shape == (1, 1, c, left + c) and torch.equal(shifted[0, 0], want)
    allowed = chunk_mask(torch.arange(8), chunk=3, left=2)  # chunks [0,3) [3,6) [6,8)
    assert allowed[4].tolist() == [False, True, True, True, True, True, False, False]
    assert allowed[0].tolist() == [True, True, True] + [False] * 5 and allowed[7].tolist() == [False] * 4 + [True] * 4


def test_attention_ignores_what_padded_keys_hold():
    torch.manual_seed(0)
    attn = RelPositionAttention(16, 2, dropout=0.0).eval()
    t = torch.arange(6)
    pos = torch.randn(11, 16)
    x = torch.randn(1, 6, 16)
    mask = torch.tensor([[True] * 4 + [False] * 2])
    noisy = x.clone()
    noisy[:, 4:] = 1e3 * torch.randn(1, 2, 16)
    allowed, index = mask[:, None, None, :], relative_index(t, t)
    with torch.no_grad():
        torch.testing.assert_close(attn(x, x, allowed, pos, index)[:, :4], attn(noisy, noisy, allowed, pos, index)[:, :4])


def test_dropout_acts_only_in_training_and_the_tiny_preset_learns_one_batch():
    torch.manual_seed(0)
    model = build_model("conformer-tiny", {"layers": 2}, 80, 29)
    feats, lengths = torch.randn(2, 80, 120), torch.tensor([120, 90])
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(feats, lengths)[0], model(feats, lengths)[0])
    model.train()
    targets, target_lens = torch.randint(1, 29, (2, 8)), torch.tensor([8, 6])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(25):
        logits, out_lens = model(feats, lengths)
        loss = torch.nn.functional.ctc_loss(logits.log_softmax(-1).transpose(0, 1), targets, out_lens, target_lens)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


def test_an_even_kernel_or_heads_that_do_not_divide_the_width_are_refused():
    with pytest.raises(ConfigError, match="odd"):
        build_model("conformer-tiny", {"conv_kernel": 14}, 80, 29)
    with pytest.raises(ConfigError, match="divisible"):
        build_model("conformer-tiny", {"heads": 5}, 80, 29)
    with pytest.raises(ConfigError, match="conv_context 'ahead' is unknown; choose one of causal, chunk"):
        build_model("conformer-streaming-tiny", {"conv_context": "ahead"}, 80, 29)
    assert ConformerConfig().d_model == 256


@pytest.mark.parametrize("chunk", [1, 3, 8, 40])
def test_a_chunked_convolution_reads_its_chunk_and_what_came_before_never_past_it(chunk):
    """Frames in a chunk come out as the whole module computes them on the utterance cut at the chunk's end: the
    kernel's left half reads earlier chunks, its right half stops at the chunk's end (zeros, as past an utterance's
    end). A chunk as long as the utterance is the full context; an unchunked module reads past every chunk."""
    torch.manual_seed(0)
    conv = ConvModule(6, 7, 0.0).double().eval()
    conv.bn.running_mean.uniform_(-0.5, 0.5)
    x, t = torch.randn(2, 29, 6, dtype=torch.float64), 29
    mask = torch.ones(2, t, dtype=torch.bool)
    mask[1, 20:] = False
    with torch.no_grad():
        got, full = conv(x, mask, chunk), conv(x, mask)
        for start in range(0, t, chunk):
            end = min(start + chunk, t)
            cut = conv(x[:, :end], mask[:, :end])  # the utterance ends with this chunk
            torch.testing.assert_close(got[:, start:end], cut[:, start:end], atol=1e-12, rtol=0)
    assert torch.equal(got, full) if chunk >= t else not torch.allclose(got, full, atol=1e-3)


@pytest.mark.parametrize("chunk", [1, 2, 5, 16])
def test_the_training_shortcut_of_a_chunked_convolution_is_its_windowed_definition(chunk):
    """Drawn chunks without copies run as the whole utterance's convolution less what each frame read past its
    chunk; the streaming step and every other case run ConvModule._chunked's windows. Both give the same numbers."""
    torch.manual_seed(0)
    conv = ConvModule(6, 7, 0.0).double().eval()
    y = torch.randn(2, 6, 29, dtype=torch.float64)
    with torch.no_grad():
        windows, _ = conv._chunked(y, chunk, 0)
        shortcut = conv._chunked(y, 29, 0)[0] - conv._past_chunk(y, chunk)
        torch.testing.assert_close(shortcut, windows, atol=1e-12, rtol=0)
        assert not torch.allclose(windows, conv._chunked(y, 29, 0)[0], atol=1e-3)  # the chunks cut something


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("chunk,right", [(1, 2), (3, 1), (4, 4), (8, 3), (40, 2)])
def test_with_a_right_context_a_chunk_convolves_its_copies_of_the_next_frames_and_they_read_no_further(
        chunk, right, causal):
    """Copies (the `right` frames after each chunk, appended after the utterance's frames) that hold what those
    frames hold: a chunk's frames and its copies come out as the module computes them on the utterance cut where
    the copies end. Causal or reading to the end of the chunk and its copies."""
    torch.manual_seed(0)
    conv = ConvModule(6, 7, 0.0, causal=causal).double().eval()
    conv.bn.running_mean.uniform_(-0.5, 0.5)
    t = 29
    x = torch.randn(2, t, 6, dtype=torch.float64)
    mask = torch.ones(2, t, dtype=torch.bool)
    mask[1, 20:] = False
    n = -(-t // chunk)
    ahead = ((torch.arange(n) + 1) * chunk)[:, None] + torch.arange(right)  # (n, R) positions copied
    valid = torch.cat([mask, (ahead.flatten() < torch.tensor([t, 20])[:, None])], dim=1)  # (2, T + nR)
    copies = torch.nn.functional.pad(x, (0, 0, 0, n * chunk + right - t))[:, ahead.flatten()]  # (2, nR, 6)
    with torch.no_grad():
        got = conv(torch.cat([x, copies], dim=1), valid, chunk, right)  # (2, T + nR, 6)
        for k in range(n):
            start, end = k * chunk, min((k + 1) * chunk, t)
            reach = min(end + right, t)
            cut = conv(x[:, :reach], mask[:, :reach])  # the utterance ends with this chunk's copies
            torch.testing.assert_close(got[:, start:end], cut[:, start:end], atol=1e-12, rtol=0)
            mine = got[:, t + k * right:t + k * right + reach - end]  # the copies inside the utterance
            torch.testing.assert_close(mine, cut[:, end:reach], atol=1e-12, rtol=0)
    if not causal and chunk < t:  # the copies were read
        assert not torch.allclose(got[:, :t], conv(x, mask, chunk), atol=1e-3)


def test_a_right_context_lets_a_chunk_read_its_next_frames_and_nothing_after_them():
    """In chunks of 4 output frames (16 feature frames) with 3 frames of right context, the first chunk's logits
    follow the feature frames up to 4 (4 + 3) - 1 = 27 and none after; without the right context, none after 15.
    The training forward (both modes, a drawn chunk and its copies) backpropagates finite gradients."""
    torch.manual_seed(0)
    feats, lengths = torch.randn(1, 40, 80), torch.tensor([80])
    reach = {}
    for right in (0, 3):
        model = build_model("conformer-streaming-tiny", {"layers": 2, "conv_context": "chunk", "right_context": right},
                            40, 29).eval()
        model.set_chunk(4)
        with torch.no_grad():
            base = model(feats, lengths)[0][0, :4]
            moved = []
            for frame in range(80):
                bumped = feats.clone()
                bumped[..., frame] += 3.0
                moved.append(not torch.allclose(model(bumped, lengths)[0][0, :4], base, atol=1e-6))
        reach[right] = max(f for f, m in enumerate(moved) if m)
        assert model.stream_lookahead == 4 * right
    assert reach == {0: 15, 3: 27}
    model = build_model("conformer-streaming-tiny", {"layers": 2, "train_modes": "both", "right_context": 3},
                        40, 29).train()
    logits, out_lens = model(torch.randn(2, 40, 120), torch.tensor([120, 77]))
    assert logits.shape == (4, 30, 29) and out_lens.tolist() == [30, 20, 30, 20]
    logits.log_softmax(-1).sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    plain = build_model("conformer-streaming-tiny", {"train_modes": "both"}, 80, 29)
    ahead = build_model("conformer-streaming-tiny", {"train_modes": "both", "right_context": 4}, 80, 29)
    alternate = build_model("conformer-streaming-tiny", {"right_context": 4}, 80, 29)
    base, more, half = plain.flops(1000)[0], ahead.flops(1000)[0], alternate.flops(1000)[0]
    assert more > base and half < more  # the chunks' copies add work; half the batches are chunks when alternating


@pytest.mark.parametrize("chunks", [None, (13, 13)])
def test_training_in_both_modes_returns_the_full_context_rows_then_a_drawn_chunk_of_the_same_rows(chunks):
    """train_modes: both, in training: (2B, T', V), the first B rows as the model computes them at full context and
    the last B as in the chunk it drew (torch's generator, as an alternating batch draws: 1..25 by default, or the
    one chunk min_chunk = max_chunk names); eval is unchanged. Batch norm is put in eval mode so both halves are
    compared on the same statistics, dropout is off."""
    torch.manual_seed(0)
    over = {"layers": 2, "dropout": 0.0, "conv_context": "chunk"}
    if chunks is not None:
        over |= {"min_chunk": chunks[0], "max_chunk": chunks[1]}
    both = build_model("conformer-streaming-tiny", {**over, "train_modes": "both"}, 40, 29).double()
    alone = build_model("conformer-streaming-tiny", over, 40, 29).double()
    for bn in both.modules():
        if hasattr(bn, "running_mean"):
            bn.running_mean.uniform_(-0.3, 0.3)
    alone.load_state_dict(both.state_dict())
    feats, lengths = torch.randn(3, 40, 300, dtype=torch.float64), torch.tensor([300, 211, 97])
    both.train()
    for bn in both.modules():
        if hasattr(bn, "running_mean"):
            bn.eval()
    assert both.trains_pairs and not alone.trains_pairs
    torch.manual_seed(5)
    logits, out_lens = both(feats, lengths)
    torch.manual_seed(5)
    drawn = int(torch.randint(1, 26, ())) if chunks is None else chunks[0]
    alone.eval()
    with torch.no_grad():
        full, lens = alone(feats, lengths)
        alone.set_chunk(drawn)
        chunked, _ = alone(feats, lengths)
    assert logits.shape == (6, *full.shape[1:]) and out_lens.tolist() == lens.tolist() * 2
    torch.testing.assert_close(logits[:3].detach(), full, atol=1e-10, rtol=0)
    torch.testing.assert_close(logits[3:].detach(), chunked, atol=1e-10, rtol=0)
    assert not torch.allclose(full, chunked, atol=1e-3)  # the chunk was drawn below the utterances' lengths
    both.eval()
    assert not both.trains_pairs and both(feats, lengths)[0].shape == full.shape


def test_train_modes_and_distill_are_checked():
    with pytest.raises(ConfigError, match="train_modes 'twice' is unknown; choose one of alternate, both"):
        build_model("conformer-streaming-tiny", {"train_modes": "twice"}, 80, 29)
    with pytest.raises(ConfigError, match="train_modes both trains full context and chunks: it needs a streaming"):
        build_model("conformer-tiny", {"train_modes": "both"}, 80, 29)
    with pytest.raises(ConfigError, match="distill=0.5 needs train_modes: both"):
        build_model("conformer-streaming-tiny", {"distill": 0.5}, 80, 29)
    with pytest.raises(ConfigError, match="distill=-1 needs"):
        build_model("conformer-streaming-tiny", {"train_modes": "both", "distill": -1}, 80, 29)
    with pytest.raises(ConfigError, match="chunks of min_chunk..max_chunk frames; 30..25 is not a range"):
        build_model("conformer-streaming-tiny", {"min_chunk": 30}, 80, 29)
    with pytest.raises(ConfigError, match="0..25 is not a range of 1 or more"):
        build_model("conformer-streaming-tiny", {"min_chunk": 0}, 80, 29)
    with pytest.raises(ConfigError, match="right_context=2 needs a streaming conformer"):
        build_model("conformer-tiny", {"right_context": 2}, 80, 29)
    with pytest.raises(ConfigError, match="right_context=-1 needs"):
        build_model("conformer-streaming-tiny", {"right_context": -1}, 80, 29)


def test_one_mode_a_batch_draws_the_full_context_or_a_chunk_within_min_and_max_chunk():
    model = build_model("conformer-streaming-tiny", {"min_chunk": 6, "max_chunk": 8}, 80, 29).train()
    torch.manual_seed(0)
    drawn = [model._chunk() for _ in range(400)]
    assert set(drawn) == {None, 6, 7, 8}
    assert 150 < drawn.count(None) < 250
