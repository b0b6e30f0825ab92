"""What a person watching a run sees: one progress bar for the whole run (on a terminal only; in a log
file bars pile up as carriage returns), epochs numbered from 1 as in the log lines, and an ETA."""
from __future__ import annotations

import math
import sys

from tqdm import tqdm

from .state import TrainingState
from .stop import TimeBudget


class RunProgress:
    """The bar and the labels of one run of `planned` optimizer steps on this rank."""

    def __init__(self, planned: int, state: TrainingState, max_epochs: int, budget: TimeBudget, show: bool) -> None:
        self.planned = max(1, planned)
        self.state = state
        self.max_epochs = max_epochs
        self.budget = budget
        self.start_step = state.step
        self.bar = tqdm(total=self.planned, initial=state.step, unit="step", dynamic_ncols=True,
                        disable=not (show and sys.stderr.isatty()))

    def epoch_label(self, training: bool = False) -> str:
        """'k/N': the epoch being trained (`training`), or the one just finished at an epoch's end."""
        s = self.state
        shown = s.epoch if s.consumed == 0 and s.step > 0 and not training else s.epoch + 1
        return f"{shown}/{self.max_epochs}" if self.max_epochs else str(shown)

    def eta(self) -> str:
        """', ETA x min' from the pace since this run (or resume) started; '' when unknown or done."""
        done, left = self.state.step - self.start_step, self.planned - self.state.step
        return f", ETA {self.budget.elapsed_minutes() / done * left:.1f} min" if done > 0 and left > 0 else ""

    def new_epoch(self) -> None:
        self.bar.set_description(f"epoch {self.epoch_label(training=True)}")

    def stepped(self) -> None:
        self.bar.update(1)

    def show_loss(self, loss: float | None) -> None:
        if loss is not None:
            self.bar.set_postfix(loss=f"{loss:.3f}")

    def close(self) -> None:
        self.bar.close()


def planned_steps(max_steps: int, max_epochs: int, steps_per_epoch: float, world: int) -> int:
    """Optimizer steps one rank takes in a whole run: the first of max_steps and max_epochs to end it."""
    by_epochs = math.ceil(max_epochs * steps_per_epoch / world) if max_epochs else 0
    return min(x for x in (max_steps, by_epochs) if x) or 1
