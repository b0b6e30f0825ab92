"""Decoders on real model output: greedy, beam (with and without a KenLM model), lexicon; the LM builder."""
import json

import pytest
import torch

from speechscale.components import load_components
from speechscale.config import ConfigError
from speechscale.data.audio import load_audio
from speechscale.decoding.decoders import DecoderConfig, build_decoder
from speechscale.decoding.lm import UNK, KenLMScorer, build_arpa
from speechscale.decoding.metrics import ErrorRate
from tests.conftest import shared

LDC = "she had your dark suit in greasy wash water all year"


def _wer(ref, hyp):
    m = ErrorRate()
    m.update([ref], [hyp])
    return m.wer


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    d = tmp_path_factory.mktemp("lm")
    (d / "text.txt").write_text("She had your dark suit, in greasy wash water all year.\nshe had a dark year\n"
                                "wash your suit in water\n")
    build_arpa(d / "text.txt", 3, d / "lm.arpa")
    (d / "lexicon.txt").write_text("\n".join(sorted(set(LDC.split()) | {"a", "wash"})))
    return d


def test_loading_an_lm_shows_kenlm_s_progress_bar_only_where_info_is_logged(lm, capfd):
    """KenLM drew its bar of stars on standard error under -q (and in every script that loaded one)."""
    import logging

    root = logging.getLogger()
    level = root.level
    try:
        for shown, set_level in [(False, logging.WARNING), (True, logging.INFO)]:
            root.setLevel(set_level)
            capfd.readouterr()
            KenLMScorer(lm / "lm.arpa")
            assert ("****" in capfd.readouterr().err) == shown, logging.getLevelName(set_level)
    finally:
        root.setLevel(level)


def test_the_built_lm_has_unk_and_every_distribution_sums_to_one(lm):
    scorer = KenLMScorer(lm / "lm.arpa")
    vocab = scorer.vocabulary()
    assert set(vocab) == set(LDC.split()) | {"a"} and UNK in (lm / "lm.arpa").read_text()
    for history in ([], ["she"], ["she", "had"], ["dark"], ["water", "all"], ["nothing", "seen"]):
        state = scorer.begin()
        for w in history:
            state, _ = scorer.score(state, w)
        total = sum(10 ** scorer.score(state, w)[1] for w in [*vocab, "</s>", UNK])
        assert total == pytest.approx(1.0, abs=1e-5), history


def test_lm_build_reads_a_manifests_and_a_shard_indexs_transcripts_as_it_reads_their_text(tmp_path, cli):
    """`lm build train.jsonl`: the model of the manifest's transcripts, byte for byte what their text file gives; a
    shard index of the same utterances too (FSDD's george, one digit word a clip)."""
    import json

    from speechscale.data.manifest import SkipReport
    from speechscale.data.shards import transcripts
    from tests.conftest import shared

    m = shared("fsdd", "manifest.jsonl")
    rows = [json.loads(x) for x in m.read_text().splitlines() if '"george"' in x][:60]
    manifest = tmp_path / "george.jsonl"
    manifest.write_text("".join(json.dumps({**r, "audio_filepath": str(m.parent / r["audio_filepath"])}) + "\n"
                                for r in rows))
    (tmp_path / "george.txt").write_text("".join(r["text"] + "\n" for r in rows))
    cli("data", "shard", str(manifest), "--out", str(tmp_path / "shards"), "--shard-size", "20")
    index = tmp_path / "shards" / "index.jsonl"
    assert sorted(transcripts(str(index), SkipReport("x"))) == sorted(r["text"] for r in rows)
    for source, name in ((tmp_path / "george.txt", "text"), (manifest, "manifest"), (index, "index")):
        cli("lm", "build", str(source), "--order", "2", "--out", str(tmp_path / f"{name}.arpa"))
    text = (tmp_path / "text.arpa").read_text()
    assert (tmp_path / "manifest.arpa").read_text() == text and "\\2-grams:" in text
    index_lm = KenLMScorer(tmp_path / "index.arpa")  # the same sentences in another order: the same model
    assert sorted(index_lm.vocabulary()) == sorted(KenLMScorer(tmp_path / "text.arpa").vocabulary())
    assert (tmp_path / "index.arpa").read_text().splitlines()[:4] == text.splitlines()[:4]  # the n-gram counts


