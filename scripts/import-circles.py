#!/usr/bin/env python3
"""Fails when files of one crate import each other, directly or through others.

The graph has a node per source file and an edge A -> B when A names an item
of B's module by path: `use crate::..`, `use super::..`, `self::..`, a path
through a child module, or the same paths written inline (`crate::x::f()`).
A re-export counts where it stands: `use crate::Thing` names the crate root,
which imports the file that defines `Thing`. Declaring a module (`mod x;`)
is ownership, not an import. Code under `#[cfg(test)]` is left out (tests
may reach into any file), as are comments, strings and `$crate` in macros.

Each crate root (src/lib.rs, src/main.rs, src/bin/*.rs) is followed through
its `mod` declarations. Every strongly connected set of two or more files is
a circle: it is printed with the imports that close it, and the exit status
is 1.

    scripts/import-circles.py [CRATE_DIR...]   (default: every workspace member)
"""
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(text):
    """Blanks out comments, string and char literals, keeping line breaks."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif re.match(r'(b|c)?r#*"', text[i : i + 12]) and (i == 0 or not re.match(r"\w", text[i - 1])):
            m = re.match(r'(b|c)?r(#*)"', text[i:])
            end = '"' + m.group(2)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\(x[0-9a-fA-F]{2}|u\{[0-9a-fA-F]+\}|.)|[^\\'])'", text[i:])
            if m:
                out.append("' '")
                i += m.end()
            else:  # a lifetime
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(text, i):
    """Index just past the brace that closes the one at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def drop_cfg_test(text):
    """Removes items marked #[cfg(test)] (a test module, a test helper)."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]", text)
        if not m:
            return text
        j = m.end()
        # The item ends at its first `;` before any `{`, or with its braces.
        brace = text.find("{", j)
        semi = text.find(";", j)
        if semi >= 0 and (brace < 0 or semi < brace):
            end = semi + 1
        elif brace >= 0:
            end = matching_brace(text, brace)
        else:
            end = len(text)
        text = text[: m.start()] + "\n" * text.count("\n", m.start(), end) + text[end:]


def expand_use(tree):
    """`a::{b, c::{self, d as e}, f::*}` -> [(a::b, b), (a::c, c), (a::c::d, e), (a::f::*, *)]."""
    tree = re.sub(r"\s+as\s+", " as ", tree.strip())
    tree = re.sub(r"\s*(::|,|\{|\})\s*", r"\1", tree)
    paths = []

    def walk(prefix, s):
        depth, start, parts = 0, 0, []
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:k])
                start = k + 1
        parts.append(s[start:])
        for p in parts:
            if not p:
                continue
            if "{" in p:
                head, rest = p.split("{", 1)
                walk(prefix + head, rest[: rest.rfind("}")])
                continue
            alias = None
            if " as " in p:
                p, alias = p.split(" as ", 1)
            full = prefix + p
            if full.endswith("::self"):
                full = full[: -len("::self")]
            alias = alias or full.split("::")[-1]
            paths.append((full, alias))

    walk("", tree)
    return paths


class Crate:
    def __init__(self, name):
        self.name = name
        self.files = {}  # module path (tuple) -> file
        self.children = {}  # module path -> set of child names (file or inline)
        self.defined = {}  # module path -> names of the items it defines
        self.imports = {}  # module path -> {name: path its `use` gives it}
        self.globs = {}  # module path -> paths of its `use ..::*`
        self.macros = {}  # #[macro_export] macro name -> module path


def module_files(crate, root_file):
    """Follows `mod x;` declarations from a crate root."""
    pending = [((), root_file, True)]
    while pending:
        path, file, owns_dir = pending.pop()
        crate.files[path] = file
        crate.children.setdefault(path, set())
        text = drop_cfg_test(strip(open(file, encoding="utf-8").read()))
        base = os.path.dirname(file) if owns_dir else os.path.splitext(file)[0]
        crate.defined[path] = set(
            re.findall(r"\b(?:fn|struct|enum|trait|type|const|static|union|mod)\s+(" + IDENT + ")", text)
        )
        for m in re.finditer(r"#\[macro_export\][^!]*?macro_rules!\s*(" + IDENT + ")", text):
            crate.macros[m.group(1)] = path
        crate.imports[path], crate.globs[path] = {}, []
        for m in re.finditer(r"\buse\s+([^;]*);", text):
            for full, alias in expand_use(m.group(1)):
                if alias == "*":
                    crate.globs[path].append(full[: -len("::*")])
                else:
                    crate.imports[path][alias] = full
        for m in re.finditer(r"(#\[path\s*=\s*\"\"\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", text):
            name = m.group(2)
            crate.children[path].add(name)
            for cand, owns in ((os.path.join(base, name + ".rs"), False), (os.path.join(base, name, "mod.rs"), True)):
                if os.path.exists(cand):
                    pending.append((path + (name,), cand, owns))
                    break


def paths_in(text):
    """Every path a file names: use trees expanded, and inline paths."""
    found = []
    for m in re.finditer(r"\buse\s+([^;]*);", text):
        found.extend(full for full, _ in expand_use(m.group(1)))
    body = re.sub(r"\buse\s+[^;]*;", "", text)
    for m in re.finditer(r"(?<![\w$:])(" + IDENT + r")((?:\s*::\s*" + IDENT + r")+)", body):
        found.append(re.sub(r"\s+", "", m.group(0)))
    return found


def module_of(crate, here, segs):
    """The longest prefix of a path that is a module, and what follows it."""
    if not segs:
        return None, []
    if segs[0] == "crate":
        cur, rest = (), segs[1:]
    elif segs[0] in ("super", "self"):
        cur, rest = here, segs
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                cur = cur[:-1]
            rest = rest[1:]
    elif segs[0] in crate.children.get(here, ()):
        cur, rest = here, segs
    else:
        return None, []
    while rest and cur + (rest[0],) in crate.children:
        cur, rest = cur + (rest[0],), rest[1:]
    return cur, rest


def resolve(crate, here, path, depth=0):
    """The module (a key of crate.children) defining what a path from module
    `here` names, following re-exports to the definition, or None."""
    segs = [s for s in path.split("::") if s and s != "*"]
    cur, rest = module_of(crate, here, segs)
    if cur is None or not rest or depth > 20:
        return cur
    name = rest[0]
    if name in crate.defined.get(cur, ()):
        return cur
    if name in crate.imports.get(cur, {}):
        found = resolve(crate, cur, crate.imports[cur][name], depth + 1)
        return cur if found is None else found
    for glob in crate.globs.get(cur, []):
        g, grest = module_of(crate, cur, [s for s in glob.split("::") if s])
        if g is not None and not grest and (name in crate.defined.get(g, ()) or name in crate.imports.get(g, {})):
            return resolve(crate, g, "self::" + name, depth + 1)
    if cur == () and name in crate.macros:
        return crate.macros[name]
    return cur


def crate_graph(crate):
    edges = {}
    for mod, file in crate.files.items():
        text = drop_cfg_test(strip(open(file, encoding="utf-8").read()))
        text = text.replace("$crate", "")
        # Inline modules: paths inside `mod x { .. }` resolve from mod::x,
        # which shares the file; approximate by resolving from the file's
        # module, but let `super::` inside them climb from the inline one.
        targets = {}
        for inline in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{", text):
            start = inline.end() - 1
            end = matching_brace(text, start)
            inner = text[start:end]
            sub = mod + (inline.group(1),)
            crate.children.setdefault(mod, set()).add(inline.group(1))
            crate.children.setdefault(sub, set())
            for p in paths_in(inner):
                t = resolve(crate, sub, p)
                if t is not None:
                    while t not in crate.files:
                        t = t[:-1]
                    targets.setdefault(t, p)
            text = text[:start] + " " * (end - start) + text[end:]
        for p in paths_in(text):
            t = resolve(crate, mod, p)
            if t is None:
                continue
            while t not in crate.files:
                t = t[:-1]
            targets.setdefault(t, p)
        edges[mod] = {t: p for t, p in targets.items() if t != mod}
    return edges


def circles(nodes, edges):
    """Tarjan's strongly connected components of two or more nodes."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
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
                out.append(comp)

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def members(root):
    text = open(os.path.join(root, "Cargo.toml"), encoding="utf-8").read()
    m = re.search(r"members\s*=\s*\[([^\]]*)\]", text)
    return re.findall(r'"([^"]+)"', m.group(1)) if m else []


