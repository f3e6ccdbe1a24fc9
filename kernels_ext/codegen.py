"""Writes the C++ registration file of the library from the op table: the TORCH_LIBRARY
schemas, one checked wrapper per op (the table's checks, then the call), and the CUDA (and
CPU) registrations. The JIT/AOT build writes it into the build directory (never into the
source tree: adding an op must not touch a generated file); compile_check writes it into
its scratch directory.

Per `impl` the wrapper calls:
  map     cudaError_t sk::ops::<op>(const sk::MapIO<NIN>&, <scalars>, cudaStream_t)
  rows    cudaError_t sk::ops::<op>(const sk::RowsIO<NIN, NOUT>&, <scalars>, cudaStream_t)
  custom  sk::impl::<op>, or the function the entry names ({custom: ns::fn}), called
          with the schema's arguments and returning its outputs
The launchers are defined in the family's .cu (SK_MAP_OP for a map op); custom impls in
csrc/bindings/*.cpp. Launcher scalars: float -> float, int -> int64_t, bool -> bool,
str -> int (the index of the value in the entry's choices).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from kernels_ext import checks
from kernels_ext import expr as ex
from kernels_ext.optable import NAMESPACE, OpDef, Output, ScalarArg, TensorArg, load_table

GENERATED_NAME = "solbench_ops.cpp"

_CPP_PARAM = {
    "Tensor": "const at::Tensor&",
    "Tensor?": "const std::optional<at::Tensor>&",
    "float": "double",
    "float?": "std::optional<double>",
    "int": "int64_t",
    "int?": "std::optional<int64_t>",
    "bool": "bool",
    "bool?": "std::optional<bool>",
    "str": "c10::string_view",
    "str?": "std::optional<c10::string_view>",
    "ScalarType": "at::ScalarType",
    "ScalarType?": "std::optional<at::ScalarType>",
}
_LAUNCHER_SCALAR = {"float": "float", "int": "int64_t", "bool": "bool", "str": "int"}


def return_type(op: OpDef) -> str:
    n = len(op.outputs)
    if n == 0:
        return "void"
    if n == 1:
        return "at::Tensor"
    return "std::tuple<" + ", ".join(["at::Tensor"] * n) + ">"


def params(op: OpDef) -> str:
    return ", ".join(f"{_CPP_PARAM[a.schema_type]} {a.name}" for a in op.args)


def launcher_declaration(op: OpDef) -> str:
    """The C++ declaration of a map / rows op's launcher (what its .cu must define)."""
    io = _io_type(op)
    scalars = "".join(f", {_LAUNCHER_SCALAR[s.type]} {s.name}" for s in op.scalars)
    return f"cudaError_t {op.name}(const {io}& io{scalars}, cudaStream_t stream);"


def impl_declaration(op: OpDef) -> str:
    """The declaration of a custom op's hand-written function, in its namespace."""
    namespace, _, function = op.function.rpartition("::")
    return (f"namespace {namespace} {{\n{return_type(op)} {function}({params(op)});\n}}  "
            f"// namespace {namespace}")


def _io_type(op: OpDef) -> str:
    if op.impl == "map":
        return f"sk::MapIO<{len(op.tensors)}>"
    return f"sk::RowsIO<{len(op.tensors)}, {len(op.outputs)}>"


def _launcher_scalar(s: ScalarArg) -> str:
    if s.type == "float":
        return f"static_cast<float>({s.name})"
    if s.type == "str":
        listed = ", ".join(f'"{c}"' for c in s.choices or ())
        return f"sk::bind::choice_index({s.name}, {{{listed}}})"
    return s.name


def _launch_lambda(op: OpDef) -> str:
    scalars = "".join(f", {_launcher_scalar(s)}" for s in op.scalars)
    return (f"[&](const {_io_type(op)}& io, cudaStream_t stream) {{\n"
            f"      return sk::ops::{op.name}(io{scalars}, stream);\n    }}")


def _tensor_pointer(t: TensorArg) -> str:
    return f"{t.name}.has_value() ? &*{t.name} : nullptr" if t.optional else f"&{t.name}"


def _allocate(op: OpDef, o: Output) -> list[str]:
    var = f"out_{o.name}"
    ref = op.reference.name
    if o.like is not None:
        return [f"at::Tensor {var} = at::empty({o.like}.sizes(), {o.like}.options());"]
    assert o.shape is not None and o.dtype is not None
    names = checks.cpp_names(op)
    lines = [f"c10::DimVector shape_{o.name};"]
    for d in o.shape.dims:
        if d.kind == "variadic":
            v = checks.cpp_dims(d.name)
            lines.append(f"shape_{o.name}.append({v}.begin(), {v}.end());")
        else:
            assert d.expr is not None
            lines.append(f"shape_{o.name}.push_back({ex.to_cpp(d.expr, names)});")
    if o.dtype in {t.name for t in op.tensors}:
        dtype = f"{o.dtype}.scalar_type()"
    elif o.dtype in {s.name for s in op.scalars}:
        dtype = o.dtype  # a ScalarType argument
    else:
        dtype = checks.DTYPE_INFO[o.dtype][1]
    lines.append(f"at::Tensor {var} = at::empty(shape_{o.name}, {ref}.options().dtype({dtype}));")
    return lines


