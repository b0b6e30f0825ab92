"""Every private torch, Starlette and uvicorn access of the package, each with its reason, in one place.

tests/test_compat.py pins the behaviour each relies on: an upgrade that changes one fails there, with a message
naming it, instead of somewhere in training or the service. No other module names a private attribute of them
(a test checks the sources).
"""
from __future__ import annotations

import sys
from types import CodeType
from typing import Any, Callable, Sequence

import torch
from torch import nn

# -- Optimizers without the compiler ------------------------------------------------------------------------------
# torch keeps its compiler out of an optimizer by wrapping `step` (`_use_grad`, a graph break) and four other
# methods (`torch._compile._disable_dynamo`); either wrapper imports torch._dynamo on its first call, seconds of CPU
# in every training process (docs/development.md has the figure). training/optim.py calls the methods beneath them.
try:
    from torch._compile import _disable_dynamo

    _DISABLE_CODE: CodeType | None = _disable_dynamo(lambda: None).__code__  # the code of every such wrapper
except ImportError:  # a torch without it: optimizers keep their methods as they are
    _DISABLE_CODE = None


def unguarded(base: type, name: str) -> Callable[..., Any] | None:
    """The function beneath `base.name`'s compiler guards (and an optimizer hook's wrapper), or None where no
    wrapper is a guard this module knows (another torch: the method is kept as it is)."""
    fn, guarded = getattr(base, name), False
    while hasattr(fn, "__wrapped__"):
        code = getattr(fn, "__code__", None)
        guarded |= code is not None and (code is _DISABLE_CODE or code.co_name == "_use_grad")
        fn = fn.__wrapped__
    return fn if guarded else None