def main():
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dirs = sys.argv[1:] or [os.path.join(here, d) for d in members(here)]
    # A path prefix whose own circles are known and reported, not failed on
    # (scripts/test.sh names it while that part waits for its split).
    allowed = os.environ.get("IMPORT_CIRCLES_ALLOWED", "")
    found = 0
    for d in dirs:
        roots = [os.path.join(d, "src", f) for f in ("lib.rs", "main.rs")]
        bindir = os.path.join(d, "src", "bin")
        if os.path.isdir(bindir):
            roots += [os.path.join(bindir, f) for f in sorted(os.listdir(bindir)) if f.endswith(".rs")]
        for root in roots:
            if not os.path.exists(root):
                continue
            crate = Crate(root)
            module_files(crate, root)
            edges = crate_graph(crate)
            for comp in circles(sorted(crate.files), edges):
                rel = lambda m: os.path.relpath(crate.files[m], here)
                names = sorted(rel(m) for m in comp)
                known = allowed and all(n.startswith(allowed) for n in names)
                found += 0 if known else 1
                label = "known import circle (allowed)" if known else "import circle"
                print(f"{label} in {os.path.relpath(root, here)}: {len(comp)} files")
                for m in sorted(comp, key=rel):
                    for t, p in sorted(edges[m].items(), key=lambda e: rel(e[0])):
                        if t in comp:
                            print(f"  {rel(m)} -> {rel(t)}  ({p})")
    if found:
        print(f"{found} import circle(s) between files: each file above imports the next, directly or through others")
        return 1
    print("no import circles between files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
