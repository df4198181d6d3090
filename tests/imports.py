#!/usr/bin/env python3
"""The shape of delayq's source, as a newcomer maps it: files per folder,
the arrows between files (`crate::`, `super::` and `self::` paths, in `use`
and inline; a parent naming its own children is the tree's arrow down and
is not counted; unit tests are left out), circles (strongly connected parts
of two files or more; the test layers::circles fails on any) and arrows
running up (from a module to one of its ancestors).

With a FOLDER (`store`, `src/store` or `src/store/`), only the files in it
and the arrows among them, each arrow listed.

Usage: python3 tests/imports.py src [FOLDER]   (./dev map [FOLDER])"""
import os, re, sys
from collections import defaultdict

src = sys.argv[1].rstrip('/')
focus = sys.argv[2].strip('/') if len(sys.argv) > 2 else None
if focus is not None and (focus + '/').startswith(src + '/'):
    focus = focus[len(src):].strip('/') or None
files = {}
for root, _, names in os.walk(src):
    for n in names:
        if n.endswith('.rs'):
            p = os.path.join(root, n)
            rel = os.path.relpath(p, src)
            parts = rel[:-3].split('/')
            if parts[-1] == 'mod' or rel in ('lib.rs', 'main.rs'):
                parts = parts[:-1]
            files[tuple(parts)] = rel

def resolve(mod, path):
    """The longest module prefix of `path` (from module `mod`) that is a file."""
    segs = path.split('::')
    if segs[0] == 'crate':
        cur, segs = (), segs[1:]
    elif segs[0] in ('super', 'self'):
        cur = mod
        while segs and segs[0] in ('super', 'self'):
            if segs[0] == 'super':
                cur = cur[:-1]
            segs = segs[1:]
    else:
        return None
    best = cur if cur in files else None
    for s in segs:
        s = s.strip('{} ')
        if not re.match(r'^[a-z_][a-z0-9_]*$', s):
            break
        cur = cur + (s,)
        if cur in files:
            best = cur
        else:
            break
    return best

edges = defaultdict(set)
pat = re.compile(r'\b((?:crate|super|self)(?:::(?:super|[A-Za-z_][A-Za-z0-9_]*|\{[^;]*?\}))+)', re.S)
def expand(path):
    # a::{b, c::d} -> a::b, a::c::d (one level of braces is enough here)
    m = re.match(r'^(.*?)::\{(.*)\}$', path, re.S)
    if not m:
        return [path]
    head, body = m.group(1), m.group(2)
    out, depth, cur = [], 0, ''
    for ch in body:
        if ch == ',' and depth == 0:
            out.append(cur); cur = ''
        else:
            depth += ch == '{'; depth -= ch == '}'; cur += ch
    out.append(cur)
    res = []
    for o in out:
        o = re.sub(r'\s+as\s+\w+', '', o.strip())
        if o:
            res += expand(head + '::' + o)
    return res

for mod, rel in files.items():
    text = open(os.path.join(src, rel)).read()
    text = re.sub(r'//[^\n]*', '', text)
    # unit tests are not part of the structure
    text = re.split(r'#\[cfg\(test\)\]\s*mod tests', text)[0]
    for m in pat.finditer(text):
        for p in expand(m.group(1)):
            t = resolve(mod, p)
            if t is not None and t != mod:
                edges[mod].add(t)

def within(m):
    name = '/'.join(m)
    return focus is None or name == focus or name.startswith(focus + '/')

nodes = [m for m in files if within(m)]
if not nodes:
    sys.exit(f"no Rust file under {src}/{focus}: name a folder of {src}/, e.g. store")
E = [(a, b) for a in nodes for b in edges[a] if within(b)]
up = [(a, b) for a, b in E if len(b) < len(a) and a[:len(b)] == b]

# Tarjan
idx, low, on, st, sccs, n = {}, {}, set(), [], [], [0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v] = low[v] = n[0]; n[0] += 1; st.append(v); on.add(v)
    for w in edges[v]:
        if not within(w):
            continue
        if w not in idx:
            sc(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        c = []
        while True:
            w = st.pop(); on.discard(w); c.append(w)
            if w == v: break
        if len(c) > 1: sccs.append(c)
for v in nodes:
    if v not in idx: sc(v)

folders = defaultdict(int)
for m in nodes:
    folders[os.path.dirname(files[m]) or '.'] += 1
print('files per folder:')
for f in sorted(folders):
    print(f'  {f}/: {folders[f]}')
print(f'files: {len(nodes)}, arrows: {len(E)}, arrows up (to an ancestor module): {len(up)}')
print(f'circles: {len(sccs)}')
for c in sorted(sccs, key=len, reverse=True):
    print(f'  {len(c)} files: ' + ', '.join(sorted(files[m] for m in c)))
if focus is not None:
    print('arrows:')
    for a in sorted(nodes, key=lambda m: files[m]):
        targets = sorted(files[b] for b in edges[a] if within(b))
        if targets:
            print(f'  {files[a]} -> ' + ', '.join(targets))
