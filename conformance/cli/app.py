"""The `moecert` command line: `list` here, every other subcommand in its own module
(SUBCOMMANDS). DESCRIPTION is what `moecert --help` says."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

# Before torch's first allocation: back large CPU tensors with transparent huge pages. The
# reference's big float64 temporaries otherwise spend more time in page faults than in
# arithmetic (DeepSeek-V3 layer on 2 cores: about 70 s without, 40-50 s with).
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from moecert.reference import RECORDS, SCHEMES, MoEProblem


def cmd_list(args) -> int:
    """Under the same notion of "available here" as `moecert run` and `moecert inspect`
    (execute.available_here: on a CPU the triton backend runs through the interpreter)."""
    from ..harness.execute import available_here

    with available_here():
        return _list(args)


def _list(args) -> int:
    from ..harness.imports import import_modules

    import_modules(args.imports)  # a UsageError: main prints it, exit 2
    if args.mutants:
        return print_mutants()
    if args.backend:
        return print_claims(args.backend, args.suite, args.imports)
    print(f"{'scheme':<12} {'family':<6} {'bits':>4}  {'strategies':<22} {'activations':<44} "
          f"{'formats':<22} groups")
    for s in SCHEMES.values():
        print(f"{s.name:<12} {s.family:<6} {s.weight_bits:>4}  {','.join(s.strategies) or '-':<22}"
              f" {','.join(s.activation_modes):<44} {','.join(s.checkpoint_formats) or '-':<22} "
              f"{','.join(map(str, s.group_sizes)) or '-'}")
    if args.records:
        print()
        for key, r in RECORDS.items():
            print(f"{key}\n  layout: {r.weight_layout}; pack {r.pack_dim} {r.packing} "
                  f"{r.bit_order}; interleave {r.interleave}; code offset {r.code_offset}\n"
                  f"  zeros: {r.zero_domain} packed along {r.zero_pack_dim}; scales: "
                  f"{r.scale_layout} ({r.scale_dtype}); global scale {r.global_scale}\n"
                  f"  scale rule: {r.scale_rule}; rounding {r.element_rounding}; "
                  f"non-finite: {r.nonfinite}")
    if not args.no_backends:
        print()
        print_backends()
    return 0


def print_mutants() -> int:
    """The planted-bug backends (conformance/mutants) with the bug each plants, the schemes
    it lives in and the correct backend it is a copy of; then the legitimate twins."""
    from ..mutants import LEGIT, MUTANTS, REGISTER_MODULE

    print(f"{len(MUTANTS)} mutants (correct backends with one planted bug each; run them with "
          f"--import {REGISTER_MODULE} --backend NAME):")
    width = max(map(len, MUTANTS))
    for m in MUTANTS.values():
        print(f"  {m.name:<{width}}  {m.bug}\n  {'':<{width}}  schemes {', '.join(m.targets)}; "
              f"copy of {m.base}; caught by {' or '.join(m.expected_checks)}")
    print(f"\n{len(LEGIT)} legitimate twins (production numerics the tolerances must admit):")
    for name, factory in LEGIT.items():
        doc = (factory.__doc__ or "").strip().split("\n\n")[0]
        print(f"  {name:<{width}}  {' '.join(doc.split())}")
    return 0


def print_backends() -> None:
    """Registered backends, then the oracle's choice for every simulated platform and scheme."""
    from moecert.kernels import backend_names, get_backend
    from moecert.kernels.oracle import selection_rows
    from moecert.kernels.platform import SIMULATED_PLATFORMS
    from moecert.kernels.registry import load_errors

    print("backends:")
    for name in backend_names():
        why = get_backend(name).available()
        print(f"  {name:<10} {'available here' if why is None else 'unavailable: ' + why}")
    for name, err in load_errors().items():
        print(f"  {name:<10} failed to load: {err}")
    print("\nselection (oracle), per simulated platform:")
    from moecert.reference.models import MODELS

    # Qwen3-30B-A3B's layer shape: a realistic problem for the claims that depend on shape.
    E, K, N, topk = MODELS["qwen3-30b-a3b"]
    problems = [(label, MoEProblem(M=16, K=K, N=N, E=E, topk=topk, bias=bias))
                for label, bias in (("", False), ("+bias", True))]
    current, previous = None, None
    for row in selection_rows(SIMULATED_PLATFORMS, SCHEMES, problems):
        if row["platform"] != current:
            current = row["platform"]
            print(f"\n{current}")
        same = (previous is not None and previous["config"] == row["config"]
                and (previous["backend"], previous["reasons"]) == (row["backend"], row["reasons"]))
        previous = row
        if same:  # a variant (bias) that changes nothing is not repeated
            continue
        passed = "; ".join(f"{n}: {why}" for n, why in row["reasons"].items())
        chosen = row["backend"] or "NONE"
        label = f"{row['config']} {row['problem']}".strip()
        print(f"  {label:<44} -> {chosen:<8}{'  (' + passed + ')' if passed else ''}")


