"""Writes standalone/<finding>.py: each reproduction that imports `_layer.py` as one file a
vLLM maintainer can run alone (vLLM and torch only): the script's docstring, then `_layer.py`'s
code (the AMX gate, vLLM's distributed setup), then the script's own code (tools/standalone.py
does the writing, for this folder and tools/transformers_repro/ alike).

    python make_standalone.py            # writes standalone/*.py
    python make_standalone.py --check    # fails when a standalone file is not what it writes

A script that imports no `_layer.py` (it builds its layer from a model folder itself) is
written as it is. `_layer.py` and the scripts stay the source; the standalone files are
derived from them."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ("awq_moe_per_channel", "ct_mxfp4_marlin_on_cpu", "gptq_v2_sym", "int4_bias_dropped",
           "int4_router_on_input", "int4_w4a8", "mxfp8_triton_on_cpu", "process_twice",
           "quark_int4_cpu", "quark_int8_static",
           "unvalidated_values", "gpu_marlin_shapes", "gpu_reduce")

if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    from standalone import main

    sys.exit(main(HERE, "_layer", "the layer as vLLM builds it", SCRIPTS, sys.argv[1:]))
