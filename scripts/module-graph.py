#!/usr/bin/env python3
"""The module import graph of a crate: its circles and its upward arrows.

    scripts/module-graph.py [CRATE_SRC] [--under PREFIX] [--edges]

CRATE_SRC: a crate's src/ folder (default analyzer/src). A node is a file
(`a/mod.rs` and `a.rs` are module `a`; `lib.rs` is the root). An arrow A -> B is a
path that A names in its code, outside `#[cfg(test)]` items: every `use` item (brace
trees expanded) and every inline path that starts with `crate::`, `super::` or
`self::`, resolved to the longest module it names. Calls of a child module by bare
name (`steps::detect` in report/mod.rs) are not arrows: they are the module tree.

Reported:
* circles: the strongly connected sets of two modules or more (each one circle), with
  the arrows that close them;
* upward arrows: a module naming one of its ancestors (report/text -> report), which
  makes the parent hold what its children share;
* arrows into a folder from outside it that reach past its mod.rs (the internals it
  shows): with --under export, what export/ imports of report/.

--under PREFIX limits the counts to modules under PREFIX (e.g. report); --edges lists
every arrow.
"""
import os
import re
import sys

args = [a for a in sys.argv[1:] if not a.startswith("--")]
src = args[0] if args else "analyzer/src"
under = None
if "--under" in sys.argv:
    under = sys.argv[sys.argv.index("--under") + 1]
    if under in args:
        args.remove(under)
        src = args[0] if args else "analyzer/src"
show_edges = "--edges" in sys.argv


def module_of(path):
    rel = os.path.relpath(path, src)[:-3]
    parts = rel.split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def strip(text):
    """Source without comments, strings, char literals and #[cfg(test)] items."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == '"' or (c == "r" and re.match(r'r#*"', text[i:i + 4]) and not text[i - 1:i].isalnum()):
            if c == "r":
                m = re.match(r'r(#*)"', text[i:])
                end = '"' + m.group(1)
                j = text.find(end, i + len(m.group(0)))
                i = n if j < 0 else j + len(end)
            else:
                j = i + 1
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                i = j + 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:])
            i += len(m.group(0)) if m else 1
        else:
            out.append(c)
            i += 1
    s = "".join(out)
    # Drop #[cfg(test)] items: the attribute, then one item (to its matching brace or ;).
    while True:
        k = s.find("#[cfg(test)]")
        if k < 0:
            return s
        j = k + len("#[cfg(test)]")
        depth = 0
        while j < len(s):
            if s[j] == "{":
                depth += 1
            elif s[j] == "}":
                depth -= 1
                if depth == 0:
                    j += 1
                    break
            elif s[j] == ";" and depth == 0:
                j += 1
                break
            j += 1
        s = s[:k] + s[j:]


def inline_modules(s):
    """In an inline `mod m { ... }` (one level), `super::` is the file's own module."""
    blocks = []
    for m in re.finditer(r"\bmod\s+\w+\s*\{", s):
        j, depth = m.end() - 1, 0
        while j < len(s):
            depth += s[j] == "{"
            depth -= s[j] == "}"
            if depth == 0:
                break
            j += 1
        blocks.append((m.end(), j))
    for a, b in reversed(blocks):
        s = s[:a] + re.sub(r"\bsuper::", "self::", s[a:b]) + s[b:]
    return s


def expand(tree):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e]."""
    tree = re.sub(r"\s+", "", tree)
    k = tree.find("{")
    if k < 0:
        return [tree]
    prefix = tree[:k]
    inner = tree[k + 1:tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    if cur:
        parts.append(cur)
    out = []
    for p in parts:
        for e in expand(p):
            out.append(prefix + e if e != "self" else prefix.rstrip(":"))
    return out


def resolve(me, path, modules, is_dir):
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, segs = (), segs[1:]
    elif segs[0] in ("super", "self"):
        # In a.rs or a/mod.rs (module a), self is a and super its parent.
        base = me
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    else:
        return None
    best = None
    for k in range(len(segs), -1, -1):
        cand = base + tuple(segs[:k])
        if cand in modules:
            best = cand
            break
    return best


def main():
    modules = {}
    for d, _, files in os.walk(src):
        for f in files:
            if f.endswith(".rs"):
                p = os.path.join(d, f)
                modules[module_of(p)] = p
    edges = {}
    for m, p in modules.items():
        s = inline_modules(strip(open(p).read()))
        names = set()
        for u in re.finditer(r"\buse\s+([^;]+);", s):
            tree = re.sub(r"\s+as\s+\w+", "", u.group(1))
            names.update(expand(tree))
        for x in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", s):
            # `crate::a::{b, c}` names a::b and a::c (expanded above), not a.
            if not s.startswith("::{", x.end()):
                names.add(x.group(1))
        out = set()
        for n in names:
            r = resolve(m, n, modules, None)
            if r is not None and r != m and r != ():
                out.add(r)
        edges[m] = out

    def name(m):
        return "/".join(m) if m else "(root)"

    def inside(m):
        return under is None or name(m) == under or name(m).startswith(under + "/")

    # Strongly connected components (Tarjan).
    index, low, stack, on, sccs = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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
            sccs.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    circles = [sorted(c) for c in sccs if len(c) > 1 and any(inside(m) for m in c)]
    upward = sorted(
        (a, b) for a, bs in edges.items() for b in bs if inside(a) and len(b) < len(a) and a[:len(b)] == b
    )
    n_edges = sum(1 for a, bs in edges.items() for b in bs if inside(a))
    print(f"{src}{' under ' + under if under else ''}: {sum(1 for m in modules if inside(m))} modules, "
          f"{n_edges} arrows, {len(circles)} circles, {len(upward)} upward arrows")
    for c in circles:
        cs = set(c)
        closing = sorted(f"{name(a)} -> {name(b)}" for a in c for b in edges[a] if b in cs)
        print(f"  circle: {', '.join(name(m) for m in c)}")
        for e in closing:
            print(f"    {e}")
    for a, b in upward:
        print(f"  upward: {name(a)} -> {name(b)}")
    if under:
        # What modules outside PREFIX import from inside it, past its mod.rs.
        deep = sorted(
            (a, b) for a, bs in edges.items() for b in bs
            if not inside(a) and inside(b) and name(b) != under
        )
        print(f"  arrows from outside {under} into its internals: {len(deep)}")
        for a, b in deep:
            print(f"    {name(a)} -> {name(b)}")
    if show_edges:
        for a in sorted(edges):
            for b in sorted(edges[a]):
                if inside(a):
                    print(f"  {name(a)} -> {name(b)}")


main()
