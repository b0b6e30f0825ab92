"""Word pieces as output units (text.pieces): learned before the first step, kept by the checkpoints, read by every
decoder and by an exported model; a resume keeps the checkpoint's pieces, init_from maps the output rows."""
import json

import jiwer
import pytest
import torch

from speechscale.config import ConfigError
from speechscale.data.pieces import WORD_START, PieceTokenizer
from speechscale.recipe import load_recipe
from speechscale.storage.checkpoints import load_checkpoint
from speechscale.training.init import output_layer
from speechscale.training.trainer import Trainer
from tests.conftest import shared
from tests.training.tiny import ldc_config

LDC = "she had your dark suit in greasy wash water all year"


def test_a_word_piece_model_overfits_ldc93s1_and_every_decoder_reads_it(pieces_checkpoint, tmp_path, cli):
    ckpt = load_checkpoint(pieces_checkpoint)
    text = ckpt["config"]["text"]
    assert text["pieces"] == 40 and WORD_START in text["piece_list"] and len(text["piece_scores"]) == len(
        text["piece_list"])
    tok = PieceTokenizer(text["alphabet"], text["piece_list"], text["piece_scores"])
    assert len(tok.encode(LDC)) < len(LDC) and any(len(p) > 2 for p in tok.pieces)  # longer units than characters
    assert ckpt["model"]["fc.0.weight"].shape[0] == tok.vocab_size
    assert "word pieces" in (pieces_checkpoint.parent / "MODEL.md").read_text()
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    greedy = json.loads(cli("transcribe", "--checkpoint", str(pieces_checkpoint), "--json", wav).stdout)
    assert greedy["text"] == LDC
    assert [w["word"] for w in greedy["words"]] == LDC.split()
    starts = [w["start"] for w in greedy["words"]]
    assert starts == sorted(starts) and all(w["end"] > w["start"] for w in greedy["words"])
    beam = json.loads(cli("transcribe", "--checkpoint", str(pieces_checkpoint), "--decoder", "beam", "--json",
                          wav).stdout)
    assert beam["text"] == LDC and [w["word"] for w in beam["words"]] == LDC.split()
    m = shared("ldc93s1", "manifest.jsonl")  # the same sentence at three rates; trained on the first file only
    scores = json.loads(cli("eval", "--checkpoint", str(pieces_checkpoint), "--manifest", str(m), "--json").stdout)
    files = [str(m.parent / json.loads(x)["audio_filepath"]) for x in m.read_text().splitlines()]
    heard = [json.loads(x)["text"] for x in cli("transcribe", "--checkpoint", str(pieces_checkpoint), "--json",
                                                 *files).stdout.splitlines()]
    assert scores["utterances"] == 3 and scores["wer"] == pytest.approx(jiwer.wer([LDC] * 3, heard))
    assert scores["cer"] == pytest.approx(jiwer.cer([LDC] * 3, heard))
    out = tmp_path / "pieces.onnx"
    cli("export", "--checkpoint", str(pieces_checkpoint), "--format", "onnx", "--out", str(out))
    exported = json.loads(cli("transcribe", "--checkpoint", str(out), "--json", wav).stdout)
    assert exported["text"] == LDC
    aligned = json.loads(cli("align", "--checkpoint", str(pieces_checkpoint), wav, "--text", LDC).stdout)
    assert [(w["word"], w["start"]) for w in aligned["words"]] == [(w["word"], w["start"]) for w in greedy["words"]]
    words = LDC.split()
    (tmp_path / "all.txt").write_text("\n".join(words) + "\n")
    (tmp_path / "no-greasy.txt").write_text("\n".join([w for w in words if w != "greasy"] + ["cheesy"]) + "\n")
    lexicon = json.loads(cli("transcribe", "--checkpoint", str(pieces_checkpoint), "--decoder", "lexicon", "--lexicon",
                             str(tmp_path / "all.txt"), "--beta", "0", "--json", wav).stdout)
    assert lexicon["text"] == LDC
    closed = json.loads(cli("transcribe", "--checkpoint", str(pieces_checkpoint), "--decoder", "lexicon", "--lexicon",
                            str(tmp_path / "no-greasy.txt"), "--beta", "0", "--json", wav).stdout)
    assert "greasy" not in closed["text"] and set(closed["text"].split()) <= set(words) | {"cheesy"}
    hot = json.loads(cli("transcribe", "--checkpoint", str(pieces_checkpoint), "--decoder", "lexicon", "--lexicon",
                         str(tmp_path / "no-greasy.txt"), "--beta", "0", "--hotwords", "greasy", "--json", wav).stdout)
    assert hot["text"] == LDC  # a hotword joins the list
    (tmp_path / "lm.txt").write_text(f"{LDC}\nthe dark suit was in the water\nall year she had your suit\n")
    cli("lm", "build", str(tmp_path / "lm.txt"), "--order", "3", "--out", str(tmp_path / "lm.arpa"))
    with_lm = json.loads(cli("transcribe", "--checkpoint", str(pieces_checkpoint), "--decoder", "beam", "--lm",
                             str(tmp_path / "lm.arpa"), "--json", wav).stdout)
    assert with_lm["text"] == LDC


