"""`moecert inspect DIR`: what moecert reads in a model folder, per MoE layer, and which
backends claim it, after checking the folder as `run --checkpoint` reads it: the config
against the tensors (expert counts, dtypes, shapes) and every value the format record rejects,
each MoE layer read once (`load_checkpoint(validate=True)`). `--quick` reads the configs and
the safetensors headers only (no tensor data: a model of hundreds of GB in about a second),
and says that the values were not checked."""

from __future__ import annotations

import argparse

from moecert.reference import CheckpointError, load_checkpoint

from .arguments import add_import

# the problem the claims are asked for: a decode-sized batch of the layer's own shape
CLAIM_TOKENS = 16


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("folder", metavar="DIR", help="an HF model folder (config.json, "
                   "*.safetensors) or an HF cache repo folder")
    p.add_argument("--quick", action="store_true",
                   help="configs and tensor headers only: no tensor data read, so dtypes, "
                        "shapes and values are not checked")
    add_import(p)


def main(args) -> int:
    from ..harness.imports import import_modules
    from ..harness.option_values import UsageError

    import_modules(args.imports)
    try:
        layers = load_checkpoint(args.folder, validate=not args.quick)
    except CheckpointError as e:  # main prints it on one line, exit 2
        raise UsageError(" ".join(str(e).split())) from None
    first = layers[0]
    dense = sorted(decoder_layers(args.folder) - {s.layer for s in layers})
    print(f"{args.folder}: {len(layers)} MoE layer{'s' * (len(layers) != 1)}, producer "
          f"{first.producer}" + (f"; decoder layers without routed experts (not read): "
                                 f"{', '.join(map(str, dense))}" if dense else ""))
    print("checked: " + ("config and tensor names only (--quick): dtypes, shapes and values "
                         "not checked" if args.quick else "every MoE layer's expert tensors "
                         "read: dtypes, shapes, and the values the format rejects"))
    from ..harness.execute import available_here

    with available_here():  # claims as `moecert run` asks them (triton interpreted on a CPU)
        described = _grouped(layers)
    for labels, text in described:
        print(f"layer{'s' * (',' in labels or '-' in labels)} {labels}: {text}")
    return 0


def decoder_layers(folder) -> set[int]:
    """Every decoder layer index the folder's tensor names hold (no tensor data read)."""
    from moecert.reference.loader.families import LAYER
    from moecert.reference.loader.files import ModelFolder

    names = ModelFolder(folder)
    try:
        return {int(m["L"]) for n in names.names() if (m := LAYER.match(n))}
    finally:
        names.close()


def describe(s) -> str:
    """One layer's scheme, variant, shapes, what is not read, and the claims."""
    variant = " ".join(f"{k}={getattr(s.variant, k)}" for k in s.stated)
    lines = [f"{s.scheme}{' [' + variant + ']' if variant else ''}",
             f"  E={s.E} K={s.K} N={s.N} topk={s.topk} activation={s.activation} "
             f"dtype={s.dtype} bias={s.bias}"]
    config = {k: why for k, why in s.not_read.items() if ": quantization" in k
              or k.startswith(("quantize_config.json", "hf_quant_config.json"))}
    lines += [f"  not read: {kind}: {why}" for kind, why in s.not_read.items()
              if kind != "other decoder layers" and kind not in config]
    if config:  # the keys only: load_checkpoint(...).not_read says why, docs/checkpoints.md
        keys = [k.split(": ", 1)[1].split(".", 1)[1] for k in config]
        lines.append(f"  config keys not read ({next(iter(config)).split(':')[0]}): "
                     f"{', '.join(keys)}")
    claimed, refused = claims(s)
    lines.append(f"  claimed by: {', '.join(claimed) or 'no backend'}")
    lines += [f"  not by {name}: {why}" for name, why in refused.items()]
    return "\n".join(lines)


def claims(s) -> tuple[list[str], dict[str, str]]:
    """(backends that claim the layer, {backend: why not}) on this machine's platform."""
    from moecert.kernels import Platform, backend_names, get_backend
    from moecert.kernels.oracle import supports_reason

    platform = Platform.current()
    quant, problem = s.variant, s.problem(CLAIM_TOKENS)
    claimed, refused = [], {}
    for name in backend_names():
        backend = get_backend(name)
        why = supports_reason(backend, quant, problem, platform)
        if why is None:
            unavailable = backend.available()
            claimed.append(name if unavailable is None else f"{name} (not here: {unavailable})")
        else:
            refused[name] = why
    return claimed, refused


def _grouped(layers) -> list[tuple[str, str]]:
    """Consecutive layers with the same description share one entry (DeepSeek-V3: 3-60)."""
    out: list[tuple[list[int], str]] = []
    for s in layers:
        text = describe(s)
        if out and out[-1][1] == text and out[-1][0][-1] == s.layer - 1:
            out[-1][0].append(s.layer)
        else:
            out.append(([s.layer], text))
    return [(str(ls[0]) if len(ls) == 1 else f"{ls[0]}-{ls[-1]}", text) for ls, text in out]
