"""trainer.cuda_graphs: the model's forward and backward replayed as CUDA graphs per fixed batch shape.

The `gpu` tier (`pytest -m gpu` on a GPU machine; skipped here, saying why, where no CUDA device exists): every
family x precision trains graphed with finite losses, graphed steps equal eager ones, an fp16 overflow is skipped
and recovers, a resumed graphed run is bit-exact, yesno reaches 0 % WER in bf16 with graphs. The CPU tests check
the configuration: what auto means, and the one-line errors."""
import copy
import dataclasses

import pytest
import torch

from speechscale.components import build_components
from speechscale.config import Config, ConfigError, from_dict
from speechscale.data.dataset import Batch
from speechscale.data.manifest import Utterance
from speechscale.data.shapes import pad_to
from speechscale.distributed.strategy import LocalStrategy
from speechscale.models.layers import length_mask
from speechscale.models.registry import RECOMMENDED_FEATURES
from speechscale.models.rnn import BIDIRECTIONAL_SCHEMES, RecurrentLayer, set_bidirectional_scheme
from speechscale.training.graphs import step_shapes
from speechscale.training.optim import build_optimizer
from speechscale.training.precision import Precision
from speechscale.training.step import EagerStep, GraphedStep

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the gpu tier: pytest -m gpu on one)")
# dropout off: the eager and graphed twins must draw nothing from the shared generator to be compared step by step
_W2L = [{"channels": 96, "kernel": 11, "stride": 2}, {"channels": 96, "kernel": 11, "repeat": 2},
        {"channels": 160, "kernel": 21, "dilation": 2}, {"channels": 192, "kernel": 1}]
FAMILIES = {"ds2-tiny": {"dropout": 0.0}, "wav2letter+-tiny": {"blocks": _W2L}, "lstm-ctc-tiny": {"dropout": 0.0},
            "conformer-tiny": {"dropout": 0.0}}


# ---- CPU: configuration -------------------------------------------------------------------------------------------
def _utt(duration):
    return Utterance("x.wav", duration, "a", "a", 1)


def _cfg(**trainer):
    return from_dict(Config, {"trainer": trainer, "model": {"name": "ds2-tiny"}})


def test_auto_captures_on_a_gpu_only_and_then_pads_to_eight_shapes():
    cfg = _cfg()
    comps = build_components(cfg)
    utts = [_utt(1 + i / 10) for i in range(40)]
    assert step_shapes(cfg, comps, utts, torch.device("cpu")) == (None, False)  # the CPU path is untouched
    shapes, graphs = step_shapes(cfg, comps, utts, torch.device("cuda"))  # no allocation: a decision only
    assert graphs and len(shapes.shapes) == 8
    assert step_shapes(cfg, comps, [], torch.device("cuda")) == (None, False)  # a shard stream: eager
    for device in ("cuda", "cpu"):  # torch.compile: eager steps, padded to shapes so that each compiles once
        shapes, graphs = step_shapes(_cfg(compile=True), comps, utts, torch.device(device))
        assert not graphs and len(shapes.shapes) == 8
    assert step_shapes(_cfg(compile=True), comps, [], torch.device("cpu")) == (None, False)  # a shard stream
    few = from_dict(Config, {"trainer": {"compile": True}, "data": {"fixed_shapes": 3}, "model": {"name": "ds2-tiny"}})
    assert len(step_shapes(few, comps, utts, torch.device("cpu"))[0].shapes) == 3
    assert step_shapes(_cfg(cuda_graphs="off"), comps, utts, torch.device("cuda")) == (None, False)
    assert step_shapes(_cfg(cuda_graphs=False), comps, utts, torch.device("cuda")) == (None, False)  # YAML's off
    with pytest.raises(ConfigError, match="needs a CUDA device"):  # YAML's on
        step_shapes(_cfg(cuda_graphs=True), comps, utts, torch.device("cpu"))


@pytest.mark.parametrize("trainer, device, match", [
    ({"cuda_graphs": "on"}, "cpu", "trainer.cuda_graphs=on needs a CUDA device"),
    ({"cuda_graphs": "on", "compile": True}, "cuda", "needs trainer.compile=false"),
    ({"cuda_graphs": "sometimes"}, "cuda", "trainer.cuda_graphs: 'sometimes' is unknown"),
])
def test_what_cannot_be_captured_is_a_one_line_config_error(trainer, device, match):
    cfg = _cfg(**trainer)
    with pytest.raises(ConfigError, match=match):
        step_shapes(cfg, build_components(cfg), [_utt(1.0)], torch.device(device))


