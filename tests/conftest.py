"""Shared test set-up: GPU tests are skipped where torch sees no CUDA device (CI)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def no_kernel_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to build or load the CUDA kernel library fails the test: the CPU tests of
    kernels_ext must refuse bad input, and answer what they answer, without it."""
    import torch

    from kernels_ext import _build

    def refuse(*args, **kwargs):
        raise AssertionError("kernels_ext tried to build or load the CUDA library")

    monkeypatch.setattr(_build, "build", refuse)
    monkeypatch.setattr(_build, "_compile", refuse)
    monkeypatch.setattr(torch.ops, "load_library", refuse)
