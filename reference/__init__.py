"""moecert.reference: the slow, float64 reference every backend is judged against.

    from moecert.reference import Checkpoint, MoEProblem, synthesize, dequantize, moe
"""

from .canonical import CanonicalLinear
from .checkpoint import Checkpoint
from .dequantize import canonicalize, dequantize
from .errors import CheckpointError
from .inputs import make_batched_inputs, make_inputs
from .loader import LayerSummary, ModelLayer, Router, load_checkpoint
from .moe import moe
from .problem import MoEProblem
from .random_checkpoint import random_checkpoint
from .records import RECORDS, FormatRecord
from .routing import grouped_topk, sigmoid_topk, softmax_topk
from .schemes import SCHEME_NAMES, SCHEMES
from .synthesize import synthesize

__all__ = [
    "RECORDS", "SCHEMES", "SCHEME_NAMES", "CanonicalLinear", "Checkpoint", "CheckpointError",
    "FormatRecord", "LayerSummary", "MoEProblem", "ModelLayer", "Router", "canonicalize",
    "dequantize", "grouped_topk", "load_checkpoint", "make_batched_inputs", "make_inputs", "moe",
    "random_checkpoint", "sigmoid_topk", "softmax_topk", "synthesize",
]
