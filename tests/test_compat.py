"""The private torch and Starlette behaviour speechscale relies on, pinned in one place (speechscale/_compat.py):
after an upgrade, a change to any of it fails here, with its name, instead of somewhere in training or serving."""
import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.func import functional_call

from speechscale import _compat
from speechscale.bench.ports import free_port
from tests.conftest import ROOT

SRC = ROOT / "src" / "speechscale"


def test_no_module_but_compat_reaches_into_torch_or_starlette_privates():
    private = re.compile(r"torch\._(?!_)|\._body\b|_flat_weights|_step_supports_amp_scaling|_disable_dynamo|_use_grad\b"
                         r"|uvicorn\.protocols")
    found = [f"{p.relative_to(SRC)}:{n}: {line.strip()}" for p in sorted(SRC.rglob("*.py")) if p.name != "_compat.py"
             for n, line in enumerate(p.read_text().splitlines(), 1) if private.search(line)]
    assert not found, "private access outside speechscale/_compat.py:\n" + "\n".join(found)


@pytest.mark.parametrize("base", [torch.optim.AdamW, torch.optim.SGD])
def test_torch_still_guards_each_optimizer_method_the_way_compat_unwraps(base):
    from speechscale.training.optim import _GUARDED

    missing = [name for name in _GUARDED if _compat.unguarded(base, name) is None]
    assert not missing, (f"torch {torch.__version__} no longer wraps {base.__name__}.{missing} in the compiler guards "
                         "_compat.unguarded knows: check that torch's optimizers still import torch._dynamo on first "
                         "use, and update _compat (or drop training/optim.py's subclasses)")


def test_an_optimizer_beneath_the_guards_steps_without_importing_the_compiler():
    """What the unwrapping buys: torch's own methods import torch._dynamo first (benchmarks/optimizer_import.py
    measures it); ours update the leaf weights in place, gradients off as torch's step has them, and never import it."""
    code = """
import sys, torch
from speechscale.config import OptimConfig
from speechscale.training.optim import build_optimizer
m = torch.nn.Linear(3, 2)
for name in ("adamw", "sgd"):
    opt = build_optimizer(m, OptimConfig(name=name))
    before = m.weight.detach().clone()
    m(torch.randn(2, 3)).sum().backward()
    opt.step()
    opt.zero_grad()
    opt.load_state_dict(opt.state_dict())
    assert not torch.equal(before, m.weight) and m.weight.grad is None and torch.is_grad_enabled()
print("torch._dynamo" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False", "speechscale's optimizers import the compiler again"


@pytest.mark.parametrize("name", ["adamw", "sgd"])
def test_a_fused_optimizer_still_skips_its_step_on_found_inf(name):
    """GradScaler's protocol, as precision.step_if uses it: found_inf = 1 leaves the weights, 0 steps."""
    cls = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[name]
    m = nn.Linear(4, 3)
    opt = cls(m.parameters(), lr=0.1, fused=True)
    assert _compat.steps_on_found_inf(opt), f"torch's fused {name} no longer declares GradScaler's protocol"
    for inf, moves in ((1.0, False), (0.0, True)):
        m(torch.randn(2, 4)).sum().backward()
        before = m.weight.detach().clone()
        opt.found_inf, opt.grad_scale = torch.tensor(inf), None
        opt.step()
        del opt.found_inf, opt.grad_scale
        opt.zero_grad()
        assert (not torch.equal(before, m.weight)) == moves, f"found_inf={inf}: the step ignored the flag"


