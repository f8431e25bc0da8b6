"""Killed share of the last mutmut run (`make mutants`), with the mutants judged equivalent counted
as killed; exits 1 below the threshold (default 85 %).

Reads the statuses from ``mutmut results --all true`` (run from the repository root, after
``mutmut run``). The equivalent mutants are listed in tests/algos/equivalent_mutants.txt, one a line:

    <mutant name as mutmut prints it> | <the mutated line, stripped> | <reason>

mutmut numbers the mutants of a function in order, so an edit to the function renumbers them: the
mutated line is the check that a name still denotes the mutant that was judged. An entry whose name
no longer exists or whose mutated line differs is reported as stale and fails the run (exit 2), so
that a renumbered name never counts a live mutant as equivalent. ``#`` starts a comment line.

    python tools/mutants.py [--equivalent FILE] [--threshold 0.85] [--mutmut PATH]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# statuses that mean a test failed on the mutant (mutmut: killed; a timeout is an infinite loop the
# tests caught); everything else (survived, no tests, suspicious, skipped, not checked, ...) is a miss
DETECTED = {"killed", "timeout"}


def mutmut_bin(arg: str | None) -> str:
    if arg:
        return arg
    local = Path(sys.executable).parent / "mutmut"
    return str(local) if local.exists() else "mutmut"


def results(mutmut: str) -> dict[str, str]:
    out = subprocess.run([mutmut, "results", "--all", "true"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    status = {}
    for line in out.splitlines():
        m = re.match(r"^\s*(\S+): (.+?)\s*$", line)
        if m:
            status[m.group(1)] = m.group(2)
    return status


def mutated_line(mutmut: str, name: str) -> str | None:
    out = subprocess.run([mutmut, "show", name], cwd=ROOT, capture_output=True, text=True).stdout
    added = [ln[1:].strip() for ln in out.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    return " ".join(added) if added else None


def module_of(name: str) -> str:
    """The module of a mutant: ``seedrl.algos.losses.x_kl_k3__mutmut_1`` (a function) or
    ``seedrl.train.update.xǁUpdaterǁupdate__mutmut_3`` (a method) -> the part before ``.x_`` / ``.xǁ``."""
    return re.split(r"\.x[_ǁ]", name, maxsplit=1)[0]


def read_equivalent(path: Path) -> dict[str, tuple[str, str]]:
    entries = {}
    for no, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        # the mutated line may itself hold " | " (a type union): the name is before the first, the reason
        # after the last
        name, _, rest = line.partition(" | ")
        parts = [name.strip(), *(p.strip() for p in rest.rsplit(" | ", 1))]
        if len(parts) != 3 or not all(parts):
            sys.exit(f"{path}:{no}: expected '<mutant> | <mutated line> | <reason>', got {raw!r}")
        entries[parts[0]] = (parts[1], parts[2])
    return entries


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--equivalent", type=Path, default=ROOT / "tests/algos/equivalent_mutants.txt")
    ap.add_argument("--threshold", type=float, default=0.85)
    ap.add_argument("--mutmut", default=None, help="the mutmut executable (default: next to this python)")
    args = ap.parse_args()
    mutmut = mutmut_bin(args.mutmut)

    status = results(mutmut)
    if not status:
        print("no mutmut results: run `mutmut run` (or `make mutants`) first", file=sys.stderr)
        return 2
    equivalent = read_equivalent(args.equivalent) if args.equivalent.exists() else {}

    stale = []
    for name, (line, _) in equivalent.items():
        if name not in status:
            stale.append(f"{name}: no such mutant")
        elif status[name] in DETECTED:
            stale.append(f"{name}: now {status[name]} (drop it from the list)")
        else:
            got = mutated_line(mutmut, name)
            if got != line:
                stale.append(f"{name}: mutated line is now {got!r}, the list says {line!r}")

    counts = collections.Counter(status.values())
    total = len(status)
    killed = sum(counts[s] for s in DETECTED)
    equiv = [n for n in status if n in equivalent and status[n] not in DETECTED]
    missed = sorted(n for n in status if status[n] not in DETECTED and n not in equivalent)
    share = (killed + len(equiv)) / total
    modules = collections.Counter(module_of(n) for n in status)
    print(f"mutants: {total} ({', '.join(f'{m} {k}' for m, k in sorted(modules.items()))})")
    for m in sorted(modules):
        names = [n for n in status if module_of(n) == m]
        hit = sum(status[n] in DETECTED for n in names)
        eq = sum(n in equivalent and status[n] not in DETECTED for n in names)
        print(f"  {m}: killed {hit}/{len(names)} = {hit / len(names):.1%}; "
              f"{(hit + eq) / len(names):.1%} with {eq} listed equivalent")
    print("statuses: " + ", ".join(f"{s} {k}" for s, k in counts.most_common()))
    print(f"killed share: {killed}/{total} = {killed / total:.1%} by the tests; "
          f"{killed + len(equiv)}/{total} = {share:.1%} counting {len(equiv)} listed equivalent "
          f"({os.path.relpath(args.equivalent, ROOT)}); threshold {args.threshold:.0%}")
    if missed:
        print(f"{len(missed)} mutants not killed and not listed as equivalent (`mutmut show NAME`):")
        for n in missed:
            print(f"  {n}: {status[n]}")
    if stale:
        print(f"{len(stale)} stale entries in {os.path.relpath(args.equivalent, ROOT)}:")
        for s in stale:
            print(f"  {s}")
        return 2
    if share < args.threshold:
        print(f"FAIL: killed share {share:.1%} < {args.threshold:.0%}")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
