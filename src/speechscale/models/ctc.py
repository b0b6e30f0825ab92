"""The CTC criterion every model here is trained and scored with."""
from __future__ import annotations

import torch


def ctc_criterion(reduction: str = "mean") -> torch.nn.CTCLoss:
    """CTC with blank 0, mean over the batch (each loss over its target length; "none": one per row), infinite
    losses (impossible alignments) zeroed."""
    return torch.nn.CTCLoss(blank=0, reduction=reduction, zero_infinity=True)
