"""The op table: every solbench_kernels op declared once, in `csrc/<family>/ops.yaml`.

An entry declares the op's arguments (tensors with symbolic shapes and dtype rules,
scalars with defaults, string enums), its outputs, extra requirements, a doc string, and
which C++ implements it. Everything else is derived from it (README.md, "The op table"):
the TORCH_LIBRARY schemas and CUDA registrations (codegen.py, at build time), the input
checks on both sides (checks.py), the Python wrappers (ops.py), the fake impls (fakes.py)
and `kernels_ext.OPS`.

model.py holds the records, parse.py reads a file, rules.py checks what spans fields.
Pure Python (PyYAML, no torch): importing kernels_ext reads the table.
"""

from __future__ import annotations

import functools
from pathlib import Path

from kernels_ext.optable.model import (
    CSRC,
    DTYPE_SETS,
    DTYPES,
    IMPLS,
    KERNEL_DTYPES,
    MAX_ROW_LENGTH,
    NAMESPACE,
    NO_DEFAULT,
    SCALAR_TYPES,
    TABLE_GLOB,
    Arg,
    Dim,
    OpDef,
    OpTableError,
    Output,
    Requirement,
    ScalarArg,
    Shape,
    TensorArg,
    bound_symbols,
    message_fields,
    rel,
    schema_literal,
)
from kernels_ext.optable.parse import load_file, parse_op, parse_shape

__all__ = ["CSRC", "DTYPE_SETS", "DTYPES", "IMPLS", "KERNEL_DTYPES", "MAX_ROW_LENGTH",
           "NAMESPACE", "NO_DEFAULT", "SCALAR_TYPES", "TABLE_GLOB", "Arg", "Dim", "OpDef",
           "OpTableError", "Output", "Requirement", "ScalarArg", "Shape", "TensorArg",
           "bound_symbols", "load_file", "load_table", "message_fields", "op_names", "parse_op",
           "parse_shape", "schema_literal", "table_files"]


def table_files(csrc: Path = CSRC) -> list[Path]:
    return sorted(csrc.glob(TABLE_GLOB))


def load_table(csrc: Path = CSRC) -> tuple[OpDef, ...]:
    """Every op, in file order (families sorted by folder name). Cached: the table is
    read once per process."""
    return _load_table(Path(csrc).resolve())


@functools.cache
def _load_table(csrc: Path) -> tuple[OpDef, ...]:
    ops: list[OpDef] = []
    seen: dict[str, Path] = {}
    for path in table_files(csrc):
        for op in load_file(path):
            if op.name in seen:
                raise OpTableError(f"{rel(path)}: op {op.name!r} is already declared in "
                                   f"{rel(seen[op.name])}")
            seen[op.name] = path
            ops.append(op)
    return tuple(ops)


def op_names(csrc: Path = CSRC) -> tuple[str, ...]:
    return tuple(op.name for op in load_table(csrc))
