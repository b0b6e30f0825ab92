"""The trainer's optimizers: torch's AdamW and SGD, step for step, without importing the compiler."""
import copy

import pytest
import torch

from speechscale.config import OptimConfig
from speechscale.training.optim import build_optimizer

TORCH = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3))


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int = 4) -> None:
    torch.manual_seed(1)
    for _ in range(steps):
        loss = model(torch.randn(4, 6)).pow(2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()


def _torchs(ours: torch.optim.Optimizer, ours_model: torch.nn.Module, model: torch.nn.Module, name: str):
    """torch's own optimizer over `model`, with the groups and options `ours` has over `ours_model`."""
    index = {id(p): i for i, p in enumerate(ours_model.parameters())}
    params = list(model.parameters())
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [params[index[id(p)]] for p in g["params"]]}
              for g in ours.param_groups]
    return TORCH[name](groups, fused=groups[0]["fused"])


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("name", ["adamw", "sgd"])
def test_steps_and_state_are_torchs_own(name, fused):
    ours_model, theirs_model = _model(), _model()
    ours = build_optimizer(ours_model, OptimConfig(name=name, weight_decay=0.1), fused=fused)
    theirs = _torchs(ours, ours_model, theirs_model, name)
    assert isinstance(ours, TORCH[name]) and type(ours) is not TORCH[name]
    assert [g["weight_decay"] for g in ours.param_groups] == [0.1, 0.0]
    _train(ours_model, ours)
    _train(theirs_model, theirs)
    for a, b in zip(ours_model.parameters(), theirs_model.parameters()):
        assert torch.equal(a, b)
    # a checkpoint's optimizer state loads into torch's class and back, and training goes on identically
    # (copies: a state_dict holds the optimizer's own tensors, and loading one does not copy them)
    theirs.load_state_dict(copy.deepcopy(ours.state_dict()))
    ours.load_state_dict(copy.deepcopy(theirs.state_dict()))
    _train(ours_model, ours, 2)
    _train(theirs_model, theirs, 2)
    for a, b in zip(ours_model.parameters(), theirs_model.parameters()):
        assert torch.equal(a, b)


def test_the_trainers_step_is_graphed_or_eager_as_decided_once():
    """build_train_step: eager runs the strategy's forward; a graphed step needs a CUDA device (a clear error
    before any batch), runs the bare model and makes its recurrent layers capturable."""
    from speechscale.data.dataset import Batch
    from speechscale.distributed.strategy import LocalStrategy
    from speechscale.models.registry import build_model
    from speechscale.training.precision import Precision
    from speechscale.training.step import EagerStep, build_train_step

    model = build_model("ds2-tiny", {}, 81, 29)
    opt, cpu = torch.optim.SGD(model.parameters(), lr=0.0), torch.device("cpu")
    placeholder = Batch(torch.zeros(1, 81, 50), torch.tensor([50]), torch.tensor([1]), torch.tensor([1]), [""], [], {})
    eager = build_train_step(model, opt, Precision("fp32", cpu), LocalStrategy(), 0.0, cpu, placeholder, graphed=False)
    assert type(eager) is EagerStep and eager.graphs is None and eager.forward is model  # LocalStrategy wraps nothing
    assert not any(getattr(m, "capturable", False) for m in model.modules())
    with pytest.raises(ValueError, match="CUDA device"):
        build_train_step(model, opt, Precision("fp32", cpu), LocalStrategy(), 0.0, cpu, placeholder, graphed=True)
