"""matmul_precision: the one TF32 switch (on for tfloat32 only, both of torch's flags, always restored)."""

from __future__ import annotations

import pytest
import torch

from solbench.dtypes import matmul_precision
from solbench.errors import UserError


def _flags() -> tuple[bool, bool]:
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


@pytest.fixture(autouse=True)
def keep_flags():
    saved = _flags()
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("start", [(False, False), (True, True), (False, True)])
def test_tf32_is_on_only_for_tfloat32_and_restored(start):
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = start
    with matmul_precision("tfloat32"):
        assert _flags() == (True, True)
    assert _flags() == start
    for name in ("float32", "bfloat16", "fp32"):
        with matmul_precision(name):
            assert _flags() == (False, False), name
        assert _flags() == start
    with matmul_precision("tf32"):              # aliases resolve like everywhere else
        assert _flags() == (True, True)


def test_flags_are_restored_after_an_exception():
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = (False, True)
    with pytest.raises(RuntimeError, match="boom"):
        with matmul_precision("tfloat32"):
            raise RuntimeError("boom")
    assert _flags() == (False, True)


def test_unknown_dtype_names_itself():
    with pytest.raises(UserError, match="unknown dtype 'float12'"):
        with matmul_precision("float12"):
            pass
