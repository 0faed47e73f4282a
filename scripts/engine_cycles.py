#!/usr/bin/env python3
"""Import cycles between the engine's top-level modules.

Reads every `crate::MODULE` path in `actors/src` (outside test files and
`#[cfg(test)]` modules), draws an edge from the top-level module a file
belongs to (`actors/src/build/walker.rs` -> `build`, `actors/src/events.rs`
-> `events`) to each top-level module it names, and prints every strongly
connected component of more than one module. Exits 1 when there is one.
"""
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "actors", "src")
PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")


def module_of(rel):
    first = rel.split(os.sep)[0]
    return first[:-3] if first.endswith(".rs") else first


def production_text(text):
    """The code before a `#[cfg(test)]` module (tests may import anything),
    without comments (docs may name any module)."""
    cut = re.search(r"#\[cfg\(test\)\]\s*(#\[path[^\]]*\]\s*)?(pub(\([a-z]+\))?\s+)?mod\s", text)
    code = text[: cut.start()] if cut else text
    return re.sub(r"//[^\n]*", "", code)


def graph():
    edges = defaultdict(set)
    modules = set()
    for dirpath, _, files in os.walk(ROOT):
        for name in files:
            if not name.endswith(".rs") or name.endswith("tests.rs") or name == "lib.rs":
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, ROOT)
            if rel.split(os.sep)[0] in ("testing",):
                continue
            src = module_of(rel)
            modules.add(src)
            with open(path, encoding="utf-8") as f:
                text = production_text(f.read())
            for m in PATH.findall(text):
                if m != src:
                    edges[src].add(m)
    return modules, edges


def cycles(modules, edges):
    """Tarjan's strongly connected components of more than one module."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in modules:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(modules):
        if v not in index:
            visit(v)
    return out


def main():
    modules, edges = graph()
    found = cycles(modules, edges)
    for comp in found:
        print("import cycle between engine modules: " + ", ".join(comp))
        for a in comp:
            inside = sorted(b for b in edges.get(a, ()) if b in comp)
            print(f"  {a} -> {', '.join(inside)}")
    if not found:
        print(f"no import cycle between the engine's {len(modules)} top-level modules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