def test_an_lm_of_another_script_keeps_its_words_and_orders_start_at_two(tmp_path):
    from speechscale.data.text import TextNormalizer

    text = tmp_path / "ru.txt"
    text.write_text("Привет, мир!\nпривет друг\nдруг и мир\n", encoding="utf-8")
    build_arpa(text, 2, tmp_path / "ru.arpa", TextNormalizer("абвгдежзийклмнопрстуфхцчшщъыьэюя' ", "spell", "ru"))
    scorer = KenLMScorer(tmp_path / "ru.arpa")
    assert sorted(scorer.vocabulary()) == sorted(["привет", "мир", "друг", "и"])
    unk = scorer.score(scorer.begin(), "неизвестно")[1]
    assert scorer.score(scorer.begin(), "привет")[1] > unk  # a known word, not <unk>
    with pytest.raises(ConfigError, match="at least 2"):
        build_arpa(text, 1, tmp_path / "one.arpa")
    with pytest.raises(ConfigError, match="at most 6"):  # kenlm-ex could not read it back
        build_arpa(text, 7, tmp_path / "seven.arpa")
    assert not (tmp_path / "seven.arpa").exists()
    (tmp_path / "bytes.arpa").write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ConfigError, match="not a KenLM model"):
        KenLMScorer(tmp_path / "bytes.arpa")


def _log_probs(checkpoint, noise, seed=0):
    comps = load_components(checkpoint)
    wav = load_audio(shared("ldc93s1", "LDC93S1.wav"), comps.features.cfg.sample_rate)
    feats = comps.features(torch.from_numpy(wav))
    gen = torch.Generator().manual_seed(seed)
    feats = feats + noise * torch.randn(feats.shape, generator=gen)
    with torch.no_grad():
        logits, lens = comps.model(feats[None], torch.tensor([feats.shape[1]]))
    return comps, logits.log_softmax(-1), lens


def test_beam_without_lm_agrees_with_greedy_on_a_confident_model(ldc_checkpoint):
    comps, lp, lens = _log_probs(ldc_checkpoint, 0.0)
    greedy = build_decoder("greedy", comps.tokenizer)(lp, lens)
    beam = build_decoder(DecoderConfig("beam", beam_width=8), comps.tokenizer)(lp, lens)
    assert greedy == beam == [LDC]


def test_a_beam_of_no_width_is_refused(ldc_checkpoint):
    comps = load_components(ldc_checkpoint, "cpu")
    for width in [0, -1, 2.5, True]:
        with pytest.raises(ConfigError, match="beam_width must be a whole number of at least 1"):
            build_decoder(DecoderConfig("beam", beam_width=width), comps.tokenizer)


def test_an_lm_and_a_lexicon_repair_noisy_output(ldc_checkpoint, lm):
    comps, lp, lens = _log_probs(ldc_checkpoint, 1.2)  # features buried in noise: greedy output degrades
    greedy = build_decoder("greedy", comps.tokenizer)(lp, lens)[0]
    with_lm = build_decoder(DecoderConfig("beam", lm=str(lm / "lm.arpa"), alpha=1.0, beta=2.0),
                            comps.tokenizer)(lp, lens)[0]
    lexicon = build_decoder(DecoderConfig("lexicon", lexicon=str(lm / "lexicon.txt")), comps.tokenizer,
                            comps.normalizer)(lp, lens)[0]
    words = set((lm / "lexicon.txt").read_text().split())
    assert with_lm and lexicon and set(with_lm.split()) <= words and set(lexicon.split()) <= words
    assert _wer(LDC, with_lm) < _wer(LDC, greedy), (greedy, with_lm)
    assert _wer(LDC, lexicon) < _wer(LDC, greedy), (greedy, lexicon)


