"""What a run does when its data or its arithmetic fails: where it goes back to, when it stops, what it saves first.

- Batches in which no utterance could be read (the data is gone: a store down, an unmounted disk) are counted; at
  `data.max_unreadable_batches` in a row the run stops (`DataUnreadable`), a one-process run going back to its
  last step that read data and writing a checkpoint there, so that a resume reads those batches again.
- Loader workers that die (the kernel's OOM killer) are replaced at this rank's position, `LOADER_RESTARTS` times
  in a row at most (`LoaderFailed`).
- Steps skipped for a non-finite loss or gradient are counted at each sync; `trainer.max_skipped_steps` in a row on
  every rank and the run stops (`Diverged`).

The trainer asks (`check_readable`, `batches`, `stop_checkpoint`, `amid_unreadable`, `counted_skips`,
`stop_if_diverged`); this module decides.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, NamedTuple

from .._compat import drop_loader_workers, loader_worker_died
from ..data.dataset import SKIP_REASONS, Batch
from ..storage.checkpoints import error_line
from .state import TrainingState

if TYPE_CHECKING:
    from ..distributed.strategy import Strategy

log = logging.getLogger(__name__)
LOADER_RESTARTS = 3  # new loader workers started at one position before the run stops


class LoaderFailed(RuntimeError):
    """The data loader's workers kept dying at one position; the message says where and what may help."""


class DataUnreadable(RuntimeError):
    """data.max_unreadable_batches batches in a row had no utterance that could be read."""


class Diverged(RuntimeError):
    """trainer.max_skipped_steps steps in a row were skipped for a non-finite loss or gradient."""


class Position(NamedTuple):
    """Where a failing run goes back to: counts of what the data gave, not of events."""
    epoch: int
    consumed: int
    samples_seen: int
    counts: dict[str, int]
    step: int


