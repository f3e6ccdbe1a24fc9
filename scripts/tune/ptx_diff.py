"""Compare the PTX of every kernel family between a git revision and the working tree.

    python scripts/tune/ptx_diff.py                 # HEAD vs working tree, sm_90a
    python scripts/tune/ptx_diff.py --rev HEAD~3 --arch compute_80

For refactors that must not change generated code (moving helpers between headers,
renaming host functions). Each family's .cu is compiled to PTX on both sides with the
flags the extension build uses; the texts are compared after removing what a refactor
changes without changing code: comments, line info, the hash nvcc puts in the mangled
names of anonymous namespaces (it depends on the file's text), and register numbering
(renumbered per kernel in order of first use). Kernels are compared by name, so a
reordering of instantiations is not a difference. Exits 1 on any difference.

The revision is read with `git archive` (no checkout): the working tree is untouched.
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CSRC = "kernels_ext/csrc"
FLAGS = ("-std=c++17", "-O3", "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
         "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
         "--expt-relaxed-constexpr")
_ANON = re.compile(r"_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]{8}")
_REG = re.compile(r"%(r|rd|rs|f|fd|p|h|hh|b)(\d+)\b")
_ENTRY = re.compile(r"^(?:\.visible |\.weak )?\.(?:entry|func) ")


def extract_revision(rev: str, dest: Path) -> Path:
    tar = subprocess.run(["git", "-C", str(REPO), "archive", rev, CSRC], capture_output=True,
                         check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(dest, filter="data")
    return dest / CSRC


def families(csrc: Path) -> dict[str, Path]:
    """One .cu per family folder name (bindings and folders without one are skipped)."""
    out = {}
    for cu in sorted(csrc.glob("*/*.cu")):
        out[f"{cu.parent.name}/{cu.name}"] = cu
    return out


def compile_ptx(cu: Path, arch: str, out: Path) -> str:
    cmd = ["nvcc", *FLAGS, f"-gencode=arch={arch},code={arch}", "-ptx", str(cu), "-o", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{cu}: nvcc failed\n{proc.stderr[-3000:]}")
    return out.read_text()


def _renumber(lines: list[str]) -> list[str]:
    seen: dict[str, str] = {}

    def rename(m: re.Match[str]) -> str:
        key = m.group(0)
        if key not in seen:
            seen[key] = f"%{m.group(1)}#{sum(1 for k in seen if k.startswith('%' + m.group(1)))}"
        return seen[key]

    return [_REG.sub(rename, ln) for ln in lines]


def kernels(ptx: str) -> dict[str, list[str]]:
    """Normalised body of each .entry / .func, keyed by its (normalised) first line."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in ptx.splitlines():
        line = _ANON.sub("_GLOBAL__N__anon", raw.split("//")[0].rstrip())
        if not line.strip() or line.lstrip().startswith((".loc", ".file")):
            continue
        if _ENTRY.match(line):
            current = []
            out[line] = current
        if current is not None:
            current.append(line)
    return {name: _renumber(body) for name, body in out.items()}


def compare(name: str, before: str, after: str) -> list[str]:
    kb, ka = kernels(before), kernels(after)
    problems = [f"{name}: kernel only before: {k}" for k in sorted(kb.keys() - ka.keys())]
    problems += [f"{name}: kernel only after: {k}" for k in sorted(ka.keys() - kb.keys())]
    for k in sorted(kb.keys() & ka.keys()):
        if kb[k] != ka[k]:
            diff = next(i for i, (x, y) in enumerate(zip(kb[k] + [""], ka[k] + [""], strict=False))
                        if x != y)
            problems.append(f"{name}: {k} differs at line {diff}: {kb[k][diff:diff + 1]} vs "
                            f"{ka[k][diff:diff + 1]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/tune/ptx_diff.py")
    parser.add_argument("--rev", default="HEAD", help="git revision to compare against")
    parser.add_argument("--arch", default="compute_90a", help="virtual architecture")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ptx-diff-") as tmp:
        root = Path(tmp)
        old = families(extract_revision(args.rev, root / "before"))
        new = families(REPO / CSRC)
        names = sorted(old.keys() & new.keys())
        jobs = [(n, side, path) for n in names for side, path in (("b", old[n]), ("a", new[n]))]

        def run(job: tuple[str, str, Path]) -> str:
            n, side, path = job
            return compile_ptx(path, args.arch, root / f"{side}-{n.replace('/', '-')}.ptx")

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            texts = list(pool.map(run, jobs))
        problems: list[str] = []
        for i, n in enumerate(names):
            before, after = texts[2 * i], texts[2 * i + 1]
            found = compare(n, before, after)
            problems += found
            print(f"{'DIFF' if found else 'same'} {n} ({len(kernels(after))} kernels, {args.arch})")
        for n in sorted(old.keys() ^ new.keys()):
            print(f"skip {n} (only {'before' if n in old else 'after'})")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
