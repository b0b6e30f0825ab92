"""The launch recipes: the Kubernetes manifest validates against the Kubeflow training operator's PyTorchJob
and Kubernetes' own models (the kubeflow-training package), both recipes launch a valid speechscale run, and
their torchrun flags are those the multi-node tests run (tests/distributed/test_nodes.py). The SLURM script
itself runs under a real SLURM in `make deploy-check` (deploy/slurm/check.sh)."""
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from speechscale.cli import build_parser
from speechscale.recipe import load_recipe
from tests.conftest import ROOT
from tests.distributed.launch import node_agent


def _models(name: str):
    """The models module `name` (kubeflow-training, a dev dependency): a skip outside CI, a failure under CI=true."""
    if os.environ.get("CI") == "true":
        import importlib

        return importlib.import_module(name)
    return pytest.importorskip(name, reason="pip install -e '.[dev]' (kubeflow-training)")


k8s = _models("kubernetes.client.models")
kubeflow = _models("kubeflow.training.models")

KINDS = {("kubeflow.org/v1", "PyTorchJob"): "KubeflowOrgV1PyTorchJob", ("v1", "Service"): "V1Service",
         ("apps/v1", "Deployment"): "V1Deployment"}


def _model(name):
    return getattr(kubeflow, name, None) or getattr(k8s, name)


def validate(value, type_name, where="$"):
    """Check `value` (parsed YAML) against an OpenAPI-generated model type, strictly: every key must be a
    field of its model (a typo is an error, not silently pruned as the API server would), every value of its
    type; building the model runs its own required-field checks. Returns the model instance."""
    if m := re.fullmatch(r"list\[(.+)\]", type_name):
        assert isinstance(value, list), f"{where}: expected a list"
        return [validate(v, m[1], f"{where}[{i}]") for i, v in enumerate(value)]
    if m := re.fullmatch(r"dict\(str, (.+)\)", type_name):
        assert isinstance(value, dict), f"{where}: expected a mapping"
        # Kubernetes quantities (resources) are strings; YAML numbers are accepted for them
        return {k: validate(str(v) if m[1] == "str" and isinstance(v, (int, float)) else v, m[1], f"{where}.{k}")
                for k, v in value.items()}
    scalars = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": (str, int, dict, list)}
    if type_name in scalars:
        assert isinstance(value, scalars[type_name]) and not (type_name == "int" and isinstance(value, bool)), \
            f"{where}: expected {type_name}, got {value!r}"
        return value
    cls = _model(type_name)
    assert isinstance(value, dict), f"{where}: expected a {type_name} mapping"
    by_json = {json: attr for attr, json in cls.attribute_map.items()}
    unknown = set(value) - set(by_json)
    assert not unknown, f"{where}: {sorted(unknown)} not fields of {type_name}"
    return cls(**{by_json[k]: validate(v, cls.openapi_types[by_json[k]], f"{where}.{k}") for k, v in value.items()})