def test_a_lexicon_word_the_model_cannot_spell_is_passed_over_and_a_binary_file_is_one_line(ldc_checkpoint, lm,
                                                                                                tmp_path):
    """"straße" keeps its ß through an English model's normalizer and cannot be spelled: the search leaves it out.
    A binary file given as the lexicon or as an LM's text is refused in one line."""
    comps, lp, lens = _log_probs(ldc_checkpoint, 0.0)
    words = (lm / "lexicon.txt").read_text().split()
    (tmp_path / "lex.txt").write_text("\n".join(["straße", *words]) + "\n")
    decoder = build_decoder(DecoderConfig("lexicon", lexicon=str(tmp_path / "lex.txt")), comps.tokenizer,
                            comps.normalizer)
    assert "straße" in decoder.vocabulary and "straße" not in decoder(lp, lens)[0]
    assert decoder(lp, lens)[0] == build_decoder(DecoderConfig("lexicon", lexicon=str(lm / "lexicon.txt")),
                                                 comps.tokenizer, comps.normalizer)(lp, lens)[0]
    with pytest.raises(ConfigError, match="not a text file"):
        build_decoder(DecoderConfig("lexicon", lexicon=str(ldc_checkpoint)), comps.tokenizer, comps.normalizer)
    from speechscale.decoding.lm import build_arpa

    with pytest.raises(ConfigError, match="not a text file"):
        build_arpa(ldc_checkpoint, 3, tmp_path / "x.arpa")


def test_the_lexicon_search_ends_the_last_word_without_a_space(ldc_checkpoint, lm):
    """A model trained on single words (FSDD) never emits a space after its word, and the lexicon trie ends
    every word with one: the utterance's end must count as a word boundary, or the search drops the last word.
    Real output, cut before each of greedy's spaces, with the space made unlikely over the last word."""
    comps, lp, _ = _log_probs(ldc_checkpoint, 0.0)
    space = comps.tokenizer.encode(" ")[0]
    best = lp[0].argmax(-1).tolist()
    runs = [(i, j) for i, j in zip(
        [i for i, t in enumerate(best) if t == space and (i == 0 or best[i - 1] != space)],
        [i for i, t in enumerate(best) if t == space and (i + 1 == len(best) or best[i + 1] != space)])]
    assert len(runs) == len(LDC.split()) - 1
    decoder = build_decoder(DecoderConfig("lexicon", lexicon=str(lm / "lexicon.txt")), comps.tokenizer,
                            comps.normalizer)
    for k, (start, _) in enumerate(runs):
        cut = lp[:, :start].clone()  # (1, T', V): up to the last letter of word k
        cut[0, runs[k - 1][1] + 1 if k else 0:, space] = -40.0  # no space after the previous word's
        assert decoder(cut.log_softmax(-1), torch.tensor([start]))[0] == " ".join(LDC.split()[:k + 1])


@pytest.mark.slow  # the CLI end to end, in this process (make test runs it; make test-fast does not)
def test_cli_builds_an_lm_and_decodes_with_it(ldc_checkpoint, lm, tmp_path, cli):
    text = tmp_path / "t.txt"
    text.write_text(LDC + "\n")
    out = json.loads(cli("lm", "build", str(text), "--order", "2", "--out", str(tmp_path / "x.arpa")).stdout)
    assert out["ngrams"]["1"] == 11 + 3  # the words, <s>, </s> and <unk>
    m = str(shared("ldc93s1", "manifest.jsonl"))
    res = json.loads(cli("eval", "--checkpoint", str(ldc_checkpoint), "--manifest", m, "--json", "--decoder",
                         "beam", "--lm", str(tmp_path / "x.arpa")).stdout)
    assert res["decoder"] == "beam" and res["utterances"] == 3
    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    row = json.loads(cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--json", "--decoder", "lexicon",
                         "--lexicon", str(lm / "lexicon.txt"), wav).stdout)
    assert row["text"] == LDC
    bad = cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--decoder", "lexicon", wav, check=False)
    assert bad.returncode == 2 and "needs --lexicon" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    bad = cli("transcribe", "--checkpoint", str(ldc_checkpoint), "--decoder", "beam", "--lm",
              str(tmp_path / "missing.arpa"), wav, check=False)
    assert bad.returncode == 2 and "language model not found" in bad.stderr
    # a word list without a search that reads it is refused, not silently unused (greedy is the default decoder)
    for flags, said in [(["--lm", str(tmp_path / "x.arpa")], "--lm go with"),
                        (["--decoder", "greedy", "--lexicon", str(lm / "lexicon.txt"), "--hotwords", "she"],
                         "--lexicon and --hotwords go with")]:
        bad = cli("transcribe", "--checkpoint", str(ldc_checkpoint), *flags, wav, check=False)
        assert bad.returncode == 2 and said in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_tune_lm_finds_a_better_pair_than_the_default_on_cached_output(ldc_checkpoint, lm):
    from speechscale.decoding.tune import tune, wer_of

    cache = []
    # three renditions buried in enough noise that the default weight (0.5) is too timid: any alpha >= 1 beat
    # it on a 7x7 grid (WER 0.73-0.79 against 0.82, 2026-11-24). At less noise the default sat on a plateau
    # that only one corner of the grid beat, and whether 25 TPE trials found it changed with optuna's release.
    for seed, noise in enumerate([1.4, 1.6, 1.8]):
        comps, lp, lens = _log_probs(ldc_checkpoint, noise, seed)
        cache.append((lp[0], int(lens[0]), LDC))
    best = tune(cache, comps.tokenizer, str(lm / "lm.arpa"), trials=25, beam_width=16)
    assert best["wer"] < best["default_wer"], best
    again = build_decoder(DecoderConfig("beam", beam_width=16, lm=str(lm / "lm.arpa"), alpha=best["alpha"],
                                        beta=best["beta"]), comps.tokenizer)
    assert wer_of(cache, again) == best["wer"]  # the reported pair reproduces the reported WER
    assert best["utterances"] == 3 and 0 <= best["alpha"] <= 3 and -2 <= best["beta"] <= 5


