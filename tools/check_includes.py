#!/usr/bin/env python3
"""The include graph of h5direct keeps its layers (docs/architecture.md, "Where the code lives").

    python3 tools/check_includes.py [ROOT]      (ROOT: the source tree; default: this checkout)

Exit status 0 when every include of the project's own headers ("core/...", "vfs/...", ...) goes
down or sideways in the layers below, 1 with one line per forbidden include otherwise. Run by
ctest (include_graph); tests/python/test_include_graph.py shows it fails on bad includes.

The layers, lowest first (a module may include its own headers and those of the modules listed
for it; everything may include the standard library and system headers):

    vocab                  core/vocab/: Shape, DType, Value, FilterInfo, DatasetInfo (std only)
    base                   core/error.*, core/log.*
    fmt, filters           the file format parsed by hand; the codecs
    engine                 pool, caches, descriptors
    array                  every kind of Array
    h5lib                  the open HDF5 files, the Metadata interface, the helpers and their protocol
    euxfel, write          the EuXFEL run model, the write path
    vfs                    the virtual tree (all of core)
    config, fusefs         the option parser, the FUSE adapter
    helper                 the helper side of the process boundary: every libhdf5 call (all of core)
    daemon                 mount.h5direct: all of the above but helper

A file may also say which side of the libhdf5 process boundary it belongs to, in a line of its
leading comment: `// Side: daemon` (it must not reach <hdf5.h> through any chain of includes, and
calls no H5* function and nothing of h5::), `// Side: helper` or `// Side: both` (not checked).
"""
import os
import re
import sys

# What each module may include besides itself: a strict order (each names only modules above it
# in this table), so the folders of core/ include each other without a cycle.
_CORE_LOW = ['vocab', 'base']
ALLOWED = {
    'vocab': [],
    'base': [],
    'fmt': _CORE_LOW,
    'filters': _CORE_LOW,
    'engine': _CORE_LOW + ['fmt', 'filters'],
    'array': _CORE_LOW + ['fmt', 'filters', 'engine'],
    'h5lib': _CORE_LOW + ['fmt', 'filters', 'engine', 'array'],
    'euxfel': _CORE_LOW + ['fmt', 'filters', 'engine', 'array', 'h5lib'],
    'write': _CORE_LOW + ['fmt', 'filters', 'engine', 'array', 'h5lib'],
}
_CORE = ['vocab', 'base', 'fmt', 'filters', 'engine', 'array', 'h5lib', 'euxfel', 'write']
ALLOWED['vfs'] = _CORE
ALLOWED['config'] = _CORE + ['vfs', 'fusefs']  # each layer's option struct (vfs_options.h, fuse_options.h)
ALLOWED['fusefs'] = _CORE + ['vfs', 'config']
ALLOWED['helper'] = _CORE
ALLOWED['daemon'] = _CORE + ['vfs', 'config', 'fusefs']  # the mount.h5direct program

CHECKED_DIRS = ['core', 'vfs', 'config', 'fusefs', 'daemon', 'helper']
SOURCE_EXT = ('.h', '.hpp', '.cpp', '.cc')
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)
SIDE = re.compile(r'^//\s*Side:\s*(daemon|helper|both)\b', re.M)
HDF5_HEADER = re.compile(r'^(hdf5\.h|H5[A-Za-z]*public\.h|H5[A-Za-z]*\.h)$')
H5_CALL = re.compile(r'\b(H5[A-Z][A-Za-z0-9_]*)\s*\(|\bh5::[A-Za-z_]')
# The project's own types whose names start with H5 (class H5File, H5Files): no libhdf5 calls.
OWN_TYPE = re.compile(r'\b(?:class|struct)\s+(H5[A-Za-z0-9_]*)')


def module_of(rel):
    """The module of a path relative to the root ('core/fmt/cursor.h' -> 'fmt'); None when the
    path is outside the checked folders; '?' for a folder of core that no layer names."""
    parts = rel.split('/')
    top = parts[0]
    if top not in CHECKED_DIRS:
        return None
    if top != 'core':
        return top
    if len(parts) == 2:
        stem = parts[1].split('.')[0]
        return 'base' if stem in ('error', 'log') else '?'
    return parts[1] if parts[1] in ALLOWED else '?'


def strip_comments_and_strings(text):
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    text = re.sub(r'//[^\n]*', ' ', text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def sources(root):
    for d in CHECKED_DIRS:
        for dirpath, _, names in os.walk(os.path.join(root, d)):
            for n in sorted(names):
                if n.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, n), root).replace(os.sep, '/')


def includes(root, rel):
    with open(os.path.join(root, rel), encoding='utf-8', errors='replace') as f:
        text = f.read()
    return text, [(m.group(1), m.group(2)) for m in INCLUDE.finditer(text)]


def reaches_hdf5(root, rel, memo, stack=()):
    """The chain of project headers from rel to <hdf5.h> (or an H5*.h), or None."""
    if rel in memo:
        return memo[rel]
    memo[rel] = None  # cycles: not through here
    _, incs = includes(root, rel)
    for kind, name in incs:
        if kind == '<' and HDF5_HEADER.match(name):
            memo[rel] = [rel, '<' + name + '>']
            return memo[rel]
        if kind == '"' and os.path.isfile(os.path.join(root, name)):
            chain = reaches_hdf5(root, name, memo)
            if chain:
                memo[rel] = [rel] + chain
                return memo[rel]
    return None


def check(root):
    errors = []
    memo = {}
    edges = {}  # module -> modules it includes (allowed edges only)
    own_types = set()
    for rel in sources(root):
        with open(os.path.join(root, rel), encoding='utf-8', errors='replace') as f:
            own_types.update(OWN_TYPE.findall(strip_comments_and_strings(f.read())))
    for rel in sources(root):
        mod = module_of(rel)
        if mod == '?':
            errors.append(f'{rel}: in a folder of core that no layer names (add it to tools/check_includes.py '
                          'and docs/architecture.md)')
            continue
        text, incs = includes(root, rel)
        for kind, name in incs:
            if kind != '"':
                continue
            target = module_of(name)
            if target is None or target == mod:
                continue
            if target == '?':
                errors.append(f'{rel}: includes "{name}", in a folder of core that no layer names')
            elif target not in ALLOWED[mod]:
                errors.append(f'{rel}: {mod} must not include {target} ("{name}")')
            else:
                edges.setdefault(mod, set()).add(target)
        side = SIDE.search(text[:2000])
        if side and side.group(1) == 'daemon':
            chain = reaches_hdf5(root, rel, memo)
            if chain:
                errors.append(f'{rel}: daemon side, but reaches libhdf5: ' + ' -> '.join(chain))
            for m in H5_CALL.finditer(strip_comments_and_strings(text)):
                if m.group(1) not in own_types:
                    errors.append(f'{rel}: daemon side, but calls libhdf5: {m.group(0).strip()}')
    errors += cycles(edges)
    return errors


def cycles(edges):
    """One line per include cycle among the modules (`edges`: module -> modules it includes)."""
    out, state, stack = [], {}, []

    def visit(m):
        state[m] = 'open'
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 'open':
                out.append('include cycle: ' + ' -> '.join(stack[stack.index(n):] + [n]))
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 'done'

    for m in sorted(edges):
        if m not in state:
            visit(m)
    return out


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(root, 'core')):
        print(f'{root}: no core/ folder', file=sys.stderr)
        return 2
    errors = check(root)
    for e in errors:
        print(e)
    if errors:
        print(f'{len(errors)} forbidden include(s); the layers are in tools/check_includes.py and docs/architecture.md',
              file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