def test_a_model_that_draws_its_attention_chunk_per_batch_trains_eagerly():
    """conformer-streaming draws a chunk per batch on the host: a captured graph would replay one draw, so auto
    leaves it eager on a GPU and on says why."""
    cfg = from_dict(Config, {"model": {"name": "conformer-streaming-tiny"}})
    comps = build_components(cfg)
    assert step_shapes(cfg, comps, [_utt(1.0)], torch.device("cuda")) == (None, False)
    cfg = from_dict(Config, {"model": {"name": "conformer-streaming-tiny"}, "trainer": {"cuda_graphs": "on"}})
    with pytest.raises(ConfigError, match="conformer-streaming-tiny draws one per batch"):
        step_shapes(cfg, comps, [_utt(1.0)], torch.device("cuda"))


def test_bench_train_refuses_graphs_on_the_cpu(cli):
    res = cli("bench", "train", "--graphs", "both", "--device", "cpu", check=False)
    assert res.returncode != 0 and "--graphs needs a CUDA device" in res.stderr


def test_where_capture_is_refused_the_update_stays_eager_and_equal_to_the_plain_step(caplog):
    """GraphedUpdate on the CPU: its first call runs the update eagerly, the second tries to capture (refused here:
    no CUDA), warns once and stays eager. Over 4 steps the weights follow the plain clip-and-step of EagerStep."""
    from speechscale.training.graphs import GraphedUpdate
    from speechscale.training.precision import step_if

    cfg = from_dict(Config, {"model": {"name": "ds2-tiny", "overrides": FAMILIES["ds2-tiny"]}})
    nets, opts = [], []
    for _ in range(2):
        torch.manual_seed(0)
        nets.append(build_components(cfg).model.train())
        opts.append(build_optimizer(nets[-1], cfg.optim))
    update = GraphedUpdate(nets[1], opts[1], grad_clip=0.5)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 161, 60, generator=g)
    for step in range(4):
        for net, opt in zip(nets, opts):
            opt.zero_grad()
            logits, _ = net(x, torch.tensor([60, 45]))
            (logits.float().square().mean() * (step + 1)).backward()
        norm = torch.nn.utils.clip_grad_norm_(nets[0].parameters(), 0.5)
        step_if(opts[0], ~torch.isfinite(norm))
        with caplog.at_level("WARNING", logger="speechscale.training.graphs"):
            got_norm, bad_loss, bad_grad = update(torch.tensor(1.0))
        torch.testing.assert_close(got_norm, norm)
        assert not bad_loss and not bad_grad
        for (name, a), b in zip(nets[0].named_parameters(), nets[1].parameters()):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=lambda m, n=name, s=step: f"step {s} {n}: {m}")
    assert update.failed and update.captures == 0
    assert [r.message.split(" (")[0] for r in caplog.records] == [
        "the optimizer step could not be captured as a CUDA graph"]
    assert all(isinstance(grp["lr"], float) for grp in opts[1].param_groups)  # the groups keep plain floats


# ---- GPU ----------------------------------------------------------------------------------------------------------
def _setup(model, precision, graphs, seed=0, optim=None, init_scale=2.0 ** 16):
    cfg = from_dict(Config, {"model": {"name": model, "overrides": FAMILIES[model]}, "optim": optim or {},
                             "features": RECOMMENDED_FEATURES.get(model, {})})
    torch.manual_seed(seed)
    comps = build_components(cfg)
    net = comps.model.cuda().train()
    opt = build_optimizer(net, cfg.optim)
    prec = Precision(precision, torch.device("cuda"), init_scale=init_scale)
    step = (GraphedStep(net, opt, prec, LocalStrategy(), cfg.optim.grad_clip, torch.device("cuda")) if graphs
            else EagerStep(net, net, opt, prec, LocalStrategy(), cfg.optim.grad_clip, torch.device("cuda")))
    return comps, net, step


