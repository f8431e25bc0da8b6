"""The package's shape: no import cycles, layers that only import downward (the order is written once,
in docs/architecture.md), a loop that names no method, and environment names only in their rooms."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PKG = ROOT / "seedrl"
ARCH = ROOT / "docs" / "architecture.md"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PKG.rglob("*.py")}


def _resolve(name: str) -> str | None:
    """The seedrl module an import names (``from a.b import c``: ``a.b.c`` if that is a module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(path: Path) -> set[str]:
    """Every seedrl module ``path`` imports, at module level or inside functions."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("seedrl"):
            for alias in node.names:
                out.add(_resolve(f"{node.module}.{alias.name}"))
        elif isinstance(node, ast.Import):
            out |= {_resolve(a.name) for a in node.names if a.name.startswith("seedrl")}
    return {m for m in out if m}


GRAPH = {m: imports_of(p) - {m} for m, p in MODULES.items()}


def layers() -> list[tuple[str, list[str]]]:
    """The layer table of docs/architecture.md: ``N. name: pattern, pattern`` lines, lowest first."""
    text = ARCH.read_text()
    block = text[text.index("<!-- layers -->"):text.index("<!-- /layers -->")]
    rows = re.findall(r"^\s*\d+\.\s+\*\*([\w-]+)\*\*:\s*(.+)$", block, re.M)
    assert rows, "no layer table in docs/architecture.md"
    return [(name, re.findall(r"`([^`]+)`", pats)) for name, pats in rows]


def _matches(pattern: str, module: str) -> bool:
    """Segment-wise: ``*`` stands for one segment; a pattern also covers the modules below it."""
    p, m = pattern.split("."), module.split(".")
    return len(p) <= len(m) and all(a in ("*", b) for a, b in zip(p, m))


def layer_of(module: str, table) -> int:
    """The layer whose most specific pattern (most segments) matches the module."""
    best = max(((len(p.split(".")), i) for i, (_, pats) in enumerate(table) for p in pats if _matches(p, module)),
               default=None)
    assert best is not None, f"{module} belongs to no layer of docs/architecture.md"
    return best[1]


def test_every_module_has_a_layer():
    table = layers()
    for m in MODULES:
        layer_of(m, table)


def test_no_import_cycle():
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(GRAPH[m]):
            if state.get(n) == 1:
                cycle = stack[stack.index(n):] + [n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)


def test_no_layer_imports_a_higher_one():
    table = layers()
    bad = [f"{m} ({table[layer_of(m, table)][0]}) imports {n} ({table[layer_of(n, table)][0]})"
           for m, deps in GRAPH.items() for n in deps if layer_of(n, table) > layer_of(m, table)]
    assert not bad, "\n".join(sorted(bad))


def test_the_layer_check_can_fail():
    table = [("low", ["seedrl.a"]), ("high", ["seedrl.b", "seedrl.b.*.x"])]
    assert layer_of("seedrl.a.y", table) == 0 and layer_of("seedrl.b.q.x", table) == 1
    assert layer_of("seedrl.b.q", table) == 1 and not _matches("seedrl.b.*.x", "seedrl.b.q")


# ------------------------------------------------------------------ names stay in their rooms
def _string_constants(path: Path, dict_keys: bool = True) -> set[str]:
    tree = ast.parse(path.read_text())
    keys = {id(k) for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys if k is not None}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and (dict_keys or id(n) not in keys)}


def test_the_loop_names_no_method():
    """No string in the loop is a method's name (what a branch on the method would need; a dict key
    such as the checkpoint's "seed", the run's RNG seed, is not one)."""
    from seedrl.methods import METHODS

    # the loop and the stage modules it calls
    for name in ("trainer", "collect", "scoring", "update", "metrics", "evaluation", "resume"):
        named = sorted(set(METHODS) & _string_constants(PKG / "train" / f"{name}.py", dict_keys=False))
        assert not named, f"train/{name}.py names methods {named}: methods belong in seedrl/methods"


def test_environment_names_live_only_in_their_rooms():
    """No code outside the environments' rooms (``seedrl/envs/<room>/``) and the registry spells an
    environment's name, and no module outside a room imports its modules (configs, tests and docs
    may name them). Inside the rooms words are free: WebShop's own "search" action is not the search
    environment."""
    from seedrl.envs.registry import env_folder, env_names, env_package

    rooms = {name: (env_folder(name), env_package(name)) for name in env_names()}
    registry = PKG / "envs" / "registry.py"
    in_a_room = {f for f, _ in rooms.values()}
    bad = []
    for module, path in MODULES.items():
        if path == registry:
            continue
        consts = set() if in_a_room & set(path.parents) else _string_constants(path)
        for name, (room, pkg) in rooms.items():
            if room in path.parents:
                continue
            if name in consts:
                bad.append(f"{path.relative_to(ROOT)} spells {name!r}")
            if any(d == pkg or d.startswith(pkg + ".") for d in GRAPH[module]):
                bad.append(f"{path.relative_to(ROOT)} imports {pkg}")
    assert not bad, "\n".join(sorted(set(bad)))
