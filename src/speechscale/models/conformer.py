"""Conformer-CTC (Gulati et al. 2020; NeMo's Conformer-CTC): a 4x conv subsampling front end, then blocks of
macaron feed-forward halves around relative-position self-attention and a depthwise convolution module.

A streaming model attends in chunks (Conformer's `set_chunk`, drawn in training), and with a right context each
chunk also reads the frames after it as Emformer does (Shi et al. 2021): copies of them run beside the chunk through
every layer, so what a chunk reads stops R frames after it at every depth.

Every block is padding-invariant: attention never looks at padded keys, the depthwise conv sees zeros
beyond each utterance, and its batch norm keeps padded frames out of its statistics, so an utterance gives the
same output alone as in a padded batch.

    >>> m = Conformer(ConformerConfig(d_model=32, layers=1, heads=2, conv_kernel=5, subsampling_channels=8), 40, 29)
    >>> logits, lens = m(torch.randn(2, 40, 101), torch.tensor([101, 57]))
    >>> logits.shape, lens.tolist()
    (torch.Size([2, 26, 29]), [26, 15])
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..config import ConfigError
from . import flops as F
from .layers import MaskedBatchNorm, conv_out_length, conv_time_carry, conv_time_delay, conv_time_step, length_mask
from .streaming import decided


@dataclass
class ConformerConfig:
    """Architecture of a Conformer-CTC model; the defaults are NeMo's Conformer-CTC-Medium (80 log-mel in)."""

    d_model: int = 256
    layers: int = 18
    heads: int = 4
    ff_expansion: int = 4
    conv_kernel: int = 31
    subsampling_channels: int = 256   # channels of the two stride-2 3x3 convolutions
    dropout: float = 0.1              # after each sub-module, on the embedded input, and on attention weights
    streaming: bool = False           # attention in chunks over a bounded left context, trained over chunk sizes
                                      # drawn per batch (WeNet's U2), convolutions that read no further: streams
    conv_context: str = "causal"      # streaming: what the depthwise convolution reads after a frame: causal
                                      # (nothing) or chunk (the rest of the frame's attention chunk; at full
                                      # context, the whole kernel: dynamic chunk convolution, Li et al. 2023)
    max_chunk: int = 25               # streaming: training draws chunks of min_chunk..max_chunk output frames (half
                                      # the batches, or with train_modes both a second pass: the full context)
    min_chunk: int = 1                # streaming: the smallest chunk training draws (equal to max_chunk: one chunk)
    left_context: int = 64            # streaming: output frames before its chunk a frame attends to (the cache)
    right_context: int = 0            # streaming: output frames after its chunk that the chunk also reads, as
                                      # copies through every layer (Emformer's right context): the step waits
                                      # for them, so a chunk's latency is chunk + right_context frames
    train_modes: str = "alternate"    # streaming: each training batch at full context or in a chunk (alternate), or
                                      # every batch in both (both: the forward returns the rows twice, (2B, T', V),
                                      # the full context's first; about twice the compute a batch)
    distill: float = 0.0              # train_modes both: weight of the chunk's divergence from the full context's
                                      # outputs (in-place distillation, the full context's side detached)


