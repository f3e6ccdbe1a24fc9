"""`python -m kernels_ext.build --out DIR`: ahead-of-time build; prints the .so path.

The package also exposes a function `kernels_ext.build(...)`. Importing this module
would normally replace that attribute with the module, so the module is made
callable and forwards to the function: both spellings keep working.
"""

from __future__ import annotations

import sys
import types

from kernels_ext import _build


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return _build.build(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

if __name__ == "__main__":
    raise SystemExit(_build.main())