def _documents(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return {d["kind"]: validate(d, KINDS[(d["apiVersion"], d["kind"])], d["kind"]) for d in docs}


def _flags(argv):
    """torchrun's flags (name -> value) before the module it runs."""
    head = argv[:argv.index("-m")]
    return dict(a.split("=", 1) for a in head if a.startswith("--"))


def _check_speechscale_args(args):
    """Everything after `-m speechscale.cli` must be a command line our CLI and config accept."""
    ns = build_parser().parse_args(args)
    assert ns.command == "train"
    cfg = load_recipe(ROOT / ns.config, ns.overrides)  # one clear error here would fail the test
    assert cfg.trainer.resume == "auto" and cfg.trainer.checkpoint_every_steps > 0
    return cfg


TESTED = _flags(node_agent(2, [], "127.0.0.1:1", "id", warm=False)[3:])  # after `python -m torch.distributed.run`


def test_the_validator_rejects_what_the_api_server_would_not_understand():
    job = yaml.safe_load_all((ROOT / "deploy/kubernetes/pytorchjob.yaml").read_text())
    job = [d for d in job if d["kind"] == "PyTorchJob"][0]
    job["spec"]["elasticPolicy"]["minReplica"] = 1  # a typo of minReplicas
    with pytest.raises(AssertionError, match="minReplica"):
        validate(job, "KubeflowOrgV1PyTorchJob")
    job["spec"]["elasticPolicy"] = {"maxReplicas": "four"}
    with pytest.raises(AssertionError, match="expected int"):
        validate(job, "KubeflowOrgV1PyTorchJob")


def test_kubernetes_manifests_are_valid_and_the_rendezvous_runs_outside_the_training_pods():
    objs = _documents(ROOT / "deploy/kubernetes/pytorchjob.yaml")
    job, service, store = objs["PyTorchJob"], objs["Service"], objs["Deployment"]
    elastic = job.spec.elastic_policy
    assert elastic.rdzv_backend == "c10d" and 1 <= elastic.min_replicas < elastic.max_replicas
    assert elastic.max_restarts > 0
    pod = job.spec.pytorch_replica_specs["Worker"].template.spec
    container = pod.containers[0]
    assert any(e.name == "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" and e.value == "1" for e in container.env)
    cmd = container.command
    assert cmd[0] == "torchrun"
    flags = _flags(cmd)
    assert set(flags) == set(TESTED)  # the flags tests/distributed/test_nodes.py runs
    assert "is_host=false" in flags["--rdzv-conf"].split(",") and flags["--rdzv-backend"] == "c10d"
    assert ":" in flags["--nnodes"]  # MIN:MAX nodes
    # the endpoint is the rendezvous Service, whose pods run `speechscale rendezvous` on its port
    host, port = flags["--rdzv-endpoint"].split(":")
    assert host == service.metadata.name == elastic.rdzv_host and int(port) == elastic.rdzv_port
    assert service.spec.selector == store.spec.template.metadata.labels
    (store_container,) = store.spec.template.spec.containers
    argv = store_container.command
    assert argv[:2] == ["speechscale", "rendezvous"] and argv[argv.index("--port") + 1] == port
    assert service.spec.ports[0].target_port == int(port)
    ns = build_parser().parse_args(argv[1:])
    assert ns.port == int(port)
    cfg = _check_speechscale_args(cmd[cmd.index("speechscale.cli") + 1:])
    mounts = {m.mount_path for m in container.volume_mounts}
    assert cfg.trainer.out_dir.startswith(tuple(mounts))  # checkpoints land on the shared volume
    assert pod.termination_grace_period_seconds >= 60


def test_slurm_script_requeues_after_a_preemption_and_launches_speechscale():
    text = (ROOT / "deploy/slurm/train.sbatch").read_text()
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)(?:=(\S+))?", text, flags=re.M))
    assert "requeue" in directives and re.fullmatch(r"(B:)?USR1@\d+", directives["signal"])
    assert "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in text
    assert "trap on_usr1 USR1" in text and "scontrol requeue" in text
    assert 'speechscale rendezvous --port "$RDZV_PORT" &' in text  # the store is not in a training agent
    launch = text[text.index("srun "):text.index("&\n", text.index("srun "))].replace("\\\n", " ")
    argv = shlex.split(launch)
    assert "torchrun" in argv
    flags = _flags(argv[argv.index("torchrun"):])
    assert set(flags) == set(TESTED)
    assert flags["--rdzv-conf"] == "is_host=false" and flags["--rdzv-backend"] == "c10d"
    defaults = dict(re.findall(r"^(\w+)=\$\{\w+:-(.*)\}$", text, flags=re.M))
    train = argv[argv.index("speechscale.cli") + 1:]
    expanded = [a.replace("$CONFIG", defaults["CONFIG"]).replace("$OUT_DIR", defaults["OUT_DIR"]) for a in train]
    args = [a for a in expanded if a != "${overrides[@]}"] + defaults["OVERRIDES"].split()
    _check_speechscale_args(args)


@pytest.mark.slow
def test_make_deploy_check_preempts_and_requeues_the_sbatch_under_a_real_slurm():
    """README: `make deploy-check`. A one-node SLURM on this machine; needs root and apt, so it runs only where asked
    (SPEECHSCALE_DEPLOY_CHECK=1, which .ci/run sets); under CI=true a missing ask or root is a failure."""
    ci = os.environ.get("CI") == "true"
    if os.environ.get("SPEECHSCALE_DEPLOY_CHECK") != "1":
        assert not ci, "CI must run make deploy-check: .ci/run sets SPEECHSCALE_DEPLOY_CHECK=1"
        pytest.skip("make deploy-check installs slurm-wlm and starts SLURM daemons: set SPEECHSCALE_DEPLOY_CHECK=1")
    if os.geteuid() != 0:
        assert not ci, "make deploy-check needs root"
        pytest.skip("make deploy-check needs root: it configures and starts slurmctld, slurmd and munged")
    venv = Path(sys.prefix)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    proc = subprocess.run(["make", "deploy-check", f"VENV={venv}", "-o", f"{venv}/.installed", "EPOCHS=3"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900, env={**env, "EPOCHS": "3"})
    if "could not install slurm-wlm" in proc.stderr and os.environ.get("CI") != "true":
        pytest.skip(proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["deploy_check"] == "passed" and result["requeues"] >= 1 and result["final_epoch"] == 3
    assert result["preempted_at_step"] is not None and result["last_stop"]["stopped_by"] is None
    print(json.dumps(result))
