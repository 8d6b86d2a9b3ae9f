#!/usr/bin/env python3
"""The documentation says what the program and its tests say.

    python3 tools/check_docs.py [--binary BIN] [ROOT]
        BIN: the built mount.h5direct (its --help and info --help are read); ROOT: the source
        tree (default: this checkout). Without --binary the options are not checked.

Exit status 0 when everything holds, 1 with one line per problem otherwise. Run by ctest
(docs_check); tests/python/test_docs_check.py shows it fails on a bad docs tree.

- Every option and flag `h5direct --help` and `h5direct info --help` list is in docs/usage.md, as
  a code span (`threads=N`, `-s`, `--details`), and the usage lines of --help are in README.md
  and docs/usage.md.
- Every test the docs cite exists: `test_x.py::test_name[...]` (and `::test_name` after a file
  in the same table row or paragraph), `test_x.py`, `test_x.cpp`, `fuzz_x`, `bench/x.py`, `h5d_testlib.name`, and in
  docs/semantics.md Catch2 cases by name (unit "name", a trailing `...` or `*` matching any rest)
  and tag (unit `[tag]`).
- No placeholder where a value belongs, in docs/*.md and README.md: TO BE FILLED, TODO, TBD,
  FIXME, XXX (as words, outside code spans, which may name them); and in the C++ sources, no string literal naming MNT/ (a placeholder
  where a program message must name the real mount point).
"""
import argparse
import fnmatch
import os
import re
import subprocess
import sys

PLACEHOLDERS = re.compile(r'TO BE FILLED|\bTODO\b|\bTBD\b|\bFIXME\b|\bXXX\b')
SOURCE_DIRS = ('core', 'vfs', 'fusefs', 'daemon', 'config', 'helper')


def read(path):
    with open(path, encoding='utf-8') as f:
        return f.read()


def doc_files(root):
    docs = os.path.join(root, 'docs')
    out = [os.path.join(docs, n) for n in sorted(os.listdir(docs)) if n.endswith('.md')]
    return out + [os.path.join(root, 'README.md')]


# ---- options -----------------------------------------------------------------------------------

def help_options(text):
    """(flags, -o option names, usage lines) from a --help text."""
    flags, names, usage = [], [], []
    prev_usage = False
    for line in text.splitlines():
        if line.startswith('usage: ') or (prev_usage and re.match(r'^ {7}\S', line)):
            usage.append(line[7:].strip())
            prev_usage = True
            continue
        prev_usage = False
        m = re.match(r'^  -o ([\w.-]+)', line)
        if m:
            names.append(m.group(1))
            continue
        m = re.match(r'^  (-[\w-]+(?:, --[\w-]+)?)', line)
        if m:
            flags += [f.strip() for f in m.group(1).split(',')]
            continue
        if line.startswith('Accepted and ignored'):
            names += [n.strip() for n in line.split(':', 1)[1].split(',')]
    return flags, names, usage


