"""The command-line options that several `moecert` subcommands take, each declared once: its
flag, destination, default, type and help. A subcommand's own options stay in its module.

Values are checked by the argparse `type=` functions of harness/option_values.py (shared with
the pytest plugin). One default for `--device` everywhere: none given means cuda where torch
sees a GPU, else cpu (`device_or_default`), resolved by each subcommand's `main`.
"""

from __future__ import annotations

import argparse

from moecert.reference.models import MODELS

from ..harness.model_selection import decoder_layer
from ..harness.option_values import (
    device_name,
    model_name,
    positive_seconds,
    run_id,
    scheme_name,
    shard_spec,
    suite_name,
    worker_count,
)
from ..harness.runner import DEFAULT_TIMEOUT_S
from ..harness.suites import SUITES


def add_import(p: argparse.ArgumentParser) -> None:
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (it may register backends)")


def add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", type=device_name, default=None,
                   help="cpu, cuda, cuda:1, ... (default: cuda if present, else cpu)")


def add_backends(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", action="append", default=[], metavar="NAME",
                   help="a registered backend (repeatable; default: every one available on "
                        "the device)")


def add_schemes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scheme", action="append", default=[], type=scheme_name, metavar="NAME",
                   help="a scheme (repeatable; default: all)")


def add_suite(p: argparse.ArgumentParser, default: str = "smoke", shown: bool = True) -> None:
    p.add_argument("--suite", default=default, type=suite_name,
                   help=" | ".join(SUITES) if shown else argparse.SUPPRESS)


def add_results(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default="moecert-results", help="results folder")


def add_run_id(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run-id", type=run_id, default=None, metavar="ID",
                   help="the run's id (default: a new timestamp); give every shard the same "
                        "one and moecert.reports.load merges them")


def add_shard(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shard", type=shard_spec, default=None, metavar="I/N",
                   help="run shard I of N (0-based), split by case id")
    p.add_argument("--shard-costs", default=None, metavar="RESULTS",
                   help="each case's check time in these earlier results (a file or "
                        "folder; the same on every shard): with --shard it balances the "
                        "shards, and it orders the run's problems, the longest first")


def add_models(p: argparse.ArgumentParser, help: str) -> None:
    """`--model NAME` (repeatable): a model of reference/models.py (`run`, `certify`,
    `bench`, `tune`)."""
    p.add_argument("--model", action="append", default=[], type=model_name, metavar="NAME",
                   help=f"{help} (repeatable; known: {', '.join(MODELS)})")


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a run on a model folder's layers (`run` and `certify`)."""
    p.add_argument("--checkpoint", metavar="DIR", default=None,
                   help="run on the MoE layers of this model folder (HF layout): the layer "
                        "fixes scheme and shape, the suite gives M values and seeds")
    p.add_argument("--layer", action="append", default=[], type=decoder_layer, metavar="N",
                   help="with --checkpoint: decoder layer N (repeatable), or all (default: "
                        "the first MoE layer)")
    p.add_argument("--inputs", metavar="FILE", default=None,
                   help="with --checkpoint: hidden states, a safetensors file of [M, K] rows")


def add_execution_arguments(p: argparse.ArgumentParser) -> None:
    """The options of how cases run (`run` and `certify`)."""
    p.add_argument("-n", "--workers", type=worker_count, default=1,
                   help="worker processes, or auto (on a GPU host as many as its GPUs' memory "
                        "and 3 per 4 cores hold (1 per core with --mps), 1 per core "
                        "on a CPU)")
    add_device(p)
    p.add_argument("--no-cache", action="store_true",
                   help="synthesize every checkpoint afresh: neither read nor write the cache "
                        "of synthesized checkpoints ($MOECERT_CACHE_DIR, else "
                        "~/.cache/moecert/checkpoints)")
    p.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S,
                   help="seconds per case before its worker is killed")
    p.add_argument("--mps", action="store_true",
                   help="with --device cuda: the workers share each GPU through CUDA MPS, a "
                        "daemon of the run's own that it starts and quits (needs "
                        "nvidia-cuda-mps-control); a case that fails on the GPU under it is "
                        "run once more outside it before it counts")
    add_import(p)