class ConvSubsampling(nn.Module):
    """Features (B, F, T) -> (B, T/4, d): two Conv2d 3x3 stride 2 (+ReLU) over (F, T), then a linear map."""

    def __init__(self, num_features: int, channels: int, d_model: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=2, padding=1)
        self.freq = (((num_features + 1) // 2) + 1) // 2  # (n + 2*1 - 3) // 2 + 1, twice: plain ints (meta-safe)
        self.out = nn.Linear(channels * self.freq, d_model)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        return conv_out_length(conv_out_length(lengths, self.conv1), self.conv2)

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = feats.unsqueeze(1)  # (B, 1, F, T)
        for conv in (self.conv1, self.conv2):
            x = torch.relu(conv(x))  # (B, C, F', T')
            lengths = conv_out_length(lengths, conv)
            x = x * length_mask(lengths, x.shape[-1], x.device)[:, None, None, :].to(x.dtype)
        return self.out(x.permute(0, 3, 1, 2).flatten(2)), lengths  # (B, T', C*F') -> (B, T', d)

    def step(self, feats: torch.Tensor, first: torch.Tensor, length: torch.Tensor, carried: list[torch.Tensor],
             consumed: int | None = None) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """A chunk of features (B, F, 4C) from stream frame `first` (B,) of a stream of `length` (B,) frames ->
        (B, C, d), its decided frames (B, C), the frames to carry next: each conv's last input frame before feature
        frame `consumed` (a multiple of 4; default 4C: the frames after it are read ahead, not consumed)."""
        x, keep = feats[:, None], []  # (B, 1, F, 4C)
        for conv, carry in zip((self.conv1, self.conv2), carried):
            x, k = conv_time_step(conv, x, carry, consumed)  # (B, C', F', n / 2)
            keep.append(k)
            consumed = None if consumed is None else consumed // conv.stride[-1]
            first, length = first // 2, conv_out_length(length, conv)
            ok = decided(first, x.shape[-1], conv_time_delay(conv, 0), length)  # (B, n / 2)
            x = torch.relu(x) * ok[:, None, None, :].to(x.dtype)
        return self.out(x.permute(0, 3, 1, 2).flatten(2)), ok, keep


class FeedForward(nn.Module):
    """LayerNorm -> Linear(d, e*d) -> SiLU -> dropout -> Linear(e*d, d) -> dropout."""

    def __init__(self, d: int, expansion: int, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, expansion * d), nn.SiLU(), nn.Dropout(dropout),
                                 nn.Linear(expansion * d, d), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def relative_positions(frames: torch.Tensor) -> torch.Tensor:
    """(T,) arange -> (2T-1,) relative positions T-1, ..., 1, 0, -1, ..., -(T-1) (tensor ops only, so a traced
    export keeps the time axis dynamic)."""
    return torch.cat([frames.flip(0)[:-1], -frames])


def sinusoid(positions: torch.Tensor, d: int) -> torch.Tensor:
    """(N,) positions -> (N, d) sinusoidal embeddings (sin on even, cos on odd channels)."""
    inv = torch.exp(torch.arange(0, d, 2, device=positions.device, dtype=torch.float32) * (-math.log(10000.0) / d))
    angle = positions.to(torch.float32)[:, None] * inv[None, :]  # (N, d/2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # (N, d)


def rel_shift(scores: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(B, H, Tq, Tq+Tk-1) scores against the relative positions of `relative_index` -> (B, H, Tq, Tk) where
    [i, j] is the score of query i against key j (Transformer-XL's shift, written as a gather)."""
    return scores.gather(-1, index.expand(scores.shape[0], scores.shape[1], -1, -1))


def relative_index(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """(Tq,) and (Tk,) aranges -> (Tq, Tk) columns into positions (Tq-1)+o, ..., o-(Tk-1) (o: how many keys precede
    the first query): (Tq-1) - i + j."""
    return keys[None, :] - queries[:, None] + queries[-1]


def chunk_mask(frames: torch.Tensor, chunk: int, left: int) -> torch.Tensor:
    """(T,) arange -> (T, T) bool: query i sees key j in its own chunk of `chunk` frames or before it, at most
    `left` frames before the chunk's start."""
    start = frames // chunk * chunk  # (T,) each frame's chunk start
    return (frames[None, :] < start[:, None] + chunk) & (frames[None, :] >= start[:, None] - left)


class RelPositionAttention(nn.Module):
    """Multi-head self-attention with Transformer-XL relative positions (content and position biases u, v)."""

    def __init__(self, d: int, heads: int, dropout: float) -> None:
        super().__init__()
        if d % heads:
            raise ConfigError(f"model.overrides: d_model {d} is not divisible by heads {heads}")
        self.heads, self.d_k = heads, d // heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.pos = nn.Linear(d, d, bias=False)
        self.bias_u = nn.Parameter(torch.zeros(heads, self.d_k))
        self.bias_v = nn.Parameter(torch.zeros(heads, self.d_k))
        nn.init.xavier_uniform_(self.bias_u)
        nn.init.xavier_uniform_(self.bias_v)
        self.drop = nn.Dropout(dropout)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, d) -> (B, T, H, d_k). A view with explicit sizes: a traced unflatten fixes the batch size
        in an ONNX export."""
        return x.view(x.shape[0], x.shape[1], self.heads, self.d_k)

    def forward(self, x: torch.Tensor, keys: torch.Tensor, allowed: torch.Tensor, pos: torch.Tensor,
                index: torch.Tensor) -> torch.Tensor:
        """Queries x (B, Tq, d) against keys (B, Tk, d) (x itself offline; the cached left context and x in a step),
        allowed (B, 1, Tq or 1, Tk) the pairs that attend, pos (Tq+Tk-1, d) embeddings of the relative positions
        that `index` (Tq, Tk) picks -> (B, Tq, d)."""
        q = self._heads(self.q(x))  # (B, Tq, H, d_k)
        k, v = self._heads(self.k(keys)).transpose(1, 2), self._heads(self.v(keys)).transpose(1, 2)  # (B, H, Tk, d_k)
        p = self.pos(pos.to(x.dtype)).view(-1, self.heads, self.d_k).permute(1, 2, 0)  # (H, d_k, Tq+Tk-1)
        content = (q + self.bias_u.to(q.dtype)).transpose(1, 2) @ k.transpose(-2, -1)  # (B, H, Tq, Tk)
        position = rel_shift((q + self.bias_v.to(q.dtype)).transpose(1, 2) @ p, index)  # (B, H, Tq, Tk)
        scores = (content.float() + position.float()) / math.sqrt(self.d_k)
        scores = scores.masked_fill(~allowed, torch.finfo(torch.float32).min)
        weights = self.drop(scores.softmax(-1)).to(v.dtype)  # (B, H, Tq, Tk), softmax in fp32
        return self.o((weights @ v).transpose(1, 2).flatten(2))  # (B, Tq, d)


CONV_CONTEXTS = ("causal", "chunk")
TRAIN_MODES = ("alternate", "both")


class ConvModule(nn.Module):
    """LayerNorm -> pointwise conv (2d) -> GLU -> depthwise conv -> masked BN -> SiLU -> pointwise conv -> dropout.
    `causal`: the depthwise convolution reads only the frame and the kernel - 1 before it (a chunk changes
    nothing). Otherwise it reads kernel // 2 frames on each side, and with an attention chunk (`forward`'s `chunk`)
    nothing past the frame's chunk: a chunk streams with its own frames and the kernel // 2 carried before it."""

    def __init__(self, d: int, kernel: int, dropout: float, causal: bool = False) -> None:
        super().__init__()
        if kernel % 2 == 0:
            raise ConfigError(f"model.overrides: conv_kernel must be odd (same padding), got {kernel}")
        self.causal, self.kernel = causal, kernel
        self.norm = nn.LayerNorm(d)
        self.pointwise1 = nn.Conv1d(d, 2 * d, 1)
        self.depthwise = nn.Conv1d(d, d, kernel, padding=0 if causal else kernel // 2, groups=d)
        self.bn = MaskedBatchNorm(d)
        self.pointwise2 = nn.Conv1d(d, d, 1)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, chunk: int | None = None, right: int = 0) -> torch.Tensor:
        """x (B, T, d), mask (B, T), the attention chunk (output frames; None: full context) -> (B, T, d). With
        `right` copies a chunk, x holds the T' frames, then each chunk's copies of the `right` frames after it
        (T = T' + nR, see Conformer._blocks_ahead): a chunk's frames read its copies where they read past it."""
        y = nn.functional.glu(self.pointwise1(self.norm(x).transpose(1, 2)), dim=1)  # (B, d, T)
        y = y * mask[:, None, :].to(y.dtype)  # zeros beyond each utterance
        if chunk is None or (self.causal and not right) or chunk >= y.shape[-1]:  # nothing read past a chunk
            return self._out(self._chunked(y, y.shape[-1], 0)[0], mask)
        if right:
            return self._out(self._chunked(y, chunk, right)[0], mask)
        # chunks without copies, as training draws them: the whole utterance's convolution less what each frame read
        # past its chunk, the same numbers as _chunked's windows at a fraction of their cost when chunks are short
        return self._out(self._chunked(y, y.shape[-1], 0)[0] - self._past_chunk(y, chunk), mask)

    def _reach(self) -> tuple[int, int]:
        """Frames the depthwise convolution reads before and after a frame."""
        return (self.kernel - 1, 0) if self.causal else (self.kernel // 2, self.kernel // 2)

    def _chunked(self, y: torch.Tensor, chunk: int, right: int,
                 carried: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The depthwise convolution as a stream runs it, the one definition the offline forward (full context: one
        chunk as long as the utterance) and the streaming step (one chunk) share: chunks of `chunk` frames, each
        followed by copies of the `right` frames after it, each reading the frames before it (the previous chunk's
        last, or `carried`, init_carry's shape, or zeros for the first), its own frames and copies, and zeros after
        them. y (B, d, T' + nR) -> (B, d, T' + nR), and the frames before the end of the last chunk (to carry)."""
        before, after = self._reach()
        b, d, total = y.shape
        n = -(-total // (chunk + right))  # T' + nR lies in (n (C + R) - C, n (C + R)]
        t = total - n * right
        if n == 1:  # one window (a whole utterance, a stream's step): its frames padded once, no unfold
            seen = (nn.functional.pad(y, (before, after)) if carried is None
                    else nn.functional.pad(torch.cat([carried, y], dim=-1), (0, after)))  # (B, d, before + C + R + after)
            z = nn.functional.conv1d(seen, self.depthwise.weight, self.depthwise.bias, groups=d)  # (B, d, C + R)
            return z, seen[..., t:before + t]  # (B, d, before): the chunk's last frames, not its copies
        head = y.new_zeros(b, d, before) if carried is None else carried
        main = torch.cat([head, y[..., :t], y.new_zeros(b, d, n * chunk - t)], dim=-1)  # (B, d, before + nC)
        windows = torch.cat([main.unfold(-1, before + chunk, chunk),  # (B, d, n, before + C)
                             y[..., t:].unflatten(-1, (n, right)),  # (B, d, n, R)
                             y.new_zeros(b, d, n, after)], dim=-1).transpose(1, 2)  # (B, n, d, window)
        z = nn.functional.conv1d(windows.reshape(b * n, d, -1), self.depthwise.weight, self.depthwise.bias,
                                 groups=d)  # (Bn, d, C + R)
        z = z.view(b, n, d, chunk + right).transpose(1, 2)  # (B, d, n, C + R)
        out = torch.cat([z[..., :chunk].flatten(2)[..., :t], z[..., chunk:].flatten(2)], dim=-1)
        return out, main[..., t:before + t]  # (B, d, before)

    def _past_chunk(self, y: torch.Tensor, chunk: int) -> torch.Tensor:
        """What the depthwise convolution over the whole utterance read beyond each frame's chunk of `chunk` frames:
        y (B, d, T) -> (B, d, T), the sum over offsets j = 1 .. k // 2 of weight[j] * y[t + j] where t + j lies in a
        later chunk."""
        h, t = self.kernel // 2, y.shape[-1]
        w = self.depthwise.weight[:, 0, :]  # (d, k): tap h + j reads frame t + j
        place = torch.arange(t, device=y.device) % chunk  # (T,) each frame's place in its chunk
        out = torch.zeros_like(y)
        for j in range(1, h + 1):
            ahead = nn.functional.pad(y[..., j:], (0, min(j, t)))  # (B, d, T): frame t + j (zeros past the end)
            out = out + w[None, :, h + j, None] * ahead * (place + j >= chunk).to(y.dtype)
        return out

    def init_carry(self, batch: int) -> torch.Tensor:
        """The zero depthwise inputs a stream starts with: (B, d, k - 1) causal, else (B, d, k // 2)."""
        d = self.depthwise.in_channels
        if self.causal:
            return conv_time_carry(self.depthwise, (batch, d, 0))  # what conv_time_step carries
        return self.depthwise.weight.new_zeros(batch, d, self.kernel // 2)

    def step(self, x: torch.Tensor, ok: torch.Tensor, carried: torch.Tensor,
             right: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """The module over one attention chunk and its `right` copies: x (B, C + R, d), ok (B, C + R) decided
        frames, carried (init_carry's shape) the depthwise input before the chunk -> (B, C + R, d), the frames to
        carry next (the chunk's last, not the copies)."""
        y = nn.functional.glu(self.pointwise1(self.norm(x).transpose(1, 2)), dim=1)  # (B, d, C + R)
        y = y * ok[:, None, :].to(y.dtype)
        z, keep = self._chunked(y, y.shape[-1] - right, right, carried)
        return self._out(z, torch.ones_like(ok)), keep

    def _out(self, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        y = self.pointwise2(nn.functional.silu(self.bn(y, mask)))
        return self.drop(y.transpose(1, 2))


class ConformerBlock(nn.Module):
    """x + FF/2, + attention, + conv, + FF/2, then LayerNorm."""

    def __init__(self, cfg: ConformerConfig) -> None:
        super().__init__()
        d = cfg.d_model
        self.ff1 = FeedForward(d, cfg.ff_expansion, cfg.dropout)
        self.attn_norm = nn.LayerNorm(d)
        self.attn = RelPositionAttention(d, cfg.heads, cfg.dropout)
        self.attn_drop = nn.Dropout(cfg.dropout)
        if cfg.conv_context not in CONV_CONTEXTS:
            raise ConfigError(f"model.overrides: conv_context {cfg.conv_context!r} is unknown; choose one of "
                              f"{', '.join(CONV_CONTEXTS)}")
        self.conv = ConvModule(d, cfg.conv_kernel, cfg.dropout, causal=cfg.streaming and cfg.conv_context == "causal")
        self.ff2 = FeedForward(d, cfg.ff_expansion, cfg.dropout)
        self.out_norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, allowed: torch.Tensor, pos: torch.Tensor,
                index: torch.Tensor, chunk: int | None = None, right: int = 0) -> torch.Tensor:
        """x (B, T, d), mask (B, T), allowed (B, 1, T or 1, T), the attention chunk and its copies after it (see
        ConvModule.forward) -> (B, T, d)."""
        x = x + 0.5 * self.ff1(x)
        a = self.attn_norm(x)
        x = x + self.attn_drop(self.attn(a, a, allowed, pos, index))
        x = x + self.conv(x, mask, chunk, right)  # only a streaming model draws chunks
        x = x + 0.5 * self.ff2(x)
        return self.out_norm(x)

    def step(self, x: torch.Tensor, ok: torch.Tensor, allowed: torch.Tensor, pos: torch.Tensor, index: torch.Tensor,
             cache: torch.Tensor, carried: torch.Tensor,
             right: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A chunk and its `right` copies x (B, C + R, d) after the cached attention inputs of the L frames before
        it (B, L, d) and the conv module's carried frames -> (B, C + R, d), the new cache, the new carried frames
        (both end at the chunk's end)."""
        x = x + 0.5 * self.ff1(x)
        a = self.attn_norm(x)
        keys = torch.cat([cache, a], dim=1)  # (B, L + C + R, d)
        x = x + self.attn_drop(self.attn(a, keys, allowed, pos, index))
        y, keep = self.conv.step(x, ok, carried, right)
        x = x + y
        x = x + 0.5 * self.ff2(x)
        c = x.shape[1] - right
        return self.out_norm(x), keys[:, c:c + cache.shape[1]], keep


class Conformer(nn.Module):
    """Features (B, F, T) and lengths -> logits (B, T', V) and output lengths T' (T' = ceil(ceil(T/2)/2)); a streaming
    model training in both modes (`trains_pairs`) returns every row twice, full context first."""

    def __init__(self, cfg: ConformerConfig, num_features: int, vocab_size: int) -> None:
        super().__init__()
        if cfg.train_modes not in TRAIN_MODES:
            raise ConfigError(f"model.overrides: train_modes {cfg.train_modes!r} is unknown; choose one of "
                              f"{', '.join(TRAIN_MODES)}")
        if cfg.train_modes == "both" and not cfg.streaming:
            raise ConfigError("model.overrides: train_modes both trains full context and chunks: it needs a streaming "
                              "conformer (conformer-streaming)")
        if cfg.distill < 0 or (cfg.distill > 0 and cfg.train_modes != "both"):
            raise ConfigError(f"model.overrides: distill={cfg.distill:g} needs train_modes: both and a weight >= 0")
        if not 1 <= cfg.min_chunk <= cfg.max_chunk:
            raise ConfigError(f"model.overrides: training draws chunks of min_chunk..max_chunk frames; "
                              f"{cfg.min_chunk}..{cfg.max_chunk} is not a range of 1 or more")
        if cfg.right_context < 0 or (cfg.right_context and not cfg.streaming):
            raise ConfigError(f"model.overrides: right_context={cfg.right_context} needs a streaming conformer "
                              f"(conformer-streaming) and 0 or more frames")
        self.cfg, self.num_features = cfg, num_features
        self.subsampling = ConvSubsampling(num_features, cfg.subsampling_channels, cfg.d_model)
        self.in_drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(ConformerBlock(cfg) for _ in range(cfg.layers))
        self.out = nn.Linear(cfg.d_model, vocab_size)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Frames out for frames in, from the subsampling convolutions' own parameters."""
        return self.subsampling.output_lengths(lengths)

    def flops(self, frames: int) -> tuple[int, int]:
        """(forward, backward) FLOPs for one utterance of `frames` feature frames in training (see models.flops):
        with train_modes both, the blocks and the output layer run twice; a right context adds its copies to the
        chunks' passes (their mean over the drawn chunks). The relative-position projection's input is constant: it
        gets a weight gradient only."""
        s, d, e = self.subsampling, self.cfg.d_model, self.cfg.ff_expansion
        t1 = (frames + 1) // 2  # each 3x3 stride-2 conv with padding 1 halves, rounding up
        t = int(self.output_lengths(torch.tensor(frames)))
        first = F.conv_flops(1, s.conv1.out_channels, (3, 3), (self.num_features + 1) // 2 * t1)
        rest = F.conv_flops(s.conv2.in_channels, s.conv2.out_channels, (3, 3), s.freq * t)
        rest += F.linear_flops(s.out.in_features, d, t)
        head = F.linear_flops(d, self.out.out_features, t)

        def per_block(t: int) -> int:
            return (2 * (F.linear_flops(d, e * d, t) + F.linear_flops(e * d, d, t))  # two feed-forward halves
                    + 4 * F.linear_flops(d, d, t)                                   # q, k, v, out
                    + 2 * t * t * d + 2 * t * (2 * t - 1) * d + 2 * t * t * d       # content, position, values
                    + F.conv_flops(d, 2 * d, (1,), t) + F.conv_flops(d, d, (1,), t)
                    + F.conv_flops(d, d, (self.cfg.conv_kernel,), t, groups=d))

        pos = F.linear_flops(d, d, 2 * t - 1)
        n, cfg = len(self.blocks), self.cfg
        passes = 2 if cfg.streaming and cfg.train_modes == "both" else 1
        blocks = passes * n * per_block(t)
        if cfg.streaming and cfg.right_context:  # a chunk's pass: every chunk's copies beside its frames
            draws = range(cfg.min_chunk, cfg.max_chunk + 1)
            copies = round(sum(-(-t // c) * cfg.right_context for c in draws) / len(draws))
            chunk_passes = 1 if cfg.train_modes == "both" else 0.5
            blocks += round(chunk_passes * n * (per_block(t + copies) - per_block(t)))
        return F.train_flops(first, rest + passes * head + blocks, (passes * n * pos, passes * n * pos))

    def forward(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = feats * length_mask(lengths, feats.shape[-1], feats.device)[:, None, :].to(feats.dtype)  # (B, F, T)
        x, lengths = self.subsampling(x, lengths)  # (B, T', d)
        mask = length_mask(lengths, x.shape[1], x.device)  # (B, T')
        frames = torch.arange(x.shape[1], device=x.device)
        pos = sinusoid(relative_positions(frames), self.cfg.d_model)  # (2T'-1, d)
        allowed = mask[:, None, None, :]  # (B, 1, 1, T'): every valid key
        index = relative_index(frames, frames)
        x = self.in_drop(x)
        if self.trains_pairs:  # the full context, then a drawn chunk: (2B, T', d)
            chunk = self._draw_chunk()
            x = torch.cat([self._blocks(x, mask, allowed, pos, index, frames, None),
                           self._blocks(x, mask, allowed, pos, index, frames, chunk)])
            mask, lengths = torch.cat([mask, mask]), torch.cat([lengths, lengths])
        else:
            x = self._blocks(x, mask, allowed, pos, index, frames, self._chunk())
        x = x * mask[..., None].to(x.dtype)
        return self.out(x), lengths  # (B, T', V); (2B, T', V) when trains_pairs

    def _blocks(self, x: torch.Tensor, mask: torch.Tensor, allowed: torch.Tensor, pos: torch.Tensor,
                index: torch.Tensor, frames: torch.Tensor, chunk: int | None) -> torch.Tensor:
        """Every block with attention in chunks of `chunk` output frames (None: full context): x (B, T', d), frames
        (T',) arange -> (B, T', d)."""
        if chunk is not None and self.cfg.right_context:
            return self._blocks_ahead(x, mask, chunk)
        if chunk is not None:
            allowed = allowed & chunk_mask(frames, chunk, self.cfg.left_context)[None, None]  # (B, 1, T', T')
        for block in self.blocks:
            x = block(x, mask, allowed, pos, index, chunk)
        return x

    def _blocks_ahead(self, x: torch.Tensor, mask: torch.Tensor, chunk: int) -> torch.Tensor:
        """Every block in chunks of `chunk` frames, each chunk also reading the cfg.right_context frames after it
        through copies of them that run beside it in every layer, attending and convolving as the chunk does and
        seen by no other chunk: x (B, T', d) -> (B, T', d)."""
        r, t, dev = self.cfg.right_context, x.shape[1], x.device
        n = -(-t // chunk)
        ahead = ((torch.arange(n, device=dev) + 1) * chunk)[:, None] + torch.arange(r, device=dev)  # (n, R)
        main = torch.arange(t, device=dev)
        place = torch.cat([main, ahead.flatten()])  # (T' + nR,) each frame's position
        owner = torch.cat([main // chunk, torch.arange(n, device=dev).repeat_interleave(r)])  # (T' + nR,) its chunk
        valid = place[None, :] < mask.sum(1)[:, None]  # (B, T' + nR)
        x = torch.cat([x, x[:, ahead.flatten().clamp(max=t - 1)]], dim=1) * valid[..., None].to(x.dtype)
        start = (owner * chunk)[:, None]  # (T' + nR, 1) the query's chunk start
        copy = torch.arange(place.shape[0], device=dev) >= t  # (T' + nR,)
        sees = torch.where(copy, owner[None, :] == owner[:, None],  # copies: only the query's chunk's own
                           (place[None, :] < start + chunk) & (place[None, :] >= start - self.cfg.left_context))
        allowed = valid[:, None, None, :] & sees[None, None]  # (B, 1, T' + nR, T' + nR)
        span = n * chunk + r  # positions 0 .. span - 1
        pos = sinusoid(relative_positions(torch.arange(span, device=dev)), self.cfg.d_model)  # (2 span - 1, d)
        index = place[None, :] - place[:, None] + span - 1  # (T' + nR, T' + nR) query a's column for key b
        for block in self.blocks:
            x = block(x, valid, allowed, pos, index, chunk, r)
        return x[:, :t]

    @property
    def trains_pairs(self) -> bool:
        """Whether this forward returns every row twice, at full context and in a chunk (train_modes: both, in
        training): the training step repeats the targets and adds the distillation term."""
        return self.training and self.cfg.streaming and self.cfg.train_modes == "both"

    def _chunk(self) -> int | None:
        """The attention chunk of this forward (output frames), None for the full context: `self.chunk` in eval; in
        training a streaming model draws one per batch (half the batches the full context)."""
        if not self.cfg.streaming:
            return None
        if not self.training:
            return self.chunk
        if torch.rand(()) < 0.5:
            return None
        return self._draw_chunk()

    def _draw_chunk(self) -> int:
        """A training chunk, uniform over min_chunk..max_chunk output frames."""
        return int(torch.randint(self.cfg.min_chunk, self.cfg.max_chunk + 1, ()))

    # -- streaming (models.streaming): subsampling, then every block on chunks of C output frames, each frame
    #    attending to its chunk and the cfg.left_context frames before it (cached); each conv module reads the
    #    frames it carried and no further than the chunk. With a right context of R frames, the step also takes
    #    the R frames after its chunk and runs them beside it as the offline copies run, then drops them.

    chunk: int | None = None  # eval's attention chunk (set_chunk); the streaming step's is its own chunk

    @property
    def graph_safe(self) -> bool:
        """Whether a captured CUDA graph can replay training steps: not while each batch draws its chunk."""
        return not self.cfg.streaming

    def set_chunk(self, chunk: int | None) -> None:
        """Evaluate with attention in chunks of `chunk` output frames (a streaming model; None: full context)."""
        if chunk is not None and (not self.cfg.streaming or chunk < 1):
            raise ConfigError("an attention chunk needs a streaming conformer (conformer-streaming) and 1 or more "
                              "frames")
        self.chunk = chunk

    def streaming_problem(self) -> str | None:
        """Why this model cannot stream (one line), or None."""
        if not self.cfg.streaming:
            return ("attends over the whole utterance and its convolutions read ahead (a conformer-streaming preset "
                    "streams)")
        return None

    @property
    def stream_stride(self) -> int:
        """Feature frames per output frame."""
        return self.subsampling.conv1.stride[1] * self.subsampling.conv2.stride[1]

    @property
    def stream_lookahead(self) -> int:
        """Feature frames the step reads after its chunk (the right context)."""
        return self.cfg.right_context * self.stream_stride

    @property
    def stream_reads_ahead(self) -> int:
        """Feature frames after a frame's chunk the step reads before that frame's output is decided."""
        return self.stream_lookahead

    def stream_state_names(self) -> list[str]:
        """Names of stream_init's tensors, in order."""
        names = ["subsampling0", "subsampling1"]
        for i in range(len(self.blocks)):
            names += [f"block{i}_attention", f"block{i}_conv"]
        return names

    def stream_init(self, batch: int) -> list[torch.Tensor]:
        """Zeros: each subsampling conv's carried frame, each block's attention inputs of the left context and its
        depthwise convolution's carried frames."""
        s, w = self.subsampling, self.out.weight
        state = [conv_time_carry(s.conv1, (batch, 1, self.num_features, 0)),
                 conv_time_carry(s.conv2, (batch, s.conv2.in_channels, (self.num_features + 1) // 2, 0))]
        for block in self.blocks:
            state += [w.new_zeros(batch, self.cfg.left_context, self.cfg.d_model), block.conv.init_carry(batch)]
        return state

    def stream_step(self, feats: torch.Tensor, frames_in: torch.Tensor, total: torch.Tensor,
                    state: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """feats (B, F, 4C + 4R), frames_in (B,), total (B,), state -> logits (B, C, V), decided (B, C), the new
        state. The step's C is the attention chunk: the logits equal the offline model's with set_chunk(C). The
        last 4R frames (stream_lookahead; R the right context) are the next chunk's first, read but not consumed."""
        r = self.cfg.right_context
        own = feats.shape[-1] - self.stream_lookahead  # 4C
        # the chunk and its copies subsampled in one pass: the copies continue the chunk, and the carried frames
        # are the chunk's last (the next step starts after the chunk)
        x, ok, new = self.subsampling.step(feats, frames_in, total, state[:2], own)  # (B, C + R, d), (B, C + R)
        c, left = x.shape[1], self.cfg.left_context
        first = frames_in // self.stream_stride  # (B,) the chunk's first output frame
        keys = first[:, None] - left + torch.arange(left + c, device=x.device)[None, :]  # (B, L + C) key positions
        length = self.output_lengths(total)
        allowed = ((keys >= 0) & (keys < length[:, None]))[:, None, None, :]  # (B, 1, 1, L + C)
        # query i (at key index L + i) against key j: relative positions L + C - 1 down to -(C - 1)
        pos = sinusoid(torch.arange(left + c - 1, -c, -1, device=x.device), self.cfg.d_model)  # (L + 2C - 1, d)
        index = relative_index(torch.arange(c, device=x.device), torch.arange(left + c, device=x.device))
        for i, block in enumerate(self.blocks):
            x, cache, carry = block.step(x, ok, allowed, pos, index, state[2 + 2 * i], state[3 + 2 * i], r)
            new += [cache, carry]
        x, ok = x[:, :c - r], ok[:, :c - r]  # (B, C, d): the copies only lent their context
        x = x * ok[..., None].to(x.dtype)
        return self.out(x), ok, new
