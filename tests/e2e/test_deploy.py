"""The launch recipes parse, carry the elastic/fault-tolerance settings, and launch a valid speechscale run."""
import re
import shlex

import yaml

from speechscale.cli import build_parser
from speechscale.recipe import load_recipe
from tests.conftest import ROOT


def _check_speechscale_args(args):
    """Everything after `-m speechscale.cli` must be a command line our CLI and config accept."""
    ns = build_parser().parse_args(args)
    assert ns.command == "train"
    cfg = load_recipe(ROOT / ns.config, ns.overrides)  # one clear error here would fail the test
    assert cfg.trainer.resume == "auto" and cfg.trainer.checkpoint_every_steps > 0
    return cfg


def test_kubernetes_pytorchjob_is_elastic_and_launches_speechscale():
    job = yaml.safe_load((ROOT / "deploy/kubernetes/pytorchjob.yaml").read_text())
    assert job["kind"] == "PyTorchJob" and job["apiVersion"].startswith("kubeflow.org/")
    elastic = job["spec"]["elasticPolicy"]
    assert elastic["rdzvBackend"] == "c10d" and 1 <= elastic["minReplicas"] < elastic["maxReplicas"]
    assert elastic["maxRestarts"] > 0
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    container = pod["containers"][0]
    assert {"name": "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "value": "1"} in container["env"]
    cmd = container["command"]
    assert cmd[0] == "torchrun" and "--rdzv-backend=c10d" in cmd
    assert any(a.startswith("--nnodes=") and ":" in a for a in cmd)  # MIN:MAX nodes
    cfg = _check_speechscale_args(cmd[cmd.index("speechscale.cli") + 1:])
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert cfg.trainer.out_dir.startswith(tuple(mounts))  # checkpoints land on the shared volume
    assert pod["terminationGracePeriodSeconds"] >= 60


def test_slurm_script_requeues_on_usr1_and_launches_speechscale():
    text = (ROOT / "deploy/slurm/train.sbatch").read_text()
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(\S+))?", text, flags=re.M))
    assert "requeue" in directives and re.fullmatch(r"(B:)?USR1@\d+", directives["signal"])
    assert "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in text
    assert "trap on_usr1 USR1" in text and "scontrol requeue" in text
    launch = text[text.index("srun "):text.index("&\n")].replace("\\\n", " ")
    argv = shlex.split(launch)
    assert "torchrun" in argv and "--rdzv-backend=c10d" in argv
    _check_speechscale_args(argv[argv.index("speechscale.cli") + 1:])
