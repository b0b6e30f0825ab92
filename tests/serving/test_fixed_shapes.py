"""eval/transcribe --graphs: batches of any shape padded to a few fixed shapes give the unpadded batch's
log-probabilities (eagerly on the CPU; replayed as CUDA graphs in the gpu tier)."""
import json

import pytest
import torch

from speechscale.components import build_components
from speechscale.inference.graphed import FixedShapeForward, bucket_frames, bucket_rows
from speechscale.recipe import load_recipe
from tests.conftest import shared


def test_buckets_pad_by_at_most_an_eighth_and_rows_to_a_power_of_two():
    for frames in range(1, 5000):
        padded = bucket_frames(frames)
        assert padded >= frames and (padded <= max(16, frames * 9 / 8)), frames
    assert len({bucket_frames(f) for f in range(1025, 2049)}) == 8  # eight shapes an octave
    assert [bucket_rows(r) for r in (1, 2, 3, 4, 5, 17)] == [1, 2, 4, 4, 8, 32]


@pytest.mark.parametrize("model", ["ds2-tiny", "ds2-streaming-tiny", "wav2letter+-tiny", "lstm-ctc-tiny",
                                   "conformer-tiny"])
def test_a_padded_batch_gives_the_unpadded_batchs_log_probabilities(model):
    torch.manual_seed(0)
    comps = build_components(load_recipe(None, [f"model.name={model}"]))
    net = comps.model.eval()
    forward = FixedShapeForward(net, graphed=False)
    for rows, frames in ((3, 237), (1, 100), (5, 61)):
        feats = torch.randn(rows, comps.features.num_features, frames)
        lengths = torch.tensor([frames - 7 * i for i in range(rows)])
        with torch.no_grad():
            logits, want_lens = net(feats, lengths)
        got, got_lens = forward(feats, lengths)
        assert got.shape == logits.shape and torch.equal(got_lens, want_lens)
        want = logits.float().log_softmax(-1)
        for b, n in enumerate(want_lens.tolist()):  # frames past a row's length are not compared
            torch.testing.assert_close(got[b, :n], want[b, :n], rtol=1e-5, atol=1e-5)


def test_graphs_need_a_cuda_device_and_whole_batches_in_one_line(ldc_checkpoint, cli):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the gpu tier runs --graphs")
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    manifest = str(shared("ldc93s1", "manifest.jsonl"))
    for args, message in (
            (["eval", "--checkpoint", "missing.pt", "--manifest", manifest, "--graphs"], "needs a CUDA device"),
            (["transcribe", "--checkpoint", str(ldc_checkpoint), "--graphs", wav], "needs a CUDA device"),
            (["transcribe", "--checkpoint", str(ldc_checkpoint), "--graphs", "--backend", "onnx", wav],
             "needs a checkpoint, not an export (onnx)"),
            (["transcribe", "--checkpoint", str(ldc_checkpoint), "--graphs", "--stream", wav], "streaming step")):
        res = cli(*args, check=False)
        assert res.returncode == 2 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1, args
    import speechscale
    from speechscale.config import ConfigError

    with pytest.raises(ConfigError, match="needs a CUDA device"):
        speechscale.load(ldc_checkpoint, device="cpu", graphs=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the gpu tier)")
def test_eval_and_transcribe_with_graphs_give_the_eager_scores_and_text_on_the_gpu(ldc_checkpoint, cli):
    manifest = str(shared("ldc93s1", "manifest.jsonl"))
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    runs = [json.loads(cli("eval", "--checkpoint", str(ldc_checkpoint), "--manifest", manifest, "--device", "cuda",
                           "--json", *extra).stdout) for extra in ([], ["--graphs"])]
    assert runs[1]["graphs"] and (runs[0]["wer"], runs[0]["cer"]) == (runs[1]["wer"], runs[1]["cer"])
    texts = [json.loads(cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--device", "cuda", "--json",
                            *extra, wav).stdout)["text"] for extra in ([], ["--graphs"])]
    assert texts[0] == texts[1] == "she had your dark suit in greasy wash water all year"
    import speechscale

    model = speechscale.load(ldc_checkpoint, device="cuda", graphs=True)  # the Python API takes the same option
    assert model.transcribe(wav).text == texts[0] and isinstance(model.module, torch.nn.Module)
