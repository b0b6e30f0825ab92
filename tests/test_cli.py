"""The command line: version, flags in any position, help on every option, overrides for bench train."""
import argparse
import json

import pytest

from speechscale import __version__
from speechscale.cli import GC_YOUNG_THRESHOLD, build_parser
from tests.conftest import main_cli, run_cli, shared


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_version():
    proc = run_cli("--version")
    assert proc.stdout.strip() == f"speechscale {__version__}"


def test_every_option_and_argument_has_help():
    missing = [f"{p.prog} {a.dest}" for p in _parsers(build_parser()) for a in p._actions
               if not a.help and not isinstance(a, argparse._SubParsersAction)]
    assert not missing, missing


@pytest.mark.parametrize("argv", [["-q", "train", "--print-config"], ["train", "-q", "--print-config"],
                                  ["train", "--print-config", "-v", "-v"], ["-v", "train", "--print-config", "-q"]])
def test_quiet_and_verbose_work_before_and_after_the_subcommand(argv):
    args = build_parser().parse_args(argv)
    assert args.command == "train" and args.print_config
    assert getattr(args, "quiet", False) == ("-q" in argv) and getattr(args, "verbose", 0) == argv.count("-v")


def test_print_config_prints_the_resolved_config_and_exits():
    proc = run_cli("train", "-q", "--config", "configs/yesno.yaml", "--print-config", "trainer.max_epochs=3",
                   "data.root=data/yesno")
    assert "  max_epochs: 3" in proc.stdout and "  name: ds2-tiny" in proc.stdout and proc.stderr == ""


def test_overrides_after_a_flag_are_overrides_and_an_unknown_flag_is_still_refused(capsys):
    """`train --config demo trainer.max_steps=1 -q optim.lr=0.5`: argparse leaves what follows a flag over."""
    code, out, err = main_cli(capsys, "train", "--config", "demo", "trainer.max_steps=7", "-q", "--print-config",
                              "optim.lr=0.5", "-v", "optim.warmup_steps=3")
    assert code == 0 and err == "", err
    assert "  max_steps: 7" in out and "  lr: 0.5" in out and "  warmup_steps: 3" in out and "  progress: false" in out
    code, _, err = main_cli(capsys, "train", "--config", "demo", "trainer.max_steps=7", "--steps", "3")
    assert code == 2 and "unrecognized arguments: --steps 3" in err and err.count("\n") == 1
    code, _, err = main_cli(capsys, "eval", "--checkpoint", "c.pt", "--manifest", "m.jsonl", "trainer.max_steps=7")
    assert code == 2 and "unrecognized arguments: trainer.max_steps=7" in err


def test_print_config_and_train_without_a_config_fail_in_one_line(capsys):
    code, _, err = main_cli(capsys, "train", "--print-config", "optim.name=adam")
    assert code == 2 and err.count("\n") == 1 and "optim.name='adam'" in err
    code, _, err = main_cli(capsys, "train")
    assert code == 2 and "--config is required" in err and err.count("\n") == 1


def test_bench_train_takes_model_overrides(capsys):
    common = ["bench", "train", "--model", "ds2-tiny", "--batch-size", "1", "--seconds", "0.5", "--steps", "1",
              "--warmup", "0", "--manifest", ""]
    plain = json.loads(main_cli(capsys, *common)[1])
    small = json.loads(main_cli(capsys, *common, "--model-overrides", "{rnn_layers: 1, rnn_hidden: 64}")[1])
    assert small["params"] < plain["params"] / 5
    code, _, err = main_cli(capsys, *common, "--model-overrides", "{rnn_layerz: 1}")
    assert code == 2 and err.count("\n") == 1 and "unknown key(s) rnn_layerz" in err
    for argv in (common, ["plan", "--model", "ds2-tiny"]):  # a value the constructor refuses: one line, not raised
        code, _, err = main_cli(capsys, *argv, "--model-overrides", "{rnn_hidden: 0}")
        assert code == 2 and err.count("\n") == 1 and "hidden_size must be greater than zero" in err, err


