#!/usr/bin/env python3
"""Import circles between the files of one crate's src/ (a helper's check).

Every `crate::`, `super::` and `self::` path in code (not comments) is an
edge from its file to the file of the longest module prefix it names; a
name at the root (`crate::Engine`) is an edge to lib.rs. Prints each
circle (a strongly connected set of files) and exits 1 if there is one.
Usage: engine-imports.py SRC_DIR [EXCLUDED_PREFIX...]
"""
import os, re, sys

src = sys.argv[1].rstrip('/')
excluded = sys.argv[2:]
files = {}
for root, _, names in os.walk(src):
    for n in names:
        if n.endswith('.rs'):
            p = os.path.join(root, n)
            files[os.path.relpath(p, src)] = open(p).read()

def module_of(rel):
    parts = rel[:-3].split('/')
    if parts[-1] in ('mod', 'lib', 'main'):
        parts = parts[:-1]
    return parts

mod_file = {tuple(module_of(r)): r for r in files}

def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', '', text, flags=re.S)
    return '\n'.join(l.split('//')[0] if not l.strip().startswith('//') else '' for l in text.split('\n'))

def expand(path):
    # a::{b, c::{d, e}} -> a::b, a::c::d, a::c::e
    m = re.match(r'^([^{]*)\{(.*)\}$', path, re.S)
    if not m:
        return [path]
    head, body = m.group(1), m.group(2)
    items, depth, cur = [], 0, ''
    for ch in body:
        if ch == '{': depth += 1
        if ch == '}': depth -= 1
        if ch == ',' and depth == 0:
            items.append(cur); cur = ''
        else:
            cur += ch
    items.append(cur)
    out = []
    for it in items:
        it = it.strip()
        if it:
            out += expand(head + it)
    return out

def resolve(rel, path):
    segs = [s.strip() for s in path.split('::') if s.strip()]
    segs = [s.split(' as ')[0].strip() for s in segs]
    here = module_of(rel)
    if segs[0] == 'crate':
        base, segs = [], segs[1:]
    elif segs[0] in ('super', 'self'):
        base = here[:]
        while segs and segs[0] in ('super', 'self'):
            if segs[0] == 'super':
                base = base[:-1]
            segs = segs[1:]
    elif tuple(here + segs[:1]) in mod_file:
        base = here[:]
    else:
        return None
    full = base + segs
    for n in range(len(full), -1, -1):
        f = mod_file.get(tuple(full[:n]))
        if f:
            return f
    return None

edges = {r: set() for r in files}
for rel, text in files.items():
    code = strip_comments(text)
    # cut `#[cfg(test)] mod tests { ... }` at the end of a file
    code = re.split(r'#\[cfg\([^\]]*\btest\b[^\]]*\)\]\s*mod tests', code)[0]
    for m in re.finditer(r'\buse\s+([A-Za-z_][A-Za-z0-9_]*::[^;]*);', code, re.S):
        for p in expand(re.sub(r'\s+', ' ', m.group(1))):
            t = resolve(rel, p)
            if t and t != rel: edges[rel].add(t)
    for m in re.finditer(r'\b((?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)+)', code):
        t = resolve(rel, m.group(1))
        if t and t != rel: edges[rel].add(t)

def keep(f):
    return not any(f.startswith(e) for e in excluded)

# Tarjan
index, low, stack, on, sccs, i = {}, {}, [], set(), [], [0]
sys.setrecursionlimit(10000)
def visit(v):
    index[v] = low[v] = i[0]; i[0] += 1; stack.append(v); on.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        scc = []
        while True:
            w = stack.pop(); on.discard(w); scc.append(w)
            if w == v: break
        if len(scc) > 1: sccs.append(sorted(scc))
for v in sorted(edges):
    if v not in index: visit(v)
bad = [s for s in sccs if any(keep(f) for f in s)]
for s in bad:
    print('circle:', ' '.join(s))
    for f in s:
        print('   ', f, '->', ' '.join(sorted(t for t in edges[f] if t in s)))
sys.exit(1 if bad else 0)
