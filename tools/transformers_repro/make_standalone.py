"""Writes standalone/<finding>.py: each reproduction that imports `_folder.py` as one file a
transformers maintainer can run alone (transformers and torch only): the script's docstring,
then `_folder.py`'s code (the one-layer model folder, the load), then the script's own code
(tools/standalone.py does the writing, for this folder and tools/vllm_repro/ alike).

    python make_standalone.py            # writes standalone/*.py
    python make_standalone.py --check    # fails when a standalone file is not what it writes

The scripts that build their folder or layer themselves (fp8_partial_block.py,
gptq_awq_experts_unread.py, quark_experts_unquantized.py, gpt_oss_bias_after_rounding.py) run
alone as they are and have no standalone copy. `_folder.py` and the scripts stay the source;
the standalone files are derived from them."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = ("ct_experts_asym", "ct_experts_fp8_block", "ct_experts_int_quantized",
           "ct_experts_nvfp4_global_scale", "fp8_tensor_scale_unread", "mixtral_experts_unread",
           "unvalidated_values")

if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    from standalone import main

    sys.exit(main(HERE, "_folder", "the model folder", SCRIPTS, sys.argv[1:]))