class Recovery:
    """One rank's watch over its data and its steps. `checkpoint()` syncs and writes a checkpoint (collective);
    `where` names the checkpoints' folder in messages."""

    def __init__(self, state: TrainingState, strategy: "Strategy", max_unreadable: int, max_skipped: int,
                 checkpoint: Callable[[], Any], where: str) -> None:
        self.state, self.strategy = state, strategy
        self.rank, self.world = strategy.rank, strategy.world_size
        self.max_unreadable, self.max_skipped = max_unreadable, max_skipped
        self.checkpoint, self.where = checkpoint, where
        self.unreadable = 0  # batches in a row with no utterance read
        self.gone: DataUnreadable | None = None  # ranks in step: this one's reason to stop with the others
        self.mark = self.position()  # the last step that read data
        self._synced_step, self._skipped_run = state.step, 0  # steps in a row skipped, as of the last sync

    @property
    def alone(self) -> bool:
        """One process in step with no other: it alone decides where its checkpoint resumes."""
        return self.world == 1 and self.strategy.lockstep

    def position(self) -> Position:
        """Where a failing run goes back to. Counts of events (steps skipped, loader restarts) are not taken back."""
        s = self.state
        return Position(s.epoch, s.consumed, s.samples_seen,
                        {k: s.counters[k] for k in (*SKIP_REASONS, "dropped_tail")}, s.step)

    def new_epoch(self) -> None:
        """An epoch begins: its position is the one to go back to, unless unreadable batches run on from the last."""
        if not self.unreadable:
            self.mark = self.position()

    def stepped(self, micro: list[Batch]) -> None:
        """After a step: one that read data (not a step of placeholders) is the new position to go back to."""
        if any(len(b) for b in micro):
            self.mark = self.position()

    def check_readable(self, batch: Batch) -> None:
        """Count batches in a row of which every utterance was unreadable; at data.max_unreadable_batches the run
        stops (DataUnreadable), going back to before them: training on would use up the planned epochs on
        nothing, and a resumed run reads those batches again."""
        if len(batch) > 0:
            self.unreadable = 0
            return
        if not batch.skipped.get("bad_audio"):
            return
        self.unreadable += 1
        if self.max_unreadable and self.unreadable >= self.max_unreadable:
            mark = self.mark
            error = DataUnreadable(
                f"{self.unreadable} batches in a row had no utterance that could be read (after step {mark.step}, "
                f"epoch {mark.epoch} sample {mark.consumed}; the log names each file and why): the "
                f"data is gone - a store down past its retries, expired credentials, an unmounted disk? Continue with "
                f"trainer.resume=auto once it is back (data.max_unreadable_batches=0 skips and counts them instead)")
            if self.world > 1 and self.strategy.lockstep:  # all ranks stop after this step (raise_if_gone), none waiting
                self.gone = self.gone or error
                return
            self.save_before_failing(error)
            raise error

    def raise_if_gone(self, stop: bool) -> None:
        """After the ranks agreed to `stop` (collective then): when any rank's data is gone, all stop with it."""
        if stop and self.strategy.lockstep and self.strategy.any_rank(self.gone is not None):
            error = self.gone or DataUnreadable(
                f"another rank had {self.max_unreadable} batches in a row with no utterance that could be read (its "
                f"log names each file and why): the data is gone? Continue with trainer.resume=auto once it is back")
            self.save_before_failing(error)
            raise error

    def save_before_failing(self, error: Exception) -> None:
        """The data failed for good: a one-process run goes back to its last step (the batches read since then
        are given back) and writes a checkpoint, so that trainer.resume=auto continues from there; ranks in step
        with others cannot (a checkpoint is collective, and the others wait in the next step)."""
        s = self.state
        if not self.alone:
            log.error("rank %d: stopped at epoch %d step %d (%s); the run continues from its last checkpoint with "
                      "trainer.resume=auto", self.rank, s.epoch, s.step, error_line(error))
            return
        self.go_back()
        try:
            self.checkpoint()
        except Exception as e:  # the data's error is the one to report
            log.error("stopped at epoch %d step %d, and no checkpoint could be written: %s", s.epoch, s.step,
                      error_line(e))
            return
        log.error("stopped at epoch %d step %d (%s): checkpoint written; continue with trainer.resume=auto",
                  s.epoch, s.step, error_line(error))

    def go_back(self) -> None:
        """Back to the last step that read data (no step since: empty batches take none); the batches read since
        are given back."""
        s, mark = self.state, self.mark
        s.epoch, s.consumed, s.samples_seen = mark.epoch, mark.consumed, mark.samples_seen
        s.counters.update(mark.counts)

    def amid_unreadable(self, at: str = "") -> bool:
        """Whether some rank has read no utterance since its last step with data (collective); no checkpoint is
        written then (`at` names which in the warning): one written there would resume past those batches."""
        if not self.strategy.any_rank(self.unreadable > 0):
            return False
        if self.rank == 0:
            log.warning("no checkpoint at %sstep %d: some rank has read no utterance since step %d (the data may be "
                        "gone); the last checkpoint, from before that, stays the one to resume from", at,
                        self.state.step, self.mark.step)
        return True

    def stop_checkpoint(self) -> bool:
        """Before the checkpoint of a run cut short (a signal, its time budget), whether to write it (collective). A
        one-process run amid batches it could not read goes back before them, so that a resume reads them again
        rather than starting past them. Ranks with others cannot go back alone (each rank's last step with data
        differs): while any is amid such batches none is written, and the last checkpoint, from before them, stays
        the one to resume from (as for the checkpoints on the way)."""
        if self.alone:
            if self.unreadable:
                log.warning("%d batches with no utterance read since step %d: the checkpoint resumes before them",
                            self.unreadable, self.mark.step)
                self.go_back()
            return True
        return not self.amid_unreadable("the stop, ")

    def batches(self, loader: Iterable[Batch], restart: Callable[[int], None],
                timed: Callable[[Iterable[Batch]], Iterable[Batch]] = iter) -> Iterator[tuple[int, Batch]]:
        """(index in the loader's pass, batch) for the rest of the epoch. A loader worker that dies (the kernel's OOM
        killer, say) is replaced: the loader starts again where this rank's trained batches end (`restart`, the
        plan's BatchPlan.restart: a lockstep position, or an asynchronous learner's claimed batches);
        LOADER_RESTARTS times in a row without a batch between them, and the run stops (LoaderFailed). `timed`
        wraps the loader's pass (the trainer's feed meter)."""
        failed = 0
        while True:
            try:
                for i, batch in enumerate(timed(loader)):
                    failed = 0
                    yield i, batch
                return
            except Exception as e:  # a dead worker comes as several types: _compat.loader_worker_died
                if not loader_worker_died(e):
                    raise
                s = self.state
                if failed >= LOADER_RESTARTS:
                    raise LoaderFailed(f"data loader workers died {failed + 1} times in a row at sample {s.consumed} "
                                       f"of epoch {s.epoch} ({error_line(e)}): the kernel's OOM killer? fewer "
                                       f"data.num_workers or a smaller data.batch_seconds need less memory") from e
                failed += 1
                s.counters["loader_restarts"] += 1
                log.warning("rank %d: %s; the loader starts again at sample %d of epoch %d", self.rank, e,
                            s.consumed, s.epoch)
                drop_loader_workers(loader)
                restart(s.consumed)

    def counted_skips(self, flagged_before: int) -> None:
        """After a collective sync of a lockstep run: whether every step since the last one was skipped on every
        rank (a bad loss on one makes the others' gradient bad, so a skipped step is flagged once on each)."""
        s = self.state
        if s.step <= self._synced_step:
            return
        steps, self._synced_step = s.step - self._synced_step, s.step
        every = s.counters["nonfinite_loss"] + s.counters["nonfinite_grad"] - flagged_before >= steps * self.world
        self._skipped_run = self._skipped_run + steps if every else 0

    def stop_if_diverged(self) -> None:
        """Diverged, the same on every rank, once trainer.max_skipped_steps steps in a row were all skipped (as
        seen at the syncs: every step since one skipped, on every rank)."""
        if self.max_skipped and self._skipped_run >= self.max_skipped:
            raise Diverged(
                f"the last {self._skipped_run} steps (to step {self.state.step}) were all skipped for a non-finite "
                f"loss or gradient: the run diverged, and training on would change nothing. Try a lower optim.lr, "
                f"a longer optim.warmup_steps or a smaller optim.grad_clip; the weights are those of step "
                f"{self.state.step - self._skipped_run}, as in {self.where} (trainer.max_skipped_steps=0 trains on)")