@pytest.mark.slow  # the CLI end to end, in this process (make test runs it; make test-fast does not)
def test_cli_tune_lm_writes_the_pair_that_eval_picks_up_and_eval_details(ldc_checkpoint, tmp_path, cli):
    text = tmp_path / "t.txt"
    text.write_text(LDC + "\nshe had a dark year\n")
    arpa = tmp_path / "lm.arpa"
    cli("lm", "build", str(text), "--out", str(arpa))
    m = str(shared("ldc93s1", "manifest.jsonl"))
    best = json.loads(cli("tune-lm", "--checkpoint", str(ldc_checkpoint), "--manifest", m, "--lm", str(arpa),
                          "--trials", "4").stdout)
    assert json.loads((tmp_path / "lm.arpa.tuned.json").read_text())["alpha"] == best["alpha"]
    for bad, said in [(["--lm", str(tmp_path / "none.arpa")], "language model not found"),
                      (["--lm", str(text)], "not a KenLM model"),
                      (["--lm", str(arpa), "--lexicon", str(tmp_path / "none.txt")], "none.txt")]:
        # the LM and lexicon are checked before the manifest is read (this one does not exist)
        proc = cli("tune-lm", "--checkpoint", str(ldc_checkpoint), "--manifest", str(tmp_path / "none.jsonl"), *bad,
                   check=False)
        assert proc.returncode == 2 and said in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    for bad, said in [(["--alpha", "nan"], "alpha must be a finite number"), (["--beta", "inf"], "beta must be")]:
        proc = cli("eval", "--checkpoint", str(ldc_checkpoint), "--manifest", str(tmp_path / "none.jsonl"),
                   "--decoder", "beam", "--lm", str(arpa), *bad, check=False)
        assert proc.returncode == 2 and said in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    res = json.loads(cli("eval", "--checkpoint", str(ldc_checkpoint), "--manifest", m, "--json", "--decoder",
                         "beam", "--lm", str(arpa), "--details", str(tmp_path / "d.jsonl")).stdout)
    assert (res["alpha"], res["beta"]) == (best["alpha"], best["beta"])
    (tmp_path / "lm.arpa.tuned.json").write_text('{"alpha": "high", "beta": 1}')
    proc = cli("eval", "--checkpoint", str(ldc_checkpoint), "--manifest", m, "--decoder", "beam", "--lm", str(arpa),
               check=False)
    assert proc.returncode == 2 and "not the alpha and beta tune-lm writes" in proc.stderr, proc.stderr
    rows = [json.loads(x) for x in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(r["reference"] and len(r["alignment"]) == 3 for r in rows)
    ref, hyp = rows[0]["reference"], rows[0]["hypothesis"]
    assert rows[0]["audio"].endswith(".wav") and rows[0]["wer"] == pytest.approx(_wer(ref, hyp), abs=1e-4)


def test_hotwords_are_favoured_and_join_the_vocabulary(ldc_checkpoint, lm):
    comps, lp, lens = _log_probs(ldc_checkpoint, 1.2)
    plain = build_decoder(DecoderConfig("lexicon", lexicon=str(lm / "lexicon.txt")), comps.tokenizer)(lp, lens)[0]
    # hotwords: the reference words plain decoding of the noisy features misses (which ones depends on the
    # trained fixture, so on the CPU's arithmetic); favoured one at a time, some must appear
    missing = [w for w in dict.fromkeys(LDC.split()) if w not in plain.split()]
    assert missing, plain
    hot = {w: build_decoder(DecoderConfig("lexicon", lexicon=str(lm / "lexicon.txt"), hotwords=[w, "zebra"],
                                          hotword_weight=8.0), comps.tokenizer)(lp, lens)[0] for w in missing}
    favoured = [w for w, text in hot.items() if text.split().count(w) > plain.split().count(w)]
    assert favoured, (plain, hot)
    decoder = build_decoder(DecoderConfig("lexicon", lexicon=str(lm / "lexicon.txt"), hotwords=["zebra"]),
                            comps.tokenizer)
    assert "zebra" in decoder.vocabulary  # a hotword outside the lexicon joins the vocabulary
    with pytest.raises(Exception, match="need a word list"):
        build_decoder(DecoderConfig("beam", hotwords=["greasy"]), comps.tokenizer)


def test_an_lm_of_one_sentence_prefers_that_sentence(tmp_path):
    """Kneser-Ney's discount is n1 / (n1 + 2 n2) = 1 when no bigram occurs twice: every seen bigram got
    probability 0 (-99), and the beam + LM decoder misread the very sentence the LM was built from (found when
    the decoding bench's test required every decoder to read its overfit utterance exactly, issue #43 §5)."""
    import kenlm

    (tmp_path / "one.txt").write_text("she had your dark suit in greasy wash water all year\n")
    build_arpa(tmp_path / "one.txt", 2, tmp_path / "lm.arpa")
    bigrams = tmp_path.joinpath("lm.arpa").read_text().split("\\2-grams:")[1].splitlines()
    assert not [b for b in bigrams if b.startswith("-99") and "<s>" not in b and "<unk>" not in b]
    lm = kenlm.Model(str(tmp_path / "lm.arpa"))
    seen = lm.score("she had your dark suit in greasy wash water all year")
    assert seen > lm.score("year all water wash greasy in suit dark your had she") + 5  # log10: 100 000 x likelier


@pytest.mark.slow  # a training step and the CLI (make test runs it; make test-fast does not)
def test_a_model_of_another_alphabet_trains_on_its_letters_and_its_lm_keeps_them(tmp_path, cli):
    """A manifest in German: with the English alphabet every utterance is refused (ü, ß are not spelled); with a
    German one none is, and `lm build --checkpoint` writes the LM in the model's letters."""
    from speechscale.training.trainer import Trainer
    from tests.training.tiny import ldc_config

    wav = shared("ldc93s1", "LDC93S1.wav")
    manifest = tmp_path / "de.jsonl"
    manifest.write_text("".join(json.dumps({"audio_filepath": str(wav), "duration": 2.92, "text": t}) + "\n"
                                for t in ["Über die Straße", "Größe und Café"]), encoding="utf-8")
    data = [f"data.train_manifest={manifest}", f"data.val_manifest={manifest}", "trainer.max_steps=1"]
    with pytest.raises(Exception, match="no usable utterances"):
        Trainer(ldc_config(tmp_path / "en", *data))
    trainer = Trainer(ldc_config(tmp_path / "de", *data, 'text.alphabet="abcdefghijklmnopqrstuvwxyzäöüß\' "'))
    summary = trainer.fit()
    assert summary["train_skipped"] == 0 and summary["bad_text"] == 0 and summary["train_utterances"] == 2
    text = tmp_path / "de.txt"
    text.write_text("Über die Straße zum Café\ndie Größe der Straße\n", encoding="utf-8")
    cli("lm", "build", str(text), "--order", "2", "--checkpoint", str(tmp_path / "de" / "checkpoints" / "last.pt"),
        "--out", str(tmp_path / "de.arpa"))
    assert sorted(KenLMScorer(tmp_path / "de.arpa").vocabulary()) == ["cafe", "der", "die", "größe", "straße", "zum",
                                                                      "über"]
