"""The function behind `speechscale eval` (benches score with it in their own process)."""
import json
import subprocess
import sys

from speechscale.decoding.decoders import DecoderConfig
from speechscale.decoding.scoring import score_checkpoint
from tests.conftest import ROOT, shared


def test_score_checkpoint_gives_what_eval_prints(ldc_checkpoint, tmp_path, cli):
    manifest = shared("ldc93s1", "manifest.jsonl")
    for args, dcfg in ((["--decoder", "greedy"], None), (["--decoder", "beam", "--beam-width", "4"],
                                                          DecoderConfig(name="beam", beam_width=4))):
        printed = json.loads(cli("-q", "eval", "--checkpoint", str(ldc_checkpoint), "--manifest", str(manifest),
                                 "--json", *args).stdout.strip().splitlines()[-1])
        scores, res, _ = score_checkpoint(str(ldc_checkpoint), str(manifest), dcfg)
        assert scores == {k: printed[k] for k in scores} and res.utterances == printed["utterances"] > 0


def test_loading_a_checkpoint_for_inference_leaves_the_compiler_unimported(ldc_checkpoint):
    """eval, transcribe, serve and export start in ~1.5 s: building the model on the meta device (the
    description check) must not pull torch._dynamo in (0.5-0.8 s more per process)."""
    code = ("import sys; from speechscale.components import load_components; "
            f"load_components({str(ldc_checkpoint)!r}); print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]