def test_a_resume_keeps_the_checkpoints_pieces_whatever_the_transcripts_say_now(tmp_path):
    fsdd = shared("fsdd", "manifest.jsonl")
    Trainer(ldc_config(tmp_path / "run", "text.pieces=40", "trainer.max_steps=1")).fit()
    saved = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["config"]["text"]
    # the same run continued on other transcripts: it keeps its pieces (learning now would give others)
    again = Trainer(ldc_config(tmp_path / "run", "text.pieces=40", "trainer.max_steps=2", "trainer.resume=auto",
                               f"data.train_manifest={fsdd}", "data.filter={speaker: george, split: test}"))
    assert again.state.step == 1
    assert again.cfg.text.piece_list == saved["piece_list"]
    fresh = Trainer(ldc_config(tmp_path / "other", "text.pieces=40", "trainer.max_steps=1",
                               f"data.train_manifest={fsdd}", "data.filter={speaker: george, split: test}"))
    assert fresh.cfg.text.piece_list != saved["piece_list"]
    with pytest.raises(ConfigError, match="word pieces") as err:  # another count: learned anew, and they differ
        Trainer(ldc_config(tmp_path / "run", "text.pieces=35", "trainer.max_steps=2", "trainer.resume=auto",
                           f"data.train_manifest={fsdd}", "data.filter={speaker: george, split: test}"))
    assert "\n" not in str(err.value)


def test_init_from_a_character_model_keeps_each_shared_units_trained_output(tmp_path):
    """Characters to pieces: a piece that is one character keeps that character's row, the word start takes the
    space's, the blank its own; a longer piece starts as a fresh model's."""
    Trainer(ldc_config(tmp_path / "chars", "trainer.max_steps=2")).fit()
    source = tmp_path / "chars" / "checkpoints" / "last.pt"
    saved = load_checkpoint(source)
    alphabet = saved["config"]["text"]["alphabet"]
    tuned = Trainer(ldc_config(tmp_path / "tuned", "text.pieces=40", "trainer.max_steps=1",
                               f"trainer.init_from={source}"))
    fresh = Trainer(ldc_config(tmp_path / "fresh", "text.pieces=40", "trainer.max_steps=1"))
    pieces = tuned.cfg.text.piece_list
    assert pieces == fresh.cfg.text.piece_list
    head = output_layer(tuned.model, len(pieces) + 1)
    longer = 0
    for name in (f"{head}.weight", f"{head}.bias"):
        value, old, own = tuned.model.state_dict()[name], saved["model"][name], fresh.model.state_dict()[name]
        assert torch.equal(value[0], old[0])
        for i, p in enumerate(pieces, start=1):
            char = " " if p == WORD_START else p
            if len(char) == 1:
                assert torch.equal(value[i], old[alphabet.index(char) + 1]), p
            else:
                longer += 1
                assert torch.equal(value[i], own[i]), p
    assert longer > 0


def test_word_pieces_with_an_alphabet_read_from_the_transcripts(tmp_path):
    trainer = Trainer(ldc_config(tmp_path / "run", "text.alphabet=auto", "text.pieces=40", "trainer.max_steps=1"))
    assert set(trainer.cfg.text.alphabet) == set(LDC)
    assert {c for p in trainer.cfg.text.piece_list for c in p} <= set(LDC) - {" "} | {WORD_START}


@pytest.mark.parametrize("extra, message", [
    (["text.pieces=-3"], "text.pieces=-3 must be 0 (characters) or a number of word pieces"),
    (["text.pieces=10"], "text.pieces=10 is fewer than the alphabet's 27 characters and the word start: use at "
                         "least 28"),
    (["text.piece_list=[a, b]"], "text.piece_list is set but text.pieces=0"),
    (["text.pieces=40", "text.alphabet='ab '", "text.piece_list=[a, b, c]", "text.piece_scores=[0, 0, 0]"],
     "text.piece_list: word pieces spell characters outside the alphabet: 'c'"),
])
def test_bad_piece_settings_are_one_line_errors(tmp_path, extra, message):
    m = shared("ldc93s1", "manifest.jsonl")
    with pytest.raises(ConfigError) as err:
        load_recipe(None, [f"data.train_manifest={m}", f"data.val_manifest={m}", *extra])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_transcript_too_long_in_characters_for_its_frames_still_trains_in_pieces(pieces_checkpoint, tmp_path):
    """CTC needs a frame per output unit: at a length where the characters cannot fit the model's frames but the
    pieces can, a word-piece model keeps the utterance that a character model skips."""
    from speechscale.components import build_components
    from speechscale.config import Config, from_dict
    from speechscale.data.loading import LabelCheck

    pieces = build_components(from_dict(Config, load_checkpoint(pieces_checkpoint)["config"]))
    chars = build_components(load_recipe(None, ["features.sample_rate=8000"]))
    need_pieces, need_chars = pieces.ctc_min_frames(LDC), chars.ctc_min_frames(LDC)
    ids = pieces.tokenizer.encode(LDC)
    assert need_pieces == len(ids) + sum(a == b for a, b in zip(ids, ids[1:])) < need_chars == len(LDC) + 1  # "ll"
    seconds = next(s / 100 for s in range(50, 500) if pieces.output_frames([s / 100])[0] >= need_pieces)
    frames = pieces.output_frames([seconds])[0]
    assert frames < need_chars
    assert LabelCheck(pieces)(LDC, seconds) is None
    assert LabelCheck(chars)(LDC, seconds) == f"label longer than the model's output frames ({need_chars} > {frames})"
    for n in range(0, 3 * need_chars):  # the shortcut never says yes where the pieces do not fit
        assert pieces.fits(LDC, n) == (need_pieces <= n)