def print_claims(name: str, suite: str, imports: list[str]) -> int:
    """What backend `name` claims of `suite` on this machine's platform, per scheme variant,
    with its reasons for the rest (counted); 2 for a name or module that does not exist."""
    from moecert.kernels import Platform, get_backend
    from moecert.kernels.oracle import supports_reason

    from ..harness.imports import import_modules
    from ..harness.option_values import check_backends
    from ..harness.suites import build_suite

    import_modules(imports)  # a UsageError: main prints it, exit 2
    check_backends([name])  # as run's: the closest names, or the module registering a mutant
    backend, platform = get_backend(name), Platform.current()
    variants: dict[str, list] = {}  # describe() -> [claimed, total, {reason: count}]
    cases = build_suite(suite, [name])
    for case in cases:
        quant = case.variant
        row = variants.setdefault(quant.describe(), [0, 0, {}])
        why = supports_reason(backend, quant, case.problem, platform)
        row[1] += 1
        if why is None:
            row[0] += 1
        else:
            row[2][why] = row[2].get(why, 0) + 1
    why = backend.available()
    claimed = sum(r[0] for r in variants.values())
    print(f"{name} on {platform} ({'available here' if why is None else 'unavailable: ' + why})"
          f": claims {claimed} of {len(cases)} {suite} cases")
    for label, (n, total, reasons) in variants.items():
        refused = "; ".join(f"{r} ({k})" for r, k in reasons.items())
        print(f"  {label:<44} {n:>3} of {total:<3}{'  not: ' + refused if refused else ''}"
              .rstrip())
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage block): what was wrong, and exit 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# the subcommands whose module (under moecert.conformance) has add_arguments(parser) and
# main(args): (name, module, help)
SUBCOMMANDS = (
    ("bench", "cli.bench_command",
     "time the backends on the model layers against the device's floors "
     "(reference: time the float64 reference)"),
    ("run", "cli.run_command",
     "run a suite against the reference; exit 1 when not green (the last line says why)"),
    ("calibrate", "cli.calibrate_command",
     "error distribution, suggested thresholds, tolerance used"),
    ("report", "cli.report_command",
     "summarize results, compare with a baseline; exit 1 on a regression, 2 on unreadable "
     "results"),
    ("certify", "cli.certify_command",
     "certify a backend: the whole certify suite into a hashed bundle; --verify checks one"),
    ("tune", "performance.tune",
     "measure the triton backend's tile configurations on this GPU and write its config file"),
    ("inspect", "cli.inspect_command",
     "what moecert reads in a model folder, per MoE layer, and which backends claim it"),
)


DESCRIPTION = ("moecert: a conformance harness and float64 reference for quantized "
               "Mixture-of-Experts kernels. Run a suite on the backends available here "
               "(`moecert run --suite smoke`), report on results, certify a backend, time "
               "the backends, inspect a model folder.")


def version_text() -> str:
    from ..harness.provenance import versions

    v = versions()
    return (f"moecert {v['moecert']} (torch {v['torch']}, triton {v['triton']}, "
            f"python {v['python']})")


def main(argv: list[str] | None = None) -> int:
    """Exit codes: 0 green, 1 a case failed (or nothing was judged), 2 a usage error."""
    from ..harness.environment import check_environment
    from ..harness.option_values import UsageError
    from .arguments import add_import, add_suite

    parser = _Parser(prog="moecert", description=DESCRIPTION,
                     epilog="Exit codes: 0 green, 1 not green (the last line says why), 2 a "
                            "usage error. `moecert COMMAND --help` for a command's options; "
                            "the README and docs/contract.md for the rest.")
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="schemes, backends and the oracle's choice per platform "
                                    "(--backend NAME: what it claims; --mutants: the planted "
                                    "bugs)")
    p.add_argument("--records", action="store_true", help="also print every format record")
    p.add_argument("--no-backends", action="store_true",
                   help="omit the backends and the oracle's selection table")
    p.add_argument("--backend", metavar="NAME",
                   help="instead: what backend NAME claims of a suite, per scheme variant, "
                        "and why not the rest")
    p.add_argument("--mutants", action="store_true",
                   help="instead: the planted-bug backends (mutants), with the bug each "
                        "plants")
    add_suite(p)  # with --backend
    add_import(p)
    p.set_defaults(func=cmd_list)
    for name, module, text in SUBCOMMANDS:
        command = importlib.import_module(f"moecert.conformance.{module}")
        p = sub.add_parser(name, help=text)
        command.add_arguments(p)
        p.set_defaults(func=command.main)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # how to resume a run (run.py)
    try:
        check_environment()  # a mistyped MOECERT_* variable: one line, before anything runs
        return args.func(args)
    except UsageError as e:
        print(f"moecert {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `moecert list | head`: the reader left; no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
