"""What `nvcc -Xptxas -v` says of each kernel: registers, static shared memory, stack and spills, per
architecture, read from the compiler's log and written out as Markdown tables.

These are compile-time facts: any machine with the same nvcc gives the same numbers, GPU or not.
`python -m kernels_ext.compile_check --ptxas-report DIR` writes them for every kernel source.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Iterable, Sequence

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\w+)'")
PROPERTIES = re.compile(r"Function properties for (\S+)")
STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers")
SMEM = re.compile(r"(\d+) bytes smem")
SOURCE = "== "      # a report's line naming the source file whose log follows
COMPILER = "# "     # its first line: the nvcc release that made it


@dataclass(frozen=True)
class KernelResources:
    source: str          # the .cu file, relative to csrc/
    arch: str            # sm_80, sm_90a
    kernel: str          # mangled name
    registers: int
    smem: int            # static shared memory; a dynamic ring is sized at launch and not counted here
    stack: int
    spill_stores: int
    spill_loads: int

    @property
    def spills(self) -> bool:
        return bool(self.spill_stores or self.spill_loads)


def parse(log: str, source: str) -> list[KernelResources]:
    """The entry kernels of one file's ptxas log, in the order ptxas compiled them. A device function
    compiled on its own (noinline) has properties but no entry line: it is not a kernel row."""
    found: list[KernelResources] = []
    entry: tuple[str, str] | None = None
    props_of = ""
    stack = (0, 0, 0)
    for line in log.splitlines():
        if m := ENTRY.search(line):
            entry, stack = (m.group(1), m.group(2)), (0, 0, 0)
        elif m := PROPERTIES.search(line):
            props_of = m.group(1)
        elif (m := STACK.search(line)) and entry and props_of == entry[0]:
            stack = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := USED.search(line)) and entry:
            smem = SMEM.search(line)
            found.append(KernelResources(source, entry[1], entry[0], int(m.group(1)),
                                         int(smem.group(1)) if smem else 0, *stack))
            entry = None
    return found


def parse_report(text: str) -> list[KernelResources]:
    """A report log: `== <source>` lines, each followed by that file's ptxas log (what comes before the
    first of them, such as the compiler line, names no kernel)."""
    rows: list[KernelResources] = []
    for section in ("\n" + text).split("\n" + SOURCE)[1:]:
        head, _, body = section.partition("\n")
        rows += parse(body, head.strip())
    return rows


def report_compiler(text: str) -> str:
    """The compiler a report log names on its first line ("" where it names none)."""
    first = text.split("\n", 1)[0]
    return first.removeprefix(COMPILER).strip() if first.startswith(COMPILER) else ""


def report_log(logs: Iterable[tuple[str, str]], compiler: str = "") -> str:
    """(source, ptxas log) pairs as one report log, after a line naming the compiler. Only the lines a table
    is made from are kept, so two reports of the same code are the same text (compile times would differ)."""
    parts = [COMPILER + compiler] if compiler else []
    for source, log in logs:
        kept = [ln for ln in log.splitlines()
                if any(pattern.search(ln) for pattern in (ENTRY, PROPERTIES, STACK, USED))]
        parts.append("\n".join([SOURCE + source, *kept]))
    return "\n".join(parts) + "\n"


def differences(old: Sequence[KernelResources], new: Sequence[KernelResources]) -> list[str]:
    """What a fresh build says that a report does not: kernels added, gone, or with other resources.
    Kernels are matched by their demangled names: a mangled name of a kernel in an anonymous namespace
    carries hashes of the path it was compiled at, and a clone elsewhere gets other ones."""
    before, after = _by_name(old), _by_name(new)
    out = []
    for key in sorted(before.keys() | after.keys()):
        a, b = before.get(key), after.get(key)
        where = f"{key[0]} {key[1]} {short_name(key[2], 90)}"
        if a is None:
            out.append(f"new kernel: {where}")
        elif b is None:
            out.append(f"kernel gone: {where}")
        elif a != b:
            out.append(f"changed: {where}: {_resources(a)} -> {_resources(b)}")
    return out


def _by_name(rows: Sequence[KernelResources]) -> dict[tuple[str, str, str], tuple[int, int, int, int, int]]:
    names = demangle([r.kernel for r in rows])
    return {(r.source, r.arch, name): (r.registers, r.smem, r.stack, r.spill_stores, r.spill_loads)
            for r, name in zip(rows, names)}


def _resources(r: tuple[int, int, int, int, int]) -> str:
    registers, smem, stack, stores, loads = r
    return f"{registers} registers, {smem} B smem, {stack} B stack, spills {stores}/{loads} B"


def demangle(names: Sequence[str]) -> list[str]:
    filt = shutil.which("c++filt")
    if filt is None or not names:
        return list(names)
    out = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return out if len(out) == len(names) else list(names)


def short_name(name: str, limit: int = 140) -> str:
    """A demangled name without namespaces the whole library shares and without its parameter list."""
    name = name.replace("sk::", "").replace("(anonymous namespace)::", "")
    name = re.sub(r"\(.*\)$", "", name)
    return name if len(name) <= limit else name[:limit - 3] + "..."


def source_table(rows: Sequence[KernelResources]) -> list[str]:
    """One Markdown row per source file: how many kernels, the worst registers, shared memory, stack."""
    lines = ["| source | kernels | max registers | max static smem (B) | max stack (B) | kernels that spill |",
             "| --- | --- | --- | --- | --- | --- |"]
    by_source: dict[str, list[KernelResources]] = {}
    for r in rows:
        by_source.setdefault(r.source, []).append(r)
    for source, rs in by_source.items():
        lines.append(f"| {source} | {len(rs)} | {max(r.registers for r in rs)} | {max(r.smem for r in rs)} | "
                     f"{max(r.stack for r in rs)} | {sum(r.spills for r in rs)} |")
    return lines


def kernel_table(rows: Sequence[KernelResources]) -> list[str]:
    """One Markdown row per kernel."""
    lines = ["| source | kernel | registers | static smem (B) | stack (B) | spill stores/loads (B) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r, name in zip(rows, demangle([r.kernel for r in rows])):
        shown = short_name(name).replace("|", "\\|")
        lines.append(f"| {r.source} | `{shown}` | {r.registers} | {r.smem} | {r.stack} | "
                     f"{r.spill_stores}/{r.spill_loads} |")
    return lines


def markdown(rows: Sequence[KernelResources], arch: str, header: Sequence[str]) -> str:
    """The report for one architecture: what made it, the table by source, then every kernel."""
    picked = [r for r in rows if r.arch == arch]
    body = [f"# ptxas resources, {arch}", "", *header, "",
            f"{len(picked)} kernels in {len({r.source for r in picked})} sources; "
            f"{sum(r.spills for r in picked)} spill.", "",
            "## By source", "", *source_table(picked), "", "## By kernel", "", *kernel_table(picked)]
    return "\n".join(body) + "\n"
