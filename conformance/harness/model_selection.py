"""A model folder's selection (`--checkpoint DIR [--layer N|all ...] [--inputs FILE]`): reads
the folder's config and tensors' headers to find its MoE layers, says on stderr which layer a
run without --layer takes, and turns every mistake into one `UsageError` line."""

from __future__ import annotations

from pathlib import Path

from .option_values import UsageError, one_line


def decoder_layer(text: str) -> int | str:
    """A decoder layer index, or "all" (`--checkpoint DIR --layer N`)."""
    if text == "all":
        return text
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise UsageError(f"--layer {text!r}: expected a decoder layer index (0, 1, ...) or all")
    return value


def model_selection(folder: str | None, layers, inputs: str | None
                    ) -> tuple[str, list[int], str | None] | None:
    """(folder, MoE layers to run, inputs file) of `--checkpoint DIR [--layer ...]
    [--inputs FILE]`, every mistake one UsageError line: a folder that is not one or not a
    model, a layer that is no MoE layer (the MoE layers listed), an inputs file that is not
    [M, K] hidden states of the layer's K. No --layer: the first MoE layer (said on
    stderr). None without --checkpoint."""
    import sys

    from moecert.reference import CheckpointError

    from .model_layers import ModelInputError, layer_summaries, read_inputs

    if folder is None:
        if layers or inputs:
            raise UsageError(f"{'--layer' if layers else '--inputs'} needs --checkpoint DIR")
        return None
    where = f"--checkpoint {folder}"
    if Path(folder).is_file():
        raise UsageError(f"{where}: a file, not a model folder (config.json and *.safetensors)")
    if not Path(folder).is_dir():
        raise UsageError(f"{where}: no such folder")
    try:
        summaries = layer_summaries(folder)
    except (CheckpointError, OSError, ValueError) as e:
        raise UsageError(f"{where}: {one_line(e)}") from None
    found = list(summaries)
    if not found:
        raise UsageError(f"{where}: no MoE layer with routed experts")
    if not layers:
        chosen = found[:1]
        print(f"{where}: layer {chosen[0]}, the first of {len(found)} MoE layer(s) "
              f"({_list(found)}); --layer N or --layer all for others", file=sys.stderr)
    elif "all" in layers:
        chosen = found
    else:
        unknown = [n for n in layers if n not in found]
        if unknown:
            raise UsageError(f"--layer {unknown[0]}: not an MoE layer of {folder}; its MoE "
                             f"layers: {_list(found)}")
        chosen = list(dict.fromkeys(layers))
    if inputs is not None:
        try:
            read_inputs(inputs, summaries[chosen[0]].K)
        except ModelInputError as e:
            raise UsageError(str(e)) from None
    return str(Path(folder).resolve()), chosen, inputs


def _list(items, n: int = 8) -> str:
    head = ", ".join(map(str, items[:n]))
    return head + (f" and {len(items) - n} more" if len(items) > n else "")


__all__ = ["decoder_layer", "model_selection"]