def _returned(op: OpDef) -> str:
    outs = [f"out_{o.name}" for o in op.outputs]
    if len(outs) == 1:
        return f"return {outs[0]};"
    return "return {" + ", ".join(outs) + "};"


def _body(op: OpDef) -> list[str]:
    ref = op.reference.name
    lines = [f'static constexpr const char* kOp = "{op.name}";']
    lines += checks.cpp_checks(op)
    lines.append(f"const c10::cuda::CUDAGuard guard({ref}.device());")
    tensors = ", ".join(_tensor_pointer(t) for t in op.tensors)
    if op.impl == "custom":
        call = f"{op.function}({', '.join(a.name for a in op.args)})"
        lines.append(f"{call};" if not op.outputs else f"return {call};")
    elif op.impl == "map":
        lines.append(f"return sk::bind::run_map<{len(op.tensors)}>(\n    kOp, {{{tensors}}},\n"
                     f"    {_launch_lambda(op)});")
    else:
        for o in op.outputs:
            lines += _allocate(op, o)
        outs = ", ".join(f"&out_{o.name}" for o in op.outputs)
        lines.append(f"sk::bind::run_rows<{len(op.tensors)}, {len(op.outputs)}>(\n"
                     f"    kOp, {{{tensors}}}, {{{outs}}},\n    {_launch_lambda(op)});")
        lines.append(_returned(op))
    return lines


def _wrapper(op: OpDef) -> str:
    rel = op.source.relative_to(op.source.parents[2]).as_posix()
    body = "\n".join("  " + ln for ln in "\n".join(_body(op)).splitlines())
    return (f"// {op.schema()}\n// declared in {rel} (impl: {op.impl})\n"
            f"{return_type(op)} {op.name}({params(op)}) {{\n{body}\n}}\n")


_HEADER = """\
// Generated by kernels_ext/codegen.py from the op table (kernels_ext/csrc/*/ops.yaml).
// Do not edit: change the table (README.md, "The op table"). The build writes this file
// into its build directory; `python -m kernels_ext.codegen` prints it.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/DimVector.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

#include "bindings/binding_utils.h"
#include "bindings/map_binding.h"
#include "bindings/rows_binding.h"
#include "common/op_io.h"
"""


def generate(ops: Sequence[OpDef]) -> str:
    """The whole registration file."""
    launchers = [op for op in ops if op.impl in ("map", "rows")]
    customs = [op for op in ops if op.impl == "custom"]
    out = [_HEADER]
    out.append("// Launchers of the map and rows ops, defined in the families' .cu files.")
    out.append("namespace sk::ops {")
    out += [launcher_declaration(op) for op in launchers]
    out.append("}  // namespace sk::ops\n")
    out.append("// Hand-written implementations (csrc/bindings/*.cpp), called after the checks.")
    out += [impl_declaration(op) for op in customs]
    out.append("")
    out.append("namespace sk::generated {\nnamespace {\n")
    out += [_wrapper(op) for op in ops]
    out.append("}  // namespace\n}  // namespace sk::generated\n")
    out.append(f"TORCH_LIBRARY({NAMESPACE}, m) {{")
    out.append("  // Fake (meta) impls for torch.compile, from the same table; torch imports the\n"
               "  // module on demand when the library is loaded on its own.")
    out.append('  m.set_python_module("kernels_ext._fake");')
    out += [f'  m.def("{op.schema()}");' for op in ops]
    out.append("}\n")
    # CPU too: a direct caller with CPU tensors gets the table's device error, not the
    # dispatcher's "could not run with arguments from the CPU backend".
    for key in ("CUDA", "CPU"):
        out.append(f"TORCH_LIBRARY_IMPL({NAMESPACE}, {key}, m) {{")
        out += [f'  m.impl("{op.name}", &sk::generated::{op.name});' for op in ops]
        out.append("}\n")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """python -m kernels_ext.codegen [--out FILE]: print (or write) the generated file."""
    parser = argparse.ArgumentParser(prog="python -m kernels_ext.codegen")
    parser.add_argument("--out", type=Path, help="write here instead of stdout")
    args = parser.parse_args(argv)
    text = generate(load_table())
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