# -- Skipping a fused optimizer step on the device ----------------------------------------------------------------
# GradScaler's protocol: an optimizer that declares `_step_supports_amp_scaling` reads `found_inf` (and
# `grad_scale`) set on it and skips its step on the device, without a host sync.
def steps_on_found_inf(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer.step()` honours `optimizer.found_inf` (GradScaler's protocol) by itself."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


# -- Deterministic algorithms without the compiler ----------------------------------------------------------------
def deterministic_algorithms(compiling: bool) -> None:
    """torch.use_deterministic_algorithms(True, warn_only=True), without its side trip when nothing is compiled:
    the public call imports torch._inductor's config (about a second at every process start) only to set the
    inductor's own flag, which matters to compiled code alone."""
    if compiling or "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(True, warn_only=True)
    else:
        torch._C._set_deterministic_algorithms(True, warn_only=True)


# -- The order of an RNN's flat weights ---------------------------------------------------------------------------
def rnn_weight_names(rnn: nn.RNNBase) -> list[str]:
    """The parameter names of `rnn` in the order its fused kernel takes them (both directions)."""
    return list(rnn._flat_weights_names)


# -- One fused lerp over many tensors -----------------------------------------------------------------------------
def lerp_all_(targets: Sequence[torch.Tensor], ends: Sequence[torch.Tensor], weight: float) -> None:
    """targets[i] += weight * (ends[i] - targets[i]) for every i in one kernel per device (no host sync)."""
    torch._foreach_lerp_(list(targets), list(ends), weight)


# -- Starlette: a form parsed from a body read already ------------------------------------------------------------
def set_request_body(request: Any, body: bytes) -> None:
    """Hand `body`, read (and limited) by the server itself, to Starlette's `request.form()`, which otherwise reads
    the stream again and finds it consumed."""
    request._body = body


# -- uvicorn's protocols, subclassed for the service's connection limits ---------------------------------------------
# uvicorn has no public hook for a deadline on a request's headers, a cap on connections still sending them, a
# WebSocket send timeout or read backpressure from unread sends, so service/transport.py subclasses its h11 protocol
# and its websockets sans-I/O protocol (the `websockets` library's own server offers some of these, but not inside
# uvicorn's ASGI stack). Every attribute and method of theirs the subclasses read, set or override is listed here;
# tests/test_compat.py fails, naming it, when one is gone from the uvicorn installed. pyproject.toml bounds uvicorn and
# websockets to the releases this was tested with.
UVICORN_INTERNALS: dict[str, tuple[str, ...]] = {
    "uvicorn.protocols.http.h11_impl.H11Protocol": (
        "connection_made", "connection_lost", "data_received", "handle_websocket_upgrade", "on_response_complete",
        "connections", "cycle", "loop", "transport"),
    "uvicorn.protocols.websockets.websockets_sansio_impl.WebSocketsSansIOProtocol": (
        "pause_writing", "resume_writing", "receive", "send", "connection_lost", "data_received",
        "send_receive_event_to_app", "handle_parser_exception", "read_paused", "queue", "writable", "disconnected",
        "close_sent", "handshake_complete", "conn", "loop", "transport", "curr_msg_data_type", "frames",
        "close_timer"),
    "uvicorn.protocols.utils.ClientDisconnected": (),
}


def uvicorn_protocols() -> tuple[Any, Any, Any]:
    """uvicorn's h11 HTTP protocol, its websockets sans-I/O WebSocket protocol and its ClientDisconnected (the
    classes UVICORN_INTERNALS lists)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol
    from uvicorn.protocols.utils import ClientDisconnected
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

    return H11Protocol, WebSocketsSansIOProtocol, ClientDisconnected


# -- What DistributedDataParallel's constructor imports ------------------------------------------------------------
# The constructor asks the compiler how to reduce (`torch._dynamo.utils`), importing it: as long as importing torch
# again. A process that forks many DDP ranks (bench/ranks.py) imports it once, before it forks.
DDP_CONSTRUCTOR_IMPORTS = ("torch._dynamo.utils",)


# -- The names torch.save's pickle gives its tensors -----------------------------------------------------------------
# storage/untrusted.py reads a checkpoint without torch.load and knows only these rebuild functions (a tensor view of
# a storage, a parameter); a torch that writes others makes every checkpoint it saves refused by name, which
# tests/test_compat.py catches first.
TENSOR_REBUILD = "torch._utils._rebuild_tensor_v2"
PARAMETER_REBUILD = "torch._utils._rebuild_parameter"


# -- A loader worker that died --------------------------------------------------------------------------------------
# torch reports a worker process that exited (killed by the OOM killer, say) as a RuntimeError whose message is all
# that tells it from an error the worker raised itself (those arrive as their own type). A worker killed just after it
# queued a batch fails earlier, while the batch's shared memory is fetched from it: a connection error of
# multiprocessing's fd passing, which torch lets through before it has seen the worker exit.
_WORKER_DIED = ("DataLoader worker (pid",)


def loader_worker_died(error: BaseException) -> bool:
    """Whether `error`, raised while a DataLoader's next batch was awaited, says one of its workers exited."""
    return (isinstance(error, RuntimeError) and str(error).startswith(_WORKER_DIED)) or isinstance(
        error, (ConnectionResetError, ConnectionRefusedError, EOFError))


# While the main process waits for a batch, torch checks that the loader's workers live every
# MP_STATUS_CHECK_INTERVAL (5 s, the default of `_MultiProcessingDataLoaderIter._try_get_data`'s timeout), and at
# once on SIGCHLD; workers started by a forkserver (data/workers.py) are the server's children and send the trainer
# no SIGCHLD, so each death cost 5 s before the loader started again. WatchedLoader's iterators check every
# WORKER_CHECK_S. A loader built with its own `timeout` keeps it (torch passes that one explicitly).
WORKER_CHECK_S = 0.5


class _WatchedIterator(torch.utils.data.dataloader._MultiProcessingDataLoaderIter):
    def _try_get_data(self, timeout: float = WORKER_CHECK_S):
        return super()._try_get_data(timeout)


class WatchedLoader(torch.utils.data.DataLoader):
    """A DataLoader whose main process notices a dead worker within WORKER_CHECK_S while it waits for a batch."""

    def _get_iterator(self):
        if self.num_workers == 0:
            return super()._get_iterator()
        self.check_worker_number_rationality()  # what torch's own does before it builds the iterator
        return _WatchedIterator(self)


def drop_loader_workers(loader: torch.utils.data.DataLoader) -> None:
    """Let the next pass of `loader` start new workers: a loader with persistent workers keeps its iterator (and
    them) across passes, and one whose worker died cannot be reset."""
    iterator, loader._iterator = loader._iterator, None
    if iterator is not None:
        iterator._shutdown_workers()
