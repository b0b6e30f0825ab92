"""The corpus tools chained as a team uses them, all through the CLI: a Hugging Face parquet corpus of real
recordings is imported, split with its speakers held out, sharded by two processes, described, trained from its
shards and scored per held-out speaker and per length."""
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import soundfile as sf

from tests.conftest import main_cli, shared


def _parquet(path, per_speaker=6):
    """FSDD recordings of its four speakers as datasets' Audio column holds them (FLAC bytes), with their text."""
    rows = []
    for speaker in ("george", "jackson", "lucas", "nicolas"):
        for digit in range(per_speaker):
            wav = shared("fsdd", "recordings", f"{digit}_{speaker}_0.wav")
            data, rate = sf.read(wav, dtype="int16")
            buf = io.BytesIO()
            sf.write(buf, data, rate, format="FLAC")
            rows.append({"audio": {"bytes": buf.getvalue(), "path": f"{digit}_{speaker}_0.flac"},
                         "sentence": ["zero", "one", "two", "three", "four", "five"][digit], "speaker_id": speaker})
    path.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return rows


def test_import_split_shard_describe_train_and_score_a_parquet_corpus(tmp_path, capsys):
    rows = _parquet(tmp_path / "hf" / "data" / "train-00000-of-00001.parquet")

    def cli(*argv):
        code, out, err = main_cli(capsys, *argv)
        assert code == 0, (argv[:2], err[-2000:])
        return out

    imported = json.loads(cli("data", "import", "parquet", str(tmp_path / "hf"), "--out", str(tmp_path / "corpus"),
                              "--split", "train").splitlines()[-1])
    assert imported["kept"] == len(rows)
    split = json.loads(cli("data", "split", str(tmp_path / "corpus" / "manifest.jsonl"), "--out",
                           str(tmp_path / "splits"), "--by", "speaker_id", "--dev", "0.25", "--test", "0.25"))
    assert (split["train"]["groups"], split["dev"]["groups"], split["test"]["groups"]) == (2, 1, 1)
    cli("data", "shard", str(tmp_path / "splits" / "train.jsonl"), "--out", str(tmp_path / "shards"), "--shard-size",
        "4", "--codec", "flac", "--jobs", "2")
    stats = [json.loads(cli("data", "stats", path, "--json")) for path in (str(tmp_path / "shards"),
                                                                              str(tmp_path / "splits" / "train.jsonl"))]
    assert stats[0]["utterances"] == stats[1]["utterances"] == split["train"]["utterances"]
    assert stats[0]["hours"] == stats[1]["hours"]
    config = tmp_path / "run.yaml"
    config.write_text(f"data: {{train_manifest: {tmp_path / 'shards'}, val_manifest: {tmp_path / 'splits' / 'dev.jsonl'},"
                      f" batch_seconds: 4}}\n"
                      "features: {sample_rate: 8000}\ntext: {alphabet: auto}\n"
                      "model: {name: ds2-tiny, overrides: {rnn_hidden: 32, rnn_layers: 1}}\n"
                      f"trainer: {{out_dir: {tmp_path / 'run'}, progress: false, max_steps: 3}}\n")
    summary = json.loads(cli("train", "--config", str(config)).splitlines()[-1])
    assert summary["step"] == 3 and summary["train_utterances"] == split["train"]["utterances"]
    scores = json.loads(cli("eval", "--checkpoint", str(tmp_path / "run"), "--manifest",
                            str(tmp_path / "splits" / "test.jsonl"), "--by", "speaker_id", "--by", "duration", "--json"))
    assert scores["utterances"] == split["test"]["utterances"]
    test_speakers = {json.loads(x)["speaker_id"] for x in (tmp_path / "splits" / "test.jsonl").read_text().splitlines()}
    assert set(scores["by"]["speaker_id"]) == test_speakers and len(test_speakers) == 1
    assert sum(g["utterances"] for g in scores["by"]["duration"].values()) == scores["utterances"]