_TEARDOWN_PROBE = """
import sys
class Probe:
    def __del__(self):  # runs when the interpreter tears its modules down
        print("torn down", file=sys.stderr, flush=True)
probe = Probe()
from speechscale.cli import main
import atexit, gc
atexit.register(lambda: print("young threshold", gc.get_threshold()[0], file=sys.stderr, flush=True))
own = sys.argv.pop(1) == "own"
sys.exit(main(None if own else sys.argv[1:]))
"""


@pytest.mark.parametrize("how", ["own", "argv"])
def test_a_finished_command_ends_its_process_without_the_teardown_and_keeps_its_status(how):
    """The process's own command line: its output and its exit status, then no interpreter teardown (about
    1-2 s of CPU with torch loaded, in every command and torchrun rank), and the collector's young threshold
    raised (torch's import). A command that returned 2 (a bad
    config path here) keeps 2. `main(argv)` called by a program changes nothing about how it ends."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    args = ["train", "--config", "configs/nope.yaml", "--print-config"]
    proc = subprocess.run([sys.executable, "-c", _TEARDOWN_PROBE, how, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "speechscale train: error:" in proc.stderr and "nope.yaml" in proc.stderr
    assert ("torn down" in proc.stderr) == (how == "argv")
    young = int(proc.stderr.split("young threshold ")[1].split()[0])  # raised only in a process the command owns
    assert (young == GC_YOUNG_THRESHOLD) == (how == "own"), young
    printed = subprocess.run([sys.executable, "-c", _TEARDOWN_PROBE, how, "train", "-q", "--config",
                              "configs/yesno.yaml", "--print-config", "data.root=."], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
    # piped stdout is block-buffered: what the command printed was flushed before the process ended
    assert printed.returncode == 0 and "  max_epochs: " in printed.stdout and printed.stdout.endswith("\n")


def _subparsers(parser, path=()):
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*path, name), sub
                yield from _subparsers(sub, (*path, name))


def test_every_help_shows_defaults_and_shared_options_agree():
    """Each option with a default shows it in --help; an option several commands share has one default; every
    --out says whether it is a file or a folder."""
    import argparse

    from speechscale.cli import build_parser
    from speechscale.decoding.decoders import DecoderConfig

    seen: dict[str, set] = {}
    for path, sub in _subparsers(build_parser()):
        for action in sub._actions:
            if not action.option_strings or action.help is None or action.required:
                continue
            flag = action.option_strings[-1]
            if action.default not in (None, False, "", argparse.SUPPRESS) and action.default is not True:
                entry = " ".join(sub._get_formatter()._format_action(action).split())  # its entry in --help
                assert "default" in entry, (path, flag, entry)
            if flag in ("--beam-width", "--device", "--decoder", "--chunk-seconds", "--backend"):
                seen.setdefault(flag, set()).add(str(action.default))
            if flag == "--out":
                assert "file" in action.help or "folder" in action.help, (path, action.help)
    assert seen["--beam-width"] == {str(DecoderConfig().beam_width)} and seen["--device"] == {"auto"}
    assert all(len(v) == 1 for v in seen.values()), seen


def test_commands_that_need_no_model_start_without_torch():
    """--version, --help, `recipes` and their one-line errors import no torch (2 s a process): the parser asks for a
    torch-backed choice only when its flag is given, and an error is matched only against modules imported."""
    import subprocess
    import sys

    code = """
