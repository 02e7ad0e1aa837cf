"""The format facts: one record per scheme, element type and checkpoint format, from which
everything else is derived.

This package is the one place both sides of the import wall read (the reference and the
kernels): data and integer / shape rules only, no tensor math, and importing it loads none of
the reference's math modules (`moecert.reference` imports its modules lazily; a test holds
it). Scheme names are stable strings: they become keys in results files and never change
meaning.

    elements.py  `Element`: storage dtype, bits, elements per storage unit, exponent and
                 mantissa fields, NaN codes, largest value, rounding, code table
    records.py   `FormatRecord`: one checkpoint format's packing, code offset, zero domain,
                 interleave, scale layout, global-scale convention and rejected values
    tensors.py   the tensors each layout holds, named by role, with dtypes and shapes
    table.py     `Scheme`: its formats (`SchemeFormat` -> a record), element, scale encoding,
                 variants and activation modes; the constants read off the element records
    shapes.py    `checkpoint_shape_issue`: which problem shapes a checkpoint of a variant
                 holds; `weight_scale_block`: the (rows, cols) one weight scale covers
    variant.py   `Variant`: one scheme variant (group size, zero points, checkpoint format,
                 ...) resolved from the scheme's defaults and checked; what a `Checkpoint`
                 holds, a backend's `supports` receives, a case holds and the suites
                 enumerate (`scheme_variants`)

Readers, writers, `random_checkpoint`, the kernels' conversions and checkpoint spec and the
suites' variants read these records instead of branching on scheme names. `Scheme.family` is a
label for people (`moecert list`); code reads the fields, never the label.
"""

from __future__ import annotations

# The package is the facts' one import point: the scheme table's names, then the variant and
# shape rules that read it (each imports `table` directly, so the order here is no rule).
from .shapes import ShapeIssue as ShapeIssue
from .shapes import checkpoint_shape_issue as checkpoint_shape_issue
from .shapes import weight_scale_block as weight_scale_block
from .table import *  # noqa: F403
from .variant import VARIANT_FIELDS as VARIANT_FIELDS
from .variant import Variant as Variant
from .variant import VariantError as VariantError
from .variant import scheme_variants as scheme_variants
