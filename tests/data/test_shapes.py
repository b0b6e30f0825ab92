"""Fixed batch shapes (data.fixed_shapes): a batch padded to its shape with zero-weight, zero-length fillers trains
exactly as the unpadded batch, for every model family: the real rows' outputs, the loss, every parameter's
gradient and the batch-norm statistics. In float64, to 1e-9 of each tensor's scale (exact up to rounding: in
float32 the sums over more, zero, positions round differently, 2e-5 of a gradient's scale)."""
import copy

import pytest
import torch

from speechscale.data.dataset import Batch
from speechscale.data.shapes import BatchShapes, pad_to
from speechscale.models import build_model
from speechscale.training.precision import Precision
from speechscale.training.step import EagerStep


class _Local:
    """The strategy of one process (what EagerStep asks of it), without a process group."""

    def accumulating(self, forward):
        raise AssertionError("one micro-batch: no accumulation")

    def before_step(self, model, optimizer):
        pass

    def after_step(self, model, optimizer):
        pass


def _batch(lengths: list[int], num_features: int = 40, vocab: int = 29, seed: int = 0) -> Batch:
    """Mixed lengths, features zero beyond each length (as collate pads), random targets of 3-12 tokens."""
    gen = torch.Generator().manual_seed(seed)
    t = max(lengths)
    feats = torch.randn(len(lengths), num_features, t, generator=gen)
    for b, n in enumerate(lengths):
        feats[b, :, n:] = 0
    target_lens = torch.randint(3, 12, (len(lengths),), generator=gen)
    targets = torch.randint(1, vocab, (int(target_lens.sum()),), generator=gen)
    return Batch(feats, torch.tensor(lengths), targets, target_lens, ["x"] * len(lengths), list(range(len(lengths))))


@pytest.mark.parametrize("name", ["ds2-tiny", "ds2-streaming-tiny", "wav2letter+-tiny", "lstm-ctc-tiny", "conformer-tiny"])
def test_a_batch_padded_to_its_shape_trains_as_the_unpadded_batch(name):
    torch.manual_seed(0)
    model = build_model(name, {}, 40, 29).double().train()
    for m in model.modules():  # dropout draws differ between batch shapes; everything else must not
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    twin = copy.deepcopy(model)
    batch = _batch([190, 141, 77, 160])
    batch.feats = batch.feats.double()
    padded = pad_to(batch, 7, 256)  # 3 filler rows, 66 frames more than the longest
    assert padded.feats.shape == (7, 40, 256) and len(padded) == 4 and padded.weights.tolist() == [1] * 4 + [0] * 3

    results = []
    for m, b in ((model, batch), (twin, padded)):
        optimizer = torch.optim.SGD(m.parameters(), lr=0.0)  # the step runs; the weights stay for comparing
        step = EagerStep(m, m, optimizer, Precision("fp32", torch.device("cpu")), _Local(), 0.0, torch.device("cpu"))
        loss = step.loss(b)
        loss.backward()
        with torch.no_grad():
            logits, out_lens = m(b.feats, b.feat_lens)
        results.append((loss.detach(), logits, out_lens, {k: p.grad.clone() for k, p in m.named_parameters()},
                        {k: v.clone() for k, v in m.state_dict().items() if "running" in k}))
    (loss_a, logits_a, lens_a, grads_a, stats_a), (loss_b, logits_b, lens_b, grads_b, stats_b) = results
    torch.testing.assert_close(loss_b, loss_a, atol=1e-9, rtol=1e-9)
    assert torch.equal(lens_b[:4], lens_a) and lens_b[4:].eq(0).all()
    for i, n in enumerate(lens_a.tolist()):
        torch.testing.assert_close(logits_b[i, :n], logits_a[i, :n], atol=1e-9, rtol=1e-9)
    for k in grads_a:
        scale = float(grads_a[k].abs().max().clamp(min=1.0))
        assert float((grads_b[k] - grads_a[k]).abs().max()) <= 1e-9 * scale, (k, scale)
    for k in stats_a:  # batch norm's running statistics: the fillers are not in them
        torch.testing.assert_close(stats_b[k], stats_a[k], atol=1e-9, rtol=1e-9)


def test_a_dropped_filler_weight_would_change_the_loss():
    """The check above can fail: weighting the fillers 1 (as if they were utterances) changes the loss."""
    torch.manual_seed(0)
    model = build_model("ds2-tiny", {}, 40, 29).train()
    step = EagerStep(model, model, torch.optim.SGD(model.parameters(), lr=0.0),
                     Precision("fp32", torch.device("cpu")), _Local(), 0.0, torch.device("cpu"))
    batch = _batch([120, 80])
    padded = pad_to(batch, 4, 128)
    right = step.loss(padded)
    padded.weights = torch.ones(4)
    assert not torch.allclose(step.loss(padded), right)
    torch.testing.assert_close(right, step.loss(batch), atol=1e-5, rtol=1e-5)


def test_every_sampler_batch_of_a_real_corpus_fits_a_shape():
    """Shapes from FSDD's durations: every batch the duration-bucketing sampler forms, in SortaGrad's epoch and
    shuffled ones, fits one of them (frames from the same feature extractor), with at most `count` shapes."""
    import json

    from speechscale.config import FeatureConfig
    from speechscale.data.features import FeatureExtractor
    from speechscale.data.sampler import BucketBatchSampler
    from tests.conftest import shared

    durations = [json.loads(x)["duration"] for x in shared("fsdd", "manifest.jsonl").read_text().splitlines()]
    features = FeatureExtractor(FeatureConfig(sample_rate=8000))
    shapes = BatchShapes.from_durations(durations, 6, batch_seconds=24.0, max_batch_size=32,
                                        frames=lambda s: features.frames_for_seconds(s / 0.9))
    assert len(shapes.shapes) <= 6
    sampler = BucketBatchSampler(durations, 24.0, 32, num_buckets=10, seed=1, sortagrad=True)
    seen = set()
    for epoch in range(3):
        for batch in sampler.batches(epoch):
            longest = max(durations[i] for i in batch) / 0.9  # the slowest speed perturbation stretches it
            shape = shapes.shape_for(len(batch), features.frames_for_seconds(longest))
            assert shape is not None, (epoch, len(batch), longest)
            seen.add(shape)
    assert len(seen) >= 2  # the batches use several shapes, not just the largest
