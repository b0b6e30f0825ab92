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
        # how much audio was scored and how fast: the manifest's durations to a hop (10 ms) an utterance
        durations = sum(json.loads(x)["duration"] for x in manifest.read_text().splitlines())
        assert abs(printed["audio_seconds"] - durations) <= 0.01 * printed["utterances"] + 0.01
        assert printed["seconds"] > 0  # rtfx from the unrounded figures: the printed ones agree to their rounding
        assert abs(printed["rtfx"] - printed["audio_seconds"] / printed["seconds"]) <= 0.05 * printed["rtfx"] + 0.1
    shards = tmp_path / "shards"  # a shard stream: counted alike
    cli("-q", "data", "shard", str(manifest), "--out", str(shards))
    printed = json.loads(cli("-q", "eval", "--checkpoint", str(ldc_checkpoint), "--manifest", str(shards / "index.jsonl"),
                             "--json").stdout.strip().splitlines()[-1])
    assert abs(printed["audio_seconds"] - durations) <= 0.01 * printed["utterances"] + 0.01


def test_loading_a_checkpoint_for_inference_leaves_the_compiler_unimported(ldc_checkpoint):
    """eval, transcribe, serve and export start in ~1.5 s: building the model on the meta device (the
    description check) must not pull torch._dynamo in (0.5-0.8 s more per process)."""
    code = ("import sys; from speechscale.components import load_components; "
            f"load_components({str(ldc_checkpoint)!r}); print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr[-2000:]


def test_eval_by_a_manifest_key_scores_each_group_as_jiwer_does(ldc_checkpoint, tmp_path, capsys):
    import jiwer
    import pytest

    from tests.conftest import main_cli

    text = "she had your dark suit in greasy wash water all year"
    rows = [("LDC93S1.wav", text, "a"), ("LDC93S1_pcms16le_1_8000.wav", text, "a"),
            ("LDC93S1_pcms16le_2_44100.wav", "she had a dark suit in greasy water", "b"),
            ("LDC93S1.wav", "all year she had your suit", "b"), ("LDC93S1.wav", text, None)]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(shared("ldc93s1", name)), "duration": 2.92,
                                            "text": t, **({"speaker": s} if s else {"offset": 0.0})}) + "\n"
                                for name, t, s in rows))
    code, out, err = main_cli(capsys, "eval", "--checkpoint", str(ldc_checkpoint), "--manifest", str(manifest), "--json",
                              "--by", "speaker", "--details", str(tmp_path / "d.jsonl"))
    assert code == 0, err
    by = json.loads(out)["by"]["speaker"]
    details = [json.loads(x) for x in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert [d["line"] for d in details] == [1, 2, 3, 4, 5]  # where each is, also for segments of one file
    assert [d.get("offset") for d in details] == [None, None, None, None, 0.0]
    assert list(by) == ["a", "b", "(none)"] and [g["utterances"] for g in by.values()] == [2, 2, 1]
    for name, members in (("a", [0, 1]), ("b", [2, 3]), ("(none)", [4])):
        refs, hyps = [details[i]["reference"] for i in members], [details[i]["hypothesis"] for i in members]
        assert by[name]["wer"] == pytest.approx(jiwer.wer(refs, hyps)) and by[name]["cer"] == pytest.approx(jiwer.cer(refs, hyps))
    assert by["b"]["wer"] > by["a"]["wer"]  # the wrong references score worse
    code, out, _ = main_cli(capsys, "eval", "--checkpoint", str(ldc_checkpoint), "--manifest", str(manifest),
                            "--by", "speaker")
    table = [line.split() for line in out.split("\n\n", 1)[1].splitlines()]
    assert code == 0 and table[0] == ["speaker", "utterances", "words", "WER", "CER"], out
    assert [row[:2] for row in table[1:]] == [["a", "2"], ["b", "2"], ["(none)", "1"]]
    lengths = [2.93, 6.0, 12.0, 40.0, 2.93]  # declared lengths: --by duration groups by them
    manifest.write_text("".join(json.dumps({"audio_filepath": str(shared("ldc93s1", name)), "duration": d, "text": t})
                                + "\n" for (name, t, _), d in zip(rows, lengths)))
    code, out, err = main_cli(capsys, "eval", "--checkpoint", str(ldc_checkpoint), "--manifest", str(manifest), "--json",
                              "--by", "duration")
    assert code == 0, err
    by = json.loads(out)["by"]["duration"]
    assert {k: v["utterances"] for k, v in by.items()} == {"under 5 s": 2, "5-10 s": 1, "10-20 s": 1, "30 s and over": 1}
    for name, members in (("under 5 s", [0, 4]), ("30 s and over", [3])):
        refs, hyps = [details[i]["reference"] for i in members], [details[i]["hypothesis"] for i in members]
        assert by[name]["wer"] == pytest.approx(jiwer.wer(refs, hyps))
    for bad, said in [(["--by", "accent"], "--by accent: no line of"), (["--by", "text"], "--by text: no line of")]:
        code, _, err = main_cli(capsys, "eval", "--checkpoint", str(tmp_path / "none.pt"), "--manifest", str(manifest),
                                *bad)  # the manifest is read before the checkpoint
        assert code == 2 and said in err and "or --by duration" in err and err.count("\n") == 1, err


def test_eval_details_on_a_shard_index_names_each_utterances_shard_and_member(ldc_checkpoint, tmp_path, capsys):
    """eval --details on a shard index wrote "audio": null and no member for every utterance: now its shard and
    its member's key, each utterance once."""
    import tarfile

    from tests.conftest import main_cli

    text = "she had your dark suit in greasy wash water all year"
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(shared("ldc93s1", name)), "duration": 2.92,
                                            "text": text}) + "\n"
                                for name in ("LDC93S1.wav", "LDC93S1_pcms16le_1_8000.wav", "LDC93S1.wav")))
    code, _, err = main_cli(capsys, "data", "shard", str(manifest), "--out", str(tmp_path / "shards"), "--shard-size", "2")
    assert code == 0, err
    code, _, err = main_cli(capsys, "eval", "--checkpoint", str(ldc_checkpoint), "--manifest",
                            str(tmp_path / "shards" / "index.jsonl"), "--details", str(tmp_path / "d.jsonl"))
    assert code == 0, err
    details = [json.loads(x) for x in (tmp_path / "d.jsonl").read_text().splitlines()]
    in_tars = []
    for shard in sorted((tmp_path / "shards").glob("shard-*.tar")):
        with tarfile.open(shard) as tar:
            in_tars += [(shard.name, m.name.split(".")[0]) for m in tar.getmembers() if m.name.endswith(".json")]
    assert [(d["audio"].rsplit("/", 1)[-1], d["member"]) for d in details] == in_tars
