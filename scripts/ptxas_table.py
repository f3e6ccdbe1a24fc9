"""`nvcc -Xptxas -v` output -> a Markdown table: one row per kernel (demangled, shortened), its
registers, shared memory (static; the dynamic ring is set at launch), stack and spills.

    python scripts/ptxas_table.py results/h200/issue13/ptxas_sm90a.txt
The input: one `== <source>` line per file, then nvcc's stderr for it (see docs/PERF.md).
"""
from __future__ import annotations

import re
import subprocess
import sys

ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(sm_\w+)'")
STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(?:.*?, (\d+) bytes smem)?")


def demangle(names: list[str]) -> list[str]:
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
        return out.stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return names


def short(name: str) -> str:
    name = name.replace("sk::", "").replace("(anonymous namespace)::", "")
    name = re.sub(r"\(.*\)$", "", name)              # the parameter list
    return name if len(name) <= 140 else name[:137] + "..."


def rows(text: str) -> list[tuple[str, str, str, str, str, str]]:
    out, source, entry, stack = [], "", None, ("0", "0", "0")
    for line in text.splitlines():
        if line.startswith("== "):
            source = line[3:].strip()
        elif m := ENTRY.search(line):
            entry = m.group(1)
        elif m := STACK.search(line):
            stack = m.groups()
        elif (m := USED.search(line)) and entry:
            out.append((source, entry, m.group(1), m.group(2) or "0", stack[0], f"{stack[1]}/{stack[2]}"))
            entry = None
    return out


def main(path: str) -> int:
    found = rows(open(path).read())
    names = demangle([r[1] for r in found])
    print("| source | kernel | registers | static smem (B) | stack (B) | spill stores/loads (B) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (src, _, regs, smem, stack, spill), name in zip(found, names):
        print(f"| {src} | `{short(name)}` | {regs} | {smem} | {stack} | {spill} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
