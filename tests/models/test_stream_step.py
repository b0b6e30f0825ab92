"""The models' streaming interface (models.streaming): DeepSpeech2's step, fed any chunking of the features, batched
with other streams of other lengths, gives the offline model's logits; the streaming Conformer's step at chunk C
gives its offline logits with attention in chunks of C (a bounded left context included); each piece of state
matters; models that cannot stream say why."""
import pytest
import torch

from speechscale.components import build_components
from speechscale.config import load_config
from speechscale.models.streaming import UNKNOWN, StreamingModel


def _model(*overrides):
    torch.manual_seed(0)
    cfg = load_config(None, ["model.name=ds2-streaming-tiny", "features.normalize=none", *overrides])
    model = build_components(cfg).model.eval()
    for mod in model.modules():  # statistics away from the identity, so a skipped normalization shows
        if getattr(mod, "running_mean", None) is not None:
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
    return model


def stream_rows(model, feats, chunk, forget=None):
    """Each (F, T_i) of `feats` as one row of a batch, stepped chunk by chunk (each step also reads the model's
    lookahead after its chunk; zeros after a row's end, its length told once its last frame is in) until every row
    has all its output frames -> the decided logits per row. `forget`: the index of a state tensor reset to zeros
    after every step."""
    lens, width = [f.shape[1] for f in feats], chunk + model.stream_lookahead
    expected = [int(model.output_lengths(torch.tensor([n]))[0]) for n in lens]
    state, got, fed = model.stream_init(len(feats)), [[] for _ in feats], 0
    with torch.no_grad():
        while any(sum(len(x) for x in g) < e for g, e in zip(got, expected)):
            x = torch.stack([torch.nn.functional.pad(f[:, fed:fed + width], (0, width - f[:, fed:fed + width].shape[1]))
                             for f in feats])  # (B, F, chunk + lookahead)
            total = torch.tensor([n if fed + width >= n else UNKNOWN for n in lens])
            logits, ok, state = model.stream_step(x, torch.full((len(feats),), fed), total, state)
            assert logits.shape[:2] == ok.shape == (len(feats), chunk // model.stream_stride)
            for i in range(len(feats)):
                got[i].append(logits[i][ok[i]])
            if forget is not None:
                state[forget] = torch.zeros_like(state[forget])
            fed += chunk
    return [torch.cat(g) for g in got]


@pytest.mark.parametrize("overrides", [[], ["model.overrides={rnn_type: lstm, rnn_layers: 2}"],
                                       ["model.overrides={lookahead: 0}"]])
def test_the_step_gives_the_offline_logits_for_every_row_of_a_batch_and_any_chunk(overrides):
    """Rows of 11, 64 and 203 frames in one batch (lengths that end inside a chunk, one shorter than a chunk);
    GRU, LSTM, and no lookahead."""
    model = _model(*overrides)
    assert isinstance(model, StreamingModel) and model.streaming_problem() is None
    feats = [torch.randn(model.num_features, n) for n in (11, 64, 203)]
    with torch.no_grad():
        ref = [model(f[None], torch.tensor([f.shape[1]]))[0][0] for f in feats]
    for chunk in (2, 16, 40):
        for got, want in zip(stream_rows(model, feats, chunk), ref):
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def _conformer(left, conv="causal", right=0):
    torch.manual_seed(0)
    cfg = load_config(None, ["model.name=conformer-streaming-tiny",
                             f"model.overrides={{left_context: {left}, conv_context: {conv}, right_context: {right}}}",
                             "features.kind=logmel", "features.n_mels=80", "features.normalize=none"])
    model = build_components(cfg).model.eval()
    for mod in model.modules():
        if getattr(mod, "running_mean", None) is not None:
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
    return model


@pytest.mark.parametrize("conv,right", [("causal", 0), ("chunk", 0), ("causal", 3), ("chunk", 3)])
def test_the_streaming_conformers_step_at_chunk_c_gives_its_offline_logits_in_chunks_of_c(conv, right):
    """Rows of 11, 64 and 203 feature frames (3 to 51 output frames) in one batch; chunks of 1, 4 and 16 output
    frames; a left context of 12 frames, which the longest row passes, so the cache's bound counts; convolutions
    causal or reading to their chunk's end; no right context, or 3 frames read after each chunk (the step reads
    them too). The full context's logits differ: the chunks are not the whole utterance."""
    model = _conformer(12, conv, right)
    assert model.streaming_problem() is None and model.stream_stride == 4 and model.stream_lookahead == 4 * right
    feats = [torch.randn(80, n) for n in (11, 64, 203)]
    for c in (1, 4, 16):
        model.set_chunk(c)
        with torch.no_grad():
            ref = [model(f[None], torch.tensor([f.shape[1]]))[0][0] for f in feats]
        for got, want in zip(stream_rows(model, feats, 4 * c), ref):
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    model.set_chunk(None)
    with torch.no_grad():
        full = model(feats[2][None], torch.tensor([203]))[0][0]
    assert not torch.allclose(full, ref[2], atol=1e-2)
    from speechscale.config import ConfigError

    with pytest.raises(ConfigError, match="streaming conformer"):
        build_components(load_config(None, ["model.name=conformer-tiny"])).model.set_chunk(4)


@pytest.mark.parametrize("conv", ["causal", "chunk"])
def test_dropping_any_piece_of_the_conformers_state_breaks_it(conv):
    model = _conformer(12, conv)
    model.set_chunk(4)
    feats = [torch.randn(80, 203)]
    with torch.no_grad():
        ref = model(feats[0][None], torch.tensor([203]))[0][0]
    names = model.stream_state_names()
    assert names[:4] == ["subsampling0", "subsampling1", "block0_attention", "block0_conv"] and len(names) == 10
    for k, name in enumerate(names):
        got = stream_rows(model, feats, 16, forget=k)[0]
        assert got.shape == ref.shape and not torch.allclose(got, ref, atol=1e-3), name


def test_dropping_any_piece_of_the_state_breaks_it():
    model = _model()
    feats = [torch.randn(model.num_features, 150)]
    with torch.no_grad():
        ref = model(feats[0][None], torch.tensor([150]))[0][0]
    names = model.stream_state_names()
    assert names == ["conv0", "conv1", "rnn0_h", "rnn1_h", "rnn2_h", "lookahead"]
    for k, name in enumerate(names):
        got = stream_rows(model, feats, 16, forget=k)[0]
        assert got.shape == ref.shape and not torch.allclose(got, ref, atol=1e-3), name


def test_models_that_cannot_stream_say_why_in_one_line():
    from speechscale.models.streaming import streaming_problem

    for overrides, reason in [(["model.name=ds2-tiny"], "bidirectional"),
                              (["model.name=conformer-tiny"], "attends over the whole utterance"),
                              (["model.name=wav2letter+-tiny"], "whole utterance")]:
        comps = build_components(load_config(None, [*overrides, "features.normalize=none"]))
        problem = streaming_problem(comps.model, comps.features.cfg, comps.model_name)
        assert reason in problem and "\n" not in problem
    with pytest.raises(ValueError, match="bidirectional"):
        build_components(load_config(None, ["model.name=ds2-tiny"])).model.rnns[0].step(None, [], None)


@pytest.mark.parametrize("make,expected", [(lambda: _model(), None), (lambda: _model("model.overrides={lookahead: 0}"), None),
                                           (lambda: _conformer(12, "chunk", 0), 0), (lambda: _conformer(12, "chunk", 3), 12)])
def test_reads_ahead_is_what_a_frame_waits_for_before_it_is_decided(make, expected):
    """An open stream stepped one output frame at a time: after the step that has read F feature frames, exactly
    (F - stream_reads_ahead) / stride output frames are decided (counted from the step's flags, not derived from the
    layers); a conformer's is its right context's frames, a DeepSpeech2's its convolutions' and lookahead's delay."""
    model = make()
    stride, ahead = model.stream_stride, model.stream_reads_ahead
    if hasattr(model, "set_chunk"):
        model.set_chunk(1)
    else:
        assert ahead > 0 and ahead % stride == 0
    if expected is not None:
        assert ahead == expected
    feats = torch.randn(1, model.num_features, 60 * stride + model.stream_lookahead)
    state, decided = model.stream_init(1), 0
    with torch.no_grad():
        for k in range(60):
            x = feats[..., k * stride:(k + 1) * stride + model.stream_lookahead]
            _, ok, state = model.stream_step(x, torch.tensor([k * stride]), torch.tensor([UNKNOWN]), state)
            decided += int(ok.sum())
            read = (k + 1) * stride + model.stream_lookahead
            assert decided == max(0, (read - ahead) // stride), k
