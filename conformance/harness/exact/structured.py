"""The exact tier's product: a checkpoint and inputs on which every correct backend matches
the reference bit for bit (the package docstring says why), or why none can be built."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from moecert.reference import Checkpoint


class NotExact(Exception):
    """The case's options make a bit-exact structure impossible; the message says why."""


@dataclass
class Structured:
    checkpoint: Checkpoint
    x: torch.Tensor
    topk_weights: torch.Tensor | None
    topk_ids: torch.Tensor | None
    expert_num_tokens: torch.Tensor | None = None