def test_deterministic_mode_is_on_and_warn_only_and_the_inductor_is_loaded_only_when_compiling():
    """torch._C's switch sets what the public one does, less the inductor (1-1.5 s); one fresh process."""
    code = """
import sys, torch
from speechscale._compat import deterministic_algorithms
deterministic_algorithms(compiling=False)
print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
      "torch._inductor.config" in sys.modules)
torch.use_deterministic_algorithms(False)
deterministic_algorithms(compiling=True)
import torch._inductor.config as c
print(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
      c.deterministic)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["True", "True", "False", "True", "True", "True"]


@pytest.mark.parametrize("cls", [nn.GRU, nn.LSTM])
def test_an_rnns_flat_weight_names_are_its_parameters_in_kernel_order(cls):
    """models/rnn.py casts the weights by these names and runs the fused kernel with them: they must name every
    parameter, in the order the kernel takes (the same output as the module's own call)."""
    rnn = cls(5, 4, num_layers=2, bidirectional=True, batch_first=True)
    names = _compat.rnn_weight_names(rnn)
    assert names == [n for n, _ in rnn.named_parameters()]
    x = torch.randn(2, 7, 5)
    weights = {n: getattr(rnn, n).detach().clone() for n in names}
    torch.testing.assert_close(functional_call(rnn, weights, (x,))[0], rnn(x)[0])


def test_one_fused_lerp_moves_every_tensor_as_lerp_does():
    a, b = [torch.randn(3), torch.randn(2, 2)], [torch.randn(3), torch.randn(2, 2)]
    want = [torch.lerp(x, y, 0.25) for x, y in zip(a, b)]
    _compat.lerp_all_(a, b, 0.25)
    for got, w in zip(a, want):
        torch.testing.assert_close(got, w)


def test_starlette_parses_a_form_from_a_body_the_server_read_itself():
    """service/server.py reads (and limits) the body, then hands it to `request.form()`: the stream is spent."""
    from starlette.requests import Request

    body = (b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
            b"Content-Type: audio/wav\r\n\r\nRIFFdata\r\n--XyZ--\r\n")

    async def spent() -> dict:
        raise AssertionError("Starlette read the request stream again instead of the body it was given")

    async def parse() -> bytes:
        scope = {"type": "http", "method": "POST", "path": "/", "query_string": b"",
                 "headers": [(b"content-type", b"multipart/form-data; boundary=XyZ")]}
        request = Request(scope, spent)
        _compat.set_request_body(request, body)
        form = await request.form()
        data = await form["file"].read()
        await form.close()
        return data

    assert asyncio.run(parse()) == b"RIFFdata"


def test_ddps_constructor_still_imports_what_the_rank_launcher_preloads():
    """bench/ranks.py imports `_compat.DDP_CONSTRUCTOR_IMPORTS` once so that forked ranks need not: DDP's
    constructor (world of 1, gloo) imports each of them, and nothing before it does."""
    code = f"""
import os, sys, torch, torch.distributed as dist
names = {_compat.DDP_CONSTRUCTOR_IMPORTS!r}
before = [n in sys.modules for n in names]
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 2))
print(before, [n in sys.modules for n in names])
dist.destroy_process_group()
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    n = len(_compat.DDP_CONSTRUCTOR_IMPORTS)
    assert out.stdout.strip() == f"{[False] * n} {[True] * n}", (
        "DDP's constructor no longer imports _compat.DDP_CONSTRUCTOR_IMPORTS: bench/ranks.py preloads them for nothing")


def test_a_loader_still_keeps_its_persistent_iterator_where_compat_drops_it():
    """_compat.drop_loader_workers clears `DataLoader._iterator` and shuts its workers down; loader_worker_died reads
    the message torch raises for a worker that exited (tests/data/test_workers.py kills one for real)."""
    from torch.utils.data import dataloader

    from speechscale._compat import drop_loader_workers, loader_worker_died

    loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2)
    assert loader._iterator is None and hasattr(dataloader._MultiProcessingDataLoaderIter, "_shutdown_workers")
    drop_loader_workers(loader)
    assert loader._iterator is None and [b.tolist() for b in loader] == [[0, 1], [2, 3]]
    assert loader_worker_died(RuntimeError("DataLoader worker (pid(s) 12) exited unexpectedly"))
    assert loader_worker_died(ConnectionResetError(104, "Connection reset by peer"))  # its batch's fd, in transit
    assert not loader_worker_died(RuntimeError("CUDA out of memory")) and not loader_worker_died(ValueError("x"))
    assert "DataLoader worker (pid(s) {pids_str}) exited unexpectedly" in Path(dataloader.__file__).read_text()


class _DiesAtOnce(torch.utils.data.Dataset):
    """A dataset whose worker is killed (SIGKILL, as by the OOM killer) at its first item."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        os.kill(os.getpid(), signal.SIGKILL)
        return i


def test_a_watched_loader_checks_its_workers_more_often_than_torchs_own_poll():
    """torch's iterator waits for a batch in `_try_get_data()` calls without a timeout argument (so its 5 s default)
    and checks its workers when one returns empty; WatchedLoader's iterator gives that call WORKER_CHECK_S. A worker
    from the forkserver killed at its first item is reported as dead before torch's own 5 s poll could have."""
    import inspect
    import time

    from torch.utils.data import dataloader

    from speechscale.data.workers import WorkerStart, worker_context

    iterating = dataloader._MultiProcessingDataLoaderIter
    assert inspect.signature(iterating._try_get_data).parameters["timeout"].default == 5.0
    assert "self._try_get_data()" in inspect.getsource(iterating._get_data)
    built = inspect.getsource(torch.utils.data.DataLoader._get_iterator)  # WatchedLoader builds its subclass
    assert "self.check_worker_number_rationality()" in built and "_MultiProcessingDataLoaderIter(self)" in built
    loader = _compat.WatchedLoader(_DiesAtOnce(), batch_size=1, num_workers=1, multiprocessing_context=worker_context(),
                                   worker_init_fn=WorkerStart())
    iterator = iter(loader)
    assert isinstance(iterator, iterating) and iterator._try_get_data.__defaults__ == (_compat.WORKER_CHECK_S,)
    assert isinstance(iter(_compat.WatchedLoader(list(range(4)))), dataloader._SingleProcessDataLoaderIter)
    started = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        next(iterator)
    assert _compat.loader_worker_died(info.value)
    assert time.monotonic() - started < 4.5  # the worker starts and dies at once; torch alone would wait 5 s
    assert [b.tolist() for b in _compat.WatchedLoader(list(range(4)), batch_size=2)] == [[0, 1], [2, 3]]  # in-process


def test_torch_save_still_names_its_tensors_by_the_rebuild_functions_the_checked_reader_knows():
    """storage/untrusted.py reads checkpoints by these names alone: a torch whose pickle names others would make
    every checkpoint it writes refused."""
    import io
    import pickletools
    import zipfile

    buf = io.BytesIO()
    torch.save({"w": torch.zeros(2, 3)[:, 1], "p": nn.Parameter(torch.ones(2))}, buf)
    with zipfile.ZipFile(buf) as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    named = {arg.replace(" ", ".") for op, arg, _ in pickletools.genops(pkl) if op.name == "GLOBAL"}
    assert {_compat.TENSOR_REBUILD, _compat.PARAMETER_REBUILD} <= named
    assert all(n in (_compat.TENSOR_REBUILD, _compat.PARAMETER_REBUILD, "collections.OrderedDict")
               or n.startswith("torch.") and n.endswith("Storage") for n in named), named


@pytest.mark.parametrize("dotted", sorted(_compat.UVICORN_INTERNALS))
def test_every_uvicorn_internal_the_transport_uses_is_still_there(dotted):
    """Each attribute or method service/transport.py reads, sets or overrides is still a class attribute of uvicorn's
    protocol, or still set as `self.NAME` in its (or a base's) code."""
    import importlib
    import inspect

    module, name = dotted.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    code = "".join(inspect.getsource(c) for c in cls.__mro__ if c.__module__.startswith("uvicorn"))
    gone = [a for a in _compat.UVICORN_INTERNALS[dotted] if not hasattr(cls, a) and f"self.{a} " not in code
            and f"self.{a}:" not in code]
    assert not gone, f"{dotted} no longer has {gone}: service/transport.py relies on them"


def test_the_transport_uses_no_uvicorn_internal_the_list_does_not_name():
    """Every `self.NAME` service/transport.py uses that its own classes do not define is listed."""
    import inspect

    from speechscale.service import transport

    used = set(re.findall(r"self\.(\w+)", inspect.getsource(transport)))
    own = {n for cls in (transport.GuardedHTTP, transport.GuardedWebSocket) for n in vars(cls)}
    own |= set(re.findall(r"self\.(\w+)(?:: [^=]+)? = ", inspect.getsource(transport)))  # set by the subclasses
    listed = {a for names in _compat.UVICORN_INTERNALS.values() for a in names}
    assert not used - own - listed, f"uvicorn internals not in _compat.UVICORN_INTERNALS: {sorted(used - own - listed)}"
