"""The CTC criterion every model here is trained and scored with."""
from __future__ import annotations

import torch


def ctc_criterion() -> torch.nn.CTCLoss:
    """CTC with blank 0, mean over the batch, infinite losses (impossible alignments) zeroed."""
    return torch.nn.CTCLoss(blank=0, reduction="mean", zero_infinity=True)