def check_options(root, binary, problems):
    texts = []
    for args in ([], ['info']):
        p = subprocess.run([binary] + args + ['--help'], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            problems.append(f'{binary} {" ".join(args + ["--help"])}: exit status {p.returncode}')
            return
        texts.append(p.stdout)
    usage_md = read(os.path.join(root, 'docs', 'usage.md'))
    prog = os.path.basename(binary)
    all_usage = []
    for text in texts:
        flags, names, usage = help_options(text)
        all_usage += usage
        for f in flags:
            if not re.search('`' + re.escape(f) + r'[`\s=]', usage_md):
                problems.append(f'docs/usage.md: the flag {f} (--help) is not documented (as `{f}`)')
        for n in names:
            if not re.search('`' + re.escape(n) + r'[`=]', usage_md):
                problems.append(f'docs/usage.md: the option {n} (--help) is not documented (as `{n}`)')
    for doc in ('README.md', os.path.join('docs', 'usage.md')):
        text = read(os.path.join(root, doc))
        for u in dict.fromkeys(all_usage):
            u = re.sub(r'^' + re.escape(prog) + r'\b', 'h5direct', u)
            if u not in text:
                problems.append(f'{doc}: the usage line "{u}" (--help) is missing')


# ---- cited tests -------------------------------------------------------------------------------

def py_functions(path):
    return set(re.findall(r'^def (\w+)\(', read(path), re.M))


def unit_cases(root):
    names, tags = [], set()
    unit = os.path.join(root, 'tests', 'unit')
    for n in sorted(os.listdir(unit)):
        if n.endswith('.cpp'):
            text = read(os.path.join(unit, n))
            for m in re.finditer(r'TEST_CASE\(\s*"((?:[^"\\]|\\.)*)"\s*(?:,\s*"([^"]*)")?', text):
                names.append(m.group(1).replace('\\"', '"'))
                tags.update(re.findall(r'\[[^\]]+\]', m.group(2) or ''))
    return names, tags


def unit_name_exists(name, names):
    if name.endswith('...'):
        return any(n.startswith(name[:-3].rstrip()) for n in names)
    if '*' in name:
        return any(fnmatch.fnmatchcase(n, name) for n in names)
    return name in names


def check_citations(root, problems):
    tests = os.path.join(root, 'tests')
    py = os.path.join(tests, 'python')
    names, tags = unit_cases(root)
    funcs = {}

    def functions(f):
        if f not in funcs:
            funcs[f] = py_functions(os.path.join(py, f))
        return funcs[f]

    for doc in doc_files(root):
        rel = os.path.relpath(doc, root)
        last_file = None  # the file `::name` refers to: the last one cited in its row or paragraph
        for lineno, line in enumerate(read(doc).splitlines(), 1):
            where = f'{rel}:{lineno}'
            if not line.strip() or line.startswith('|'):
                last_file = None
            for span in re.findall(r'`([^`]+)`', line):
                m = re.fullmatch(r'(?:tests/python/)?(test_\w+\.py)(?:::(\S+))?', span) or \
                    re.fullmatch(r'()::(\S+)', span)
                if m:
                    f, name = m.group(1), m.group(2)
                    if f:
                        if not os.path.exists(os.path.join(py, f)):
                            problems.append(f'{where}: cites {f}, which does not exist')
                            continue
                        last_file = f
                    elif last_file is None:
                        problems.append(f'{where}: cites ::{name} with no test file before it')
                        continue
                    if name:
                        name = name.split('[', 1)[0]
                        if name != '*' and name not in functions(last_file):
                            problems.append(f'{where}: cites {last_file}::{name}, which does not exist')
                    continue
                m = re.fullmatch(r'(?:tests/unit/)?(test_\w+\.cpp)', span)
                if m and not os.path.exists(os.path.join(tests, 'unit', m.group(1))):
                    problems.append(f'{where}: cites {span}, which does not exist')
                m = re.fullmatch(r'fuzz_(?:replay_fuzz_)?(\w+)', span)
                if m and not os.path.exists(os.path.join(tests, 'fuzz', f'fuzz_{m.group(1)}.cpp')):
                    problems.append(f'{where}: cites {span}, which does not exist')
                m = re.fullmatch(r'bench/[\w./-]+\.py', span)
                if m and not os.path.exists(os.path.join(root, span)):
                    problems.append(f'{where}: cites {span}, which does not exist')
                m = re.fullmatch(r'h5d_testlib\.(\w+)', span)
                if m and m.group(1) not in functions(os.path.join('..', 'python', 'h5d_testlib.py')):
                    problems.append(f'{where}: cites {span}, which does not exist')
            if not rel.endswith('semantics.md'):
                continue
            for name in re.findall(r'unit `?"((?:[^"\\]|\\.)+)"', line) + \
                    re.findall(r'unit "[^"]*", ((?:"[^"]+"(?:, )?)+)', line):
                for n in re.findall(r'"([^"]+)"', f'"{name}"'):
                    if not unit_name_exists(n, names):
                        problems.append(f'{where}: cites the unit test "{n}", which does not exist')
            for tag in re.findall(r'unit `(\[[^\]]+\])`', line):
                if tag not in tags:
                    problems.append(f'{where}: cites the unit test tag {tag}, which no test has')


# ---- placeholders ------------------------------------------------------------------------------

def check_placeholders(root, problems):
    for doc in doc_files(root):
        rel = os.path.relpath(doc, root)
        for lineno, line in enumerate(read(doc).splitlines(), 1):
            m = PLACEHOLDERS.search(re.sub(r'`[^`]*`', '', line))  # code spans name them, fine
            if m:
                problems.append(f'{rel}:{lineno}: placeholder "{m.group(0)}" where a value belongs')
    for d in SOURCE_DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            for n in sorted(files):
                if not n.endswith(('.cpp', '.h')):
                    continue
                p = os.path.join(dirpath, n)
                for lineno, line in enumerate(read(p).splitlines(), 1):
                    code = line.split('//', 1)[0] if not line.lstrip().startswith('"') else line
                    for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', code):
                        if 'MNT/' in lit:
                            problems.append(f'{os.path.relpath(p, root)}:{lineno}: "MNT/" in a message: '
                                            'name the real mount point')


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('root', nargs='?', default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument('--binary', help='the built mount.h5direct')
    args = ap.parse_args(argv)
    problems = []
    if args.binary:
        check_options(args.root, args.binary, problems)
    check_citations(args.root, problems)
    check_placeholders(args.root, problems)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
