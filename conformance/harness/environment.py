"""The environment variables moecert reads, each declared once with the function that reads
it. Every front end (the command line's main, the pytest plugin) calls `check_environment`
before anything runs, so a mistyped value is one usage line naming the variable and the form
it expects (exit 2, or the plugin's 4): not a traceback after the results file was opened
(`MOECERT_HOST_MEMORY=abc`), an error row in every case (`MOECERT_TRITON_SPLIT_K=3`), or a
cache silently not written (`MOECERT_CACHE_DIR` naming a file).

Each reader takes the environment mapping, returns the value it means (None: unset) and
raises ValueError whose message starts with `NAME='value':`. Variables of moecert's own
that are not settings stay out: MOECERT_REQUIRE_CHROMIUM (tests), MOECERT_MARLIN_ANCHOR
(bench --marlin-lib checks the file it names, conformance/cli/bench_command.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from moecert.kernels.triton_moe import configs

from . import checkpoint_cache, memory
from .option_values import UsageError

READERS: dict[str, Callable[[Mapping[str, str]], object]] = {
    memory.HOST_MEMORY_VARIABLE: memory.host_memory_override,
    checkpoint_cache.CACHE_VARIABLE: checkpoint_cache.named_folder,
    configs.SPLIT_K_ENV: configs.forced_split_k,
    configs.NIB_SPAN_ENV: configs.forced_nib_span,
    configs.I4_PAIRS_ENV: configs.int4_pairs_allowed,
    configs.E4M3_WORDS_ENV: configs.e4m3_words_allowed,
    configs.ZERO_SUMS_ENV: configs.zero_sums_allowed,
    configs.DEQUANT_ROWS_ENV: configs.forced_dequant_rows,
    configs.FP4_SCALE_WORDS_ENV: configs.fp4_scale_words,
    configs.FP4_LEAN_ENV: configs.fp4_lean,
    configs.FP4_CARRY_ENV: configs.fp4_carry,
    configs.FP4_SCALE_BF16_ENV: configs.fp4_scale_bf16,
    configs.FUSED_ACT_ENV: configs.fused_activation,
    configs.FP6_PLANES_ENV: configs.fp6_planes_wanted,
    configs.TAIL_M_ENV: configs.forced_tail_m,
    configs.ONE_DOT_ENV: configs.forced_one_dot,
    configs.TMA_B_ENV: configs.forced_tma_b,
    configs.CONFIG_DIR_ENV: configs.config_dir,
}


def check_environment(environ: Mapping[str, str] = os.environ) -> None:
    """UsageError for the first variable of READERS whose value its reader refuses."""
    for read in READERS.values():
        try:
            read(environ)
        except ValueError as e:
            raise UsageError(str(e)) from None


__all__ = ["READERS", "check_environment"]
