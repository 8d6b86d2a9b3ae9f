#!/usr/bin/env python3
"""Every libhdf5 call is wrapped once and checked (docs/architecture.md, "libhdf5 behind one
layer of wrappers"): no project source outside the wrapper files calls an H5* function.

    python3 tools/check_h5_calls.py [ROOT]              the source tree (default: this checkout)
    python3 tools/check_h5_calls.py --as PATH FILE...   FILE(s) checked as if they were at PATH
                                                        (relative to ROOT; for the checker's own
                                                        tests: tests/fixtures/check_h5_calls)

Exit status 0 when no raw call is found, 1 with one line per raw call otherwise (file:line: name).

A raw call is a name that starts with H5 followed by a call's "(" (H5Dopen2(, H5Tget_size (,
H5free_memory(), outside comments and string literals. The project's own types whose names start
with H5 (class H5File ...: found by their declarations) are no calls. Scanned: the .cpp and .h
files of the daemon and helper sides (core, vfs, fusefs, config, helper, daemon); tests and
benchmarks use libhdf5 directly to make and check files, and are not scanned.

Allowed: the wrapper files (every call there), and the truncated-file driver, which may make
only the calls that ARE a driver (registering its class, pushing its errors).
"""
import os
import re
import sys

SCANNED = ['core', 'vfs', 'fusefs', 'config', 'helper', 'daemon']
WRAPPERS = {'helper/h5lib.cpp', 'helper/h5types_api.cpp'}
DRIVER_CALLS = {'helper/h5truncated.cpp': {'H5FDregister', 'H5Epush2'}}

CALL = re.compile(r'(?<![A-Za-z0-9_])(H5[A-Za-z][A-Za-z0-9_]*)\s*\(')
DECL = re.compile(r'\b(?:class|struct|enum|using)\s+(H5[A-Za-z0-9_]*)')
# Comments and literals, so that neither "H5Dread(" in a string nor // H5Dread(...) counts.
STRIP = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def blank(m):
    # Keep the newlines, so that line numbers stay right.
    return re.sub(r'[^\n]', ' ', m.group(0))


def code_of(text):
    return STRIP.sub(blank, text)


def sources(root):
    for top in SCANNED:
        for dirpath, dirnames, files in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for f in sorted(files):
                if f.endswith(('.cpp', '.h', '.cc', '.hpp')):
                    full = os.path.join(dirpath, f)
                    yield os.path.relpath(full, root).replace(os.sep, '/'), full


def own_names(texts):
    names = set()
    for t in texts:
        names.update(DECL.findall(code_of(t)))
    return names


def raw_calls(rel, text, own):
    if rel in WRAPPERS:
        return []
    allowed = DRIVER_CALLS.get(rel, set())
    out = []
    code = code_of(text)
    for m in CALL.finditer(code):
        name = m.group(1)
        if name in own or name in allowed:
            continue
        line = code.count('\n', 0, m.start()) + 1
        out.append(f'{rel}:{line}: {name}: a raw libhdf5 call; call its wrapper (helper/h5lib.h, h5types_api.h)')
    return out


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checked = []  # (relative path, text)
    if len(argv) > 1 and argv[1] == '--as':
        if len(argv) < 4:
            print(__doc__, file=sys.stderr)
            return 2
        rel = argv[2]
        for f in argv[3:]:
            with open(f, encoding='utf-8', errors='replace') as fh:
                checked.append((rel, fh.read()))
    else:
        if len(argv) > 1:
            root = argv[1]
        for rel, full in sources(root):
            with open(full, encoding='utf-8', errors='replace') as fh:
                checked.append((rel, fh.read()))
    # The project's own H5... names, from the whole tree (a fixture declares none of its own).
    tree = [open(full, encoding='utf-8', errors='replace').read() for _, full in sources(root)]
    own = own_names(tree + [t for _, t in checked])
    if not checked:
        print('check_h5_calls: no sources found under ' + root, file=sys.stderr)
        return 2
    bad = []
    for rel, text in checked:
        bad += raw_calls(rel, text, own)
    for line in bad:
        print(line)
    if bad:
        print(f'check_h5_calls: {len(bad)} raw libhdf5 call(s) outside the wrapper layer', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
