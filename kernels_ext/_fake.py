"""Registers the fake (meta) implementation of every solbench_kernels op, for
torch.compile and torch.library.opcheck (made from the op table: fakes.py). The C++ library
names this module (m.set_python_module), so torch imports it on demand even when the .so
was loaded on its own.

Import it only after the library is loaded (or the schemas are defined): registering a
fake needs the op to exist."""

from __future__ import annotations

import torch

from kernels_ext.fakes import make_fake
from kernels_ext.optable import NAMESPACE, load_table

# Only the ops the loaded library defines: a library built from another table is reported
# by kernels_ext.ensure_loaded, not by a failed import here.
for _op in load_table():
    if hasattr(getattr(torch.ops, NAMESPACE), _op.name):
        torch.library.register_fake(f"{NAMESPACE}::{_op.name}")(make_fake(_op))