import contextlib, io, sys
from speechscale.cli import main
for argv in (["recipes"], ["recipes", "show", "nope"], ["--version"], ["bench", "train", "--help"]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code
    print(argv[-1], code, "torch" in sys.modules, err.getvalue().count("\\n"))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split("\n")[:4] == ["recipes 0 False 0", "nope 2 False 1", "--version 0 False 0",
                                          "--help 0 False 0"], out.stdout


_UNWRITABLE = [  # (argv before the output path, its flag, argv after): every command that writes a file or folder
    (["synth", "--minutes", "1"], "--out", []),
    (["data", "import", "fsdd", "src"], "--out", []),
    (["data", "shard", "m.jsonl"], "--out", []),
    (["data", "index", "shards"], "--out", []),
    (["data", "split", "m.jsonl"], "--out", []),
    (["lm", "build", "t.txt"], "--out", []),
    (["export", "--checkpoint", "c.pt", "--format", "onnx"], "--out", []),
    (["average", "c.pt", "c.pt"], "--out", []),
    (["plan"], "--out", []),
    (["report", "run"], "--out", []),
    (["transcribe", "--checkpoint", "c.pt", "--format", "srt", "a.wav"], "--out-dir", []),
    (["align", "--checkpoint", "c.pt", "--text", "hi", "--format", "srt", "a.wav"], "--out-dir", []),
    (["bench", "straggler"], "--out", []),
    (["bench", "soak"], "--out", []),
    (["bench", "align", "--checkpoint", "c.pt"], "--out", []),
    (["eval", "--checkpoint", "c.pt", "--manifest", "m.jsonl"], "--details", []),
]


@pytest.mark.parametrize("before,flag,after", _UNWRITABLE, ids=lambda v: "-".join(v) if isinstance(v, list) else v)
def test_an_output_that_cannot_be_written_is_one_line_before_any_work(capsys, tmp_path, before, flag, after):
    """An output path under a regular file (no folder can be made there) fails while the arguments are parsed,
    in one line naming the flag and the path; the inputs are never looked at (they do not exist) and nothing
    is created."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    target = blocker / "sub" / "out"
    code, out, err = main_cli(capsys, *before, flag, str(target), *after)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"argument {flag}: cannot write to {target}" in err and "Not a directory" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


# the outputs that may be URLs (the rest would become a local folder named "s3:")
_URL_OUTPUTS = {("average", "c.pt"), ("data", "shard"), ("data", "index")}


@pytest.mark.parametrize("before,flag,after", _UNWRITABLE, ids=lambda v: "-".join(v) if isinstance(v, list) else v)
def test_an_output_url_is_refused_in_one_line_where_a_command_writes_local_files(capsys, tmp_path, monkeypatch,
                                                                               before, flag, after):
    monkeypatch.chdir(tmp_path)
    code, out, err = main_cli(capsys, *before, flag, "s3://bucket/out", *after)
    if tuple(before[:2]) in _URL_OUTPUTS:
        assert "writes a local" not in err
    else:
        assert code == 2 and err.count("\n") == 1 and f"argument {flag}: s3://bucket/out: this command writes a " \
            f"local" in err, err
    assert list(tmp_path.iterdir()) == []  # no folder "s3:"


def test_outputs_are_checked_without_leaving_folders_and_a_file_is_not_a_folder(capsys, tmp_path):
    from speechscale.commands.args import out_file, out_file_or_url, out_folder

    deep = tmp_path / "x" / "y" / "z"
    assert out_folder(str(deep)) == deep and not (tmp_path / "x").exists()  # checked, then removed again
    assert out_file(str(deep / "m.onnx")) == deep / "m.onnx" and not (tmp_path / "x").exists()
    assert out_file_or_url("s3://bucket/model.pt") == "s3://bucket/model.pt"  # a URL: its first write tells
    (tmp_path / "f").write_text("x")
    code, _, err = main_cli(capsys, "synth", "--out", str(tmp_path / "f"))
    assert code == 2 and "is a file, not a folder" in err and err.count("\n") == 1
    code, _, err = main_cli(capsys, "export", "--checkpoint", "c.pt", "--format", "onnx", "--out", str(tmp_path))
    assert code == 2 and "is a folder; name the file to write" in err and err.count("\n") == 1
    run = tmp_path / "run"
    run.mkdir()
    (run / "report").write_text("x")  # the default report folder is taken by a file: one line before the plots
    code, _, err = main_cli(capsys, "report", str(run))
    assert code == 2 and "is a file, not a folder; give --out DIR" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("flag,value,said", [("--rate", "100", "expected a sample rate of 4000-384000 Hz"),
                                             ("--rate", "16k", "expected a sample rate"),
                                             ("--endpoint-frames", "0", "expected a whole number from 1 to 1000"),
                                             ("--endpoint-frames", "5000", "expected a whole number from 1 to 1000")])
def test_a_stream_rate_or_endpoint_out_of_bounds_is_one_line(capsys, flag, value, said):
    code, _, err = main_cli(capsys, "transcribe", "--stream", "--checkpoint", "c.pt", flag, value, "-")
    assert code == 2 and f"argument {flag}: {said}" in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv,said", [
    (["plan", "--mfu", "2"], "argument --mfu: must be a share in (0, 1], got 2"),
    (["plan", "--price-on-demand", "-1"], "argument --price-on-demand: must be 0 or more, got -1"),
    (["plan", "--price-preemptible", "-0.5"], "argument --price-preemptible: must be 0 or more"),
    (["plan", "--inter-latency-us", "-5"], "argument --inter-latency-us: must be 0 or more"),
    (["plan", "--restart-minutes", "-1"], "argument --restart-minutes: must be 0 or more"),
    (["export", "--checkpoint", "c.pt", "--format", "onnx", "--streaming", "--chunk", "0", "--out", "x.onnx"],
     "argument --chunk: must be positive, got 0"),
    (["serve", "--checkpoint", "c.pt", "--port", "70000"], "argument --port: expected a port number 0-65535"),
    (["bench", "train", "--warmup", "-1"], "argument --warmup: must be 0 or more, got -1"),
    (["data", "import", "fsdd", "src", "--out", "o", "--min-duration", "-1"], "argument --min-duration: must be 0"),
    (["synth", "--out", "o", "--test-minutes", "inf"], "argument --test-minutes: expected a finite number, got 'inf'"),
    (["plan", "--throughput", "nan"], "argument --throughput: expected a finite number, got 'nan'"),
    (["synth", "--out", "o", "--sample-rate", "100"], "argument --sample-rate: expected a sample rate of 4000-384000"),
    (["data", "download", "yesno", "--out", "o", "--mirror", "mirror.example/corpora"],
     "--mirror 'mirror.example/corpora': expected an http(s)://HOST/... or file:///... URL"),
    (["data", "download", "yesno", "--out", "o", "--mirror", "https:///corpora"], "expected an http(s)://HOST"),
])
def test_a_number_outside_its_meaning_is_one_line(capsys, argv, said):
    """A negative price or latency, an MFU over the peak, a chunk of no frames, a port past 65535: refused while
    parsing (they were taken: a negative price printed a negative cost, the port a traceback after the model
    loaded)."""
    code, out, err = main_cli(capsys, *argv)
    assert code == 2 and out == "" and said in err and err.count("\n") == 1, err


def test_no_output_overwrites_a_training_checkpoint(capsys, tmp_path, ldc_checkpoint):
    """`average --out last.pt last.pt` replaced a run's checkpoint with its weights alone (no optimizer or step):
    the run could not resume. Every --out refuses a file a run resumes from; a weights-only file may be replaced."""
    import shutil

    run_ckpt = tmp_path / "last.pt"
    shutil.copy(ldc_checkpoint, run_ckpt)
    before = run_ckpt.read_bytes()
    for argv in (["average", str(run_ckpt)], ["export", "--checkpoint", str(run_ckpt), "--format", "onnx"],
                 ["lm", "build", str(tmp_path / "t.txt")]):
        code, _, err = main_cli(capsys, *argv, "--out", str(run_ckpt))
        assert code == 2 and "is a training checkpoint (a run resumes from it)" in err and err.count("\n") == 1, err
    assert run_ckpt.read_bytes() == before
    code, out, err = main_cli(capsys, "average", str(run_ckpt), "--out", str(tmp_path / "avg.pt"))
    assert code == 0 and '"averaged_from"' in out, err
    avg = (tmp_path / "avg.pt").read_bytes()
    (tmp_path / "t.txt").write_text("a line of text\n")
    for argv in (["average", str(tmp_path / "avg.pt"), "--out", str(tmp_path / "avg.pt")],  # an input as the output
                 ["export", "--checkpoint", str(tmp_path / "avg.pt"), "--format", "onnx", "--out", str(tmp_path / "avg.pt")],
                 ["lm", "build", str(tmp_path / "t.txt"), "--out", str(tmp_path / "t.txt")],
                 ["eval", "--checkpoint", str(run_ckpt), "--manifest", str(tmp_path / "t.txt"), "--details",
                  str(tmp_path / "t.txt")]):
        code, _, err = main_cli(capsys, *argv)
        assert code == 2 and "is also an input" in err and err.count("\n") == 1, (argv, err)
    assert (tmp_path / "avg.pt").read_bytes() == avg and (tmp_path / "t.txt").read_text() == "a line of text\n"
    code, _, err = main_cli(capsys, "export", "--checkpoint", str(run_ckpt), "--format", "onnx", "--chunk", "8",
                            "--out", str(tmp_path / "m.onnx"))
    assert code == 2 and "--chunk goes with --streaming" in err and not (tmp_path / "m.onnx").exists()


def test_every_error_the_cli_reports_in_one_line_names_a_real_exception_class():
    """The one-line error tables name classes by module and name (a module not imported cannot have raised one):
    a renamed class would silently fall back to a traceback."""
    import importlib

    from speechscale import cli

    for module, name in cli._BAD_INPUT + cli._STOPPED:
        cls = getattr(importlib.import_module(module), name)
        assert isinstance(cls, type) and issubclass(cls, Exception), (module, name)


def test_documents_nested_too_deeply_to_parse_are_one_line_not_a_recursion_error(tmp_path, capsys):
    """json.loads and PyYAML raise RecursionError on deep nesting ("[[[[..."): every file or argument a user
    hands over says so in one line, and a manifest line like it is skipped and counted."""
    from speechscale.data.manifest import read_manifest

    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "deep.yaml").write_text(f"data: {deep}\n")
    (tmp_path / "deep.json").write_text(f'{{"results": {deep}}}')
    wav = shared("ldc93s1", "LDC93S1.wav")
    (tmp_path / "m.jsonl").write_text(deep + "\n" + json.dumps({"audio_filepath": str(wav), "duration": 2.9,
                                                                "text": "she had"}) + "\n")
    for argv, said in [(["train", "--config", str(tmp_path / "deep.yaml")], "deep.yaml: nested too deeply to read"),
                       (["train", "--config", "demo", f"trainer.seed={deep[:5000]}"],
                        "override trainer.seed=...: nested too deeply to read"),
                       (["plan", "--model-overrides", deep[:5000]], "--model-overrides: nested too deeply to read"),
                       (["plan", "--throughput-json", str(tmp_path / "deep.json")], "JSON nested too deeply to read")]:
        code, _, err = main_cli(capsys, *argv)
        assert code == 2 and said in err and len(err.strip().splitlines()) == 1, (argv[:2], err[-500:])
    utts, report = read_manifest(tmp_path / "m.jsonl")
    assert len(utts) == 1 and report.reasons == {"malformed JSON": 1}


def test_a_reader_that_leaves_the_pipe_ends_the_command_quietly(ldc_checkpoint):
    """`speechscale transcribe ... | head -c 0`: the reader has gone before the first line; the writer stops without a
    traceback (status 141, as a shell reports a writer its pipe ended)."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    wav = str(shared("ldc93s1", "LDC93S1.wav"))
    command = (f"set -o pipefail; {sys.executable} -m speechscale.cli transcribe --checkpoint {ldc_checkpoint} --json "
               f"{wav} {wav} | head -c 0")
    proc = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 141 and proc.stdout == ""