def _batches(comps, n=20, seed=1):
    """`n` batches of mixed lengths padded to two shapes (fillers included), features from seeded noise."""
    g = torch.Generator().manual_seed(seed)
    f = comps.features.num_features
    out = []
    for i in range(n):
        size, frames = ((3, 160), (2, 240))[i % 2]
        real = size - 1 if i % 4 < 2 else size  # every other batch of a shape carries a filler row
        lens = torch.randint(frames // 2, frames + 1, (real,), generator=g)
        lens[0] = frames
        feats = torch.randn(real, f, frames, generator=g)
        tl = torch.randint(2, 6, (real,), generator=g)
        tgt = torch.randint(1, comps.tokenizer.vocab_size, (int(tl.sum()),), generator=g)
        b = Batch(feats, lens, tgt, tl, [""] * real, list(range(real)), {})
        out.append(pad_to(b, size, frames))
    return out


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("model", list(FAMILIES))
def test_every_family_trains_twenty_graphed_steps_with_finite_loss(model, precision):
    comps, net, step = _setup(model, precision, graphs=True)
    before = {k: v.detach().clone() for k, v in net.named_parameters()}
    losses = [float(step([b])[0]) for b in _batches(comps)]
    assert all(torch.isfinite(torch.tensor(losses))), losses
    assert step.graphs.captures == 2  # one graph per shape, replayed 9 times each
    assert any(not torch.equal(v, dict(net.named_parameters())[k]) for k, v in before.items())


@pytest.fixture
def no_tf32():
    """True fp32 and deterministic cuDNN kernels (no atomics: two runs of one computation agree)."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic = old


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("model", list(FAMILIES))
@pytest.mark.usefixtures("no_tf32")
def test_graphed_steps_equal_eager_steps(model):
    """The same padded batches, eager (lengths on the device, no capture) and graphed, TF32 off: 20 steps' losses
    agree to 1e-3 relative, and batch-norm statistics are those of the steps alone (capture's warm-up undone).
    SGD: an update linear in the gradient, so rounding differences stay at rounding's size (Adam's normalised
    update would blow a 1e-7 difference in a near-zero gradient up to the learning rate)."""
    sgd = {"name": "sgd", "lr": 0.01, "warmup_steps": 0}
    comps, eager_net, eager = _setup(model, "fp32", graphs=False, optim=sgd)
    _, graphed_net, graphed = _setup(model, "fp32", graphs=True, optim=sgd)
    batches = _batches(comps)
    a = [float(eager([b])[0]) for b in batches]
    b = [float(graphed([x])[0]) for x in batches]
    torch.testing.assert_close(torch.tensor(b), torch.tensor(a), rtol=1e-3, atol=1e-5)
    for (name, x), y in zip(eager_net.named_buffers(), graphed_net.buffers()):
        torch.testing.assert_close(y.float(), x.float(), rtol=1e-3, atol=1e-4, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.gpu
@needs_cuda
def test_an_fp16_overflow_is_skipped_and_training_recovers():
    comps, net, step = _setup("ds2-tiny", "fp16", graphs=True, init_scale=256.0)
    batches = _batches(comps, n=4)
    for b in batches[:2]:
        step([b])  # captures both shapes
    scale = step.precision.loss_scale()
    before = {k: v.detach().clone() for k, v in net.named_parameters()}
    huge = dataclasses.replace(batches[0], feats=batches[0].feats * 1e30)  # overflows fp16 in the replayed forward
    _, flags = step([huge])
    assert flags[3] == 0 and (flags[0] + flags[1]) == 1  # not counted: a non-finite loss or gradient
    assert all(torch.equal(v, dict(net.named_parameters())[k]) for k, v in before.items())  # no update
    assert step.precision.loss_scale() == scale / 2
    loss, flags = step([batches[2]])
    assert torch.isfinite(loss) and flags[3] == 1
    assert any(not torch.equal(v, dict(net.named_parameters())[k]) for k, v in before.items())


@pytest.mark.gpu
@needs_cuda
def test_a_resumed_graphed_run_is_bit_exact(tmp_path):
    from speechscale.training.trainer import Trainer
    from tests.training.tiny import ldc_config

    gpu_run = ("trainer.device=cuda", "trainer.precision=bf16", "trainer.cuda_graphs=on",
               "model.overrides={dropout: 0.1, rnn_hidden: 64, rnn_layers: 2}")
    straight = Trainer(ldc_config(tmp_path / "a", "trainer.max_steps=6", *gpu_run))
    straight.fit()
    assert straight.optimizer_step.graphs.captures >= 1
    Trainer(ldc_config(tmp_path / "b", "trainer.max_steps=3", *gpu_run)).fit()
    resumed = Trainer(ldc_config(tmp_path / "b", "trainer.max_steps=6", "trainer.resume=auto", *gpu_run))
    assert resumed.state.step == 3
    resumed.fit()
    for (name, x), y in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(x, y), name


class _Layer(torch.nn.Module):
    """A recurrent layer called as a graphed step calls it: lengths on the device, the mask made from them."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x, lengths):
        return self.layer(x, lengths, length_mask(lengths, x.shape[1]))


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("scheme", BIDIRECTIONAL_SCHEMES)
@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
@pytest.mark.usefixtures("no_tf32")
def test_every_bidirectional_scheme_replayed_in_a_graph_equals_the_packed_path(scheme, rnn_type):
    """Each scheme, captured once with some lengths and replayed with others, gives the packed cuDNN path's outputs
    and gradients (input and weights) for the new lengths, in fp32 (`fused` on a layer without biases, which it
    needs, with garbage in the padded input frames)."""
    torch.manual_seed(0)
    layer = RecurrentLayer(40, 64, rnn_type, bidirectional=True, merge="concat", norm=False,
                           bias=scheme != "fused").cuda()
    set_bidirectional_scheme(layer, scheme)
    t, g = 90, torch.Generator().manual_seed(3)
    x = torch.randn(8, t, 40, device="cuda", requires_grad=True)
    first = torch.randint(1, t + 1, (8,), generator=g).cuda()
    layer.capturable = True  # captured: the padded path
    graphed = torch.cuda.make_graphed_callables(_Layer(layer), (x.detach().clone().requires_grad_(), first))
    layer.capturable = False  # the reference: cuDNN's packed path
    for _ in range(2):  # two replays with new lengths each
        lengths = torch.randint(1, t + 1, (8,), generator=g)
        lengths[0] = t
        mask = length_mask(lengths, t, torch.device("cuda"))
        packed = layer(x, lengths, mask)
        out = graphed(x, lengths.cuda())
        torch.testing.assert_close(out, packed, atol=1e-5, rtol=1e-4)
        w = torch.randn_like(packed)
        params = [x, *layer.parameters()]
        ref = torch.autograd.grad((packed * w).sum(), params)
        got = torch.autograd.grad((out * w).sum(), params)
        for name, u, v in zip(["x", *(n for n, _ in layer.named_parameters())], ref, got):
            torch.testing.assert_close(v, u, atol=1e-4, rtol=1e-3, msg=lambda m, n=name: f"{scheme} {n}: {m}")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.usefixtures("no_tf32")
def test_the_graphed_update_equals_the_eager_update_and_recaptures_after_a_loaded_state():
    """AdamW's update (clip, checks, fused step) replayed as a graph against the same kernels run eagerly, both with
    the model graphed: 20 steps' losses and the final weights agree to rounding; loading a saved optimizer state
    (new tensors) makes the next step eager and the one after capture again."""
    from speechscale.training.graphs import GraphedUpdate

    comps, net, graphed = _setup("ds2-tiny", "fp32", graphs=True, optim={"grad_clip": 0.5})
    _, eager_net, eager = _setup("ds2-tiny", "fp32", graphs=True, optim={"grad_clip": 0.5})
    eager.update = GraphedUpdate(eager_net, eager.optimizer, eager.grad_clip, capture=False)
    batches = _batches(comps)
    a = [float(eager([b])[0]) for b in batches[:10]]
    b = [float(graphed([x])[0]) for x in batches[:10]]
    assert graphed.update.captures == 1 and graphed.update.calls == 10 and eager.update.captures == 0
    graphed.optimizer.load_state_dict(copy.deepcopy(graphed.optimizer.state_dict()))  # same values, new tensors
    a += [float(eager([x])[0]) for x in batches[10:]]
    b += [float(graphed([x])[0]) for x in batches[10:]]
    assert graphed.update.captures == 2
    torch.testing.assert_close(torch.tensor(b), torch.tensor(a), rtol=1e-6, atol=1e-7)
    for (name, x), y in zip(eager_net.named_parameters(), net.parameters()):
        torch.testing.assert_close(y, x, rtol=1e-6, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.gpu
@needs_cuda
def test_a_nan_loss_skips_the_graphed_update_in_bf16():
    comps, net, step = _setup("ds2-tiny", "bf16", graphs=True)
    batches = _batches(comps, n=4)
    for b in batches[:3]:
        step([b])  # eager update, then captured and replayed
    assert step.update is not None and step.update.captures == 1
    before = {k: v.detach().clone() for k, v in net.named_parameters()}
    feats = batches[3].feats.clone()
    feats[0, 0, 0] = float("nan")
    _, flags = step([dataclasses.replace(batches[3], feats=feats)])
    assert flags[3] == 0 and flags[0] + flags[1] == 1
    assert all(torch.equal(v, dict(net.named_parameters())[k]) for k, v in before.items())
    _, flags = step([batches[0]])
    assert flags[3] == 1 and any(not torch.equal(v, dict(net.named_parameters())[k]) for k, v in before.items())
