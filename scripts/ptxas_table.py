"""A report log (`== <source>` lines, each followed by nvcc -Xptxas -v's output for it) -> a Markdown table,
one row per kernel. The committed logs under results/h200/issue1[34]/ were made this way; a fresh report
for every kernel comes from `python -m kernels_ext.compile_check --ptxas-report DIR`.

    python scripts/ptxas_table.py results/h200/issue13/ptxas_sm90a.txt
"""
from __future__ import annotations

import sys
from pathlib import Path

from kernels_ext import ptxas


def main(path: str) -> int:
    print("\n".join(ptxas.kernel_table(ptxas.parse_report(Path(path).read_text()))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
