#!/usr/bin/env python3
"""Import circles in src/: between files and between top-level modules.

    python3 scripts/import_cycles.py          # prints each circle; exits 1 if there is one

Every path a source file names, in a `use` or inline (`crate::a::b::f()`, `super::x`), is
resolved to the file that defines it: the deepest `src/a/b.rs` or `src/a/b/mod.rs` along the path.
A file's own `#[cfg(test)]` tests (a `tests.rs` beside it, or a test module inside it) count as
part of it, as they are compiled with it. Two graphs are checked, each for strongly connected
components of more than one node:

- files: `a.rs` imports `b.rs`; a module using its own descendants (declaring them, re-exporting
  what they define) is no import, since a parent owns its children;
- top-level modules: `src/scenario/**` imports `src/workload/**`.

Comments and string literals are skipped, so a path in a doc comment is no import. The rules
are docs/design.md's ("Dependency rules").
"""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def module_of(path):
    """src/a/b.rs and src/a/b/mod.rs -> ['a', 'b']; src/lib.rs -> []."""
    rel = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    if rel[-1] == "mod" or rel == ["lib"] or rel == ["main"]:
        rel = rel[:-1]
    return rel


def strip_comments_and_strings(text):
    out = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = '"' + hashes
            j = text.find(end, i + len(hashes) + 2)
            i = n if j < 0 else j + len(end)
            out.append('""')
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4] + "  "):
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            i += len(m.group(0)) if m else 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def inline_modules(text, inner=()):
    """(module path inside the file, text) for the file's top level and every inline `mod x { }`,
    each text without its own inline modules: `super::` inside `mod tests` is the file."""
    out = []
    top = []
    i = 0
    for m in re.finditer(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{", text):
        if m.start() < i:
            continue
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += text[j] == "{"
            depth -= text[j] == "}"
            j += 1
        top.append(text[i:m.start()])
        out.extend(inline_modules(text[m.end():j - 1], inner + (m.group(1),)))
        i = j
    top.append(text[i:])
    return [(inner, "".join(top))] + out


def use_paths(text):
    """Every path named by `use` trees (expanded) and inline `crate::`/`super::`/`self::` paths."""
    paths = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        paths.extend(expand(m.group(1).strip()))
    for m in re.finditer(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
        paths.append(m.group(1).split("::"))
    return paths


def expand(tree):
    """`a::{b, c::{d, e}}` -> [[a, b], [a, c, d], [a, c, e]]."""
    tree = re.sub(r"\s+", "", tree)
    if "{" not in tree:
        return [[p for p in tree.split(" as ")[0].split("::") if p]]
    head, rest = tree.split("{", 1)
    body = rest[:rest.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    if cur:
        parts.append(cur)
    prefix = [p for p in head.split("::") if p]
    out = []
    for part in parts:
        for sub in expand(part):
            out.append(prefix + ([] if sub == ["self"] else sub))
    return out


def main():
    files = {}
    for dirpath, _, names in os.walk(ROOT):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(dirpath, name)
                files[tuple(module_of(path))] = path
    # A `tests.rs` (or `*_tests.rs`) beside a file is that file's test module: one node with it.
    def node_of(mod):
        if mod and (mod[-1] == "tests" or mod[-1].endswith("_tests")):
            parent = mod[:-1] if mod[-1] == "tests" else mod[:-1] + [mod[-1][: -len("_tests")]]
            if tuple(parent) in files:
                return tuple(parent)
            return tuple(mod[:-1])
        return tuple(mod)

    def resolve(mod, path):
        if not path:
            return None
        if path[0] == "crate":
            base, rest = [], path[1:]
        elif path[0] in ("super", "self"):
            base = list(mod)
            rest = list(path)
            while rest and rest[0] in ("super", "self"):
                if rest[0] == "super":
                    base = base[:-1]
                rest = rest[1:]
        else:
            return None  # std, another crate
        best = None
        for k in range(len(rest) + 1):
            if tuple(base + rest[:k]) in files:
                best = tuple(base + rest[:k])
        return best

    file_edges = {}
    module_edges = {}
    for mod, path in files.items():
        text = strip_comments_and_strings(open(path, encoding="utf-8").read())
        me = node_of(list(mod))
        for inner, part in inline_modules(text):
            for line_path in use_paths(part):
                target = resolve(list(mod) + list(inner), line_path)
                if target is None:
                    continue
                target = node_of(list(target))
                if target == me:
                    continue
                # A module (its file, or its tests) using its own descendants is no import: a parent
                # owns its children, declares them and re-exports what they define.
                if target[: len(me)] == me:
                    continue
                file_edges.setdefault(me, set()).add(target)
                if me and target and me[0] != target[0]:
                    module_edges.setdefault(me[0], set()).add(target[0])

    circles = []
    for name, edges in (("files", file_edges), ("modules", module_edges)):
        for scc in tarjan(edges):
            if len(scc) > 1:
                circles.append((name, sorted("/".join(n) or "lib" for n in scc) if name == "files" else sorted(scc)))
    for kind, members in circles:
        print(f"import circle between {kind}: {' <-> '.join(members)}")
    print(f"{len(circles)} import circle(s)")
    return 1 if circles else 0


def tarjan(edges):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    nodes = set(edges) | {t for ts in edges.values() for t in ts}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            out.append(scc)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


if __name__ == "__main__":
    sys.exit(main())
