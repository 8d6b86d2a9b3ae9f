#!/usr/bin/env bash
# Fails when something the build, the tests, the benchmarks or the demo use comes from a Debian
# package that tools/install-deps.sh does not name (directly or as a dependency of one it names):
# a library the built programs link, an HDF5 filter plugin, a Python module the project's
# scripts import. A machine where such a package was installed by hand passes the tests while a
# fresh one fails them; this check fails on both. Usage: tools/check-deps.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
listed=$(bash tools/install-deps.sh --list)
# What the listed packages bring: their installed dependency closure, plus the base system
# (Essential and required/important priority packages, present on every Debian machine).
allowed=$( {
  printf '%s\n' $listed
  apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances $listed 2>/dev/null | awk '/^[a-z0-9]/ {print $1}'
  dpkg-query -W -f='${Package} ${Essential} ${Priority}\n' | awk '$2 == "yes" || $3 == "required" || $3 == "important" {print $1}'
} | sed 's/:.*//' | sort -u)

# Files to account for: libraries of the built programs, HDF5 plugins, Python modules.
files=$(mktemp)
trap 'rm -f "$files"' EXIT
for exe in "$BUILD"/daemon/mount.h5direct "$BUILD"/tests/h5direct_unit_tests "$BUILD"/bench/*; do
  [ -x "$exe" ] && [ -f "$exe" ] || continue
  ldd "$exe" 2>/dev/null | awk '/=> \// {print $3}'
done >> "$files"
plugin_path=${HDF5_PLUGIN_PATH:-}
for d in /usr/lib/*/hdf5/serial/plugins ${plugin_path//:/ }; do
  [ -d "$d" ] && find "$d" -name '*.so*'
done >> "$files" 2>/dev/null || true
/usr/bin/python3 - >> "$files" <<'PY'
# Every module the project's Python files import (tests, benchmarks, tools, examples, python/), as files.
import ast, importlib, os, sys
at_start = set(sys.modules)  # what the interpreter itself loaded (site, .pth hooks): not ours
names = set()
for top in ('tests', 'bench', 'tools', 'docs', 'python'):
    for dirpath, _, fns in os.walk(top):
        for fn in fns:
            if fn.endswith('.py'):
                sys.path.insert(0, dirpath) if dirpath not in sys.path else None
                tree = ast.parse(open(os.path.join(dirpath, fn), encoding='utf-8').read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        names.update(a.name.split('.')[0] for a in node.names)
                    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                        names.add(node.module.split('.')[0])
local = {os.path.splitext(f)[0] for top in ('tests', 'bench', 'tools', 'docs', 'python')
         for _, _, fns in os.walk(top) for f in fns if f.endswith('.py')}
missing = []
for n in sorted(names - local):
    try:
        importlib.import_module(n)
    except Exception as e:  # a module the scripts need and nothing provides
        missing.append(f'{n} ({e.__class__.__name__}: {e})')
for n in missing:
    print('MISSING-PYTHON-MODULE ' + n)
for name, m in list(sys.modules.items()):
    f = getattr(m, '__file__', None) if name not in at_start else None
    if f and f.startswith('/usr/') and not f.startswith('/usr/local/'):
        print(os.path.realpath(f))
PY
bad=0
if grep -q '^MISSING-PYTHON-MODULE' "$files"; then
  grep '^MISSING-PYTHON-MODULE' "$files" | sed 's/^MISSING-PYTHON-MODULE /check-deps: python module not importable: /' >&2
  bad=1
fi
# Which package owns each file (dpkg knows some under /lib, some under /usr/lib).
owners=$(grep -v '^MISSING' "$files" | sort -u | while read -r f; do
  p=$(dpkg-query -S "$f" 2>/dev/null || dpkg-query -S "${f#/usr}" 2>/dev/null || dpkg-query -S "/usr$f" 2>/dev/null || true)
  if [ -z "$p" ]; then
    case "$f" in "$PWD"/*) ;; *) echo "UNOWNED $f" ;; esac
  else
    echo "$p" | head -1 | sed "s|:.*||; s|, | |g; s|\$| $f|"
  fi
done)
while read -r pkgs f; do
  [ -n "$pkgs" ] || continue
  if [ "$pkgs" = UNOWNED ]; then
    echo "check-deps: $f belongs to no Debian package (installed by hand?)" >&2
    bad=1
    continue
  fi
  ok=0
  for p in $pkgs; do grep -qx "${p%%:*}" <<<"$allowed" && ok=1; done
  if [ $ok = 0 ]; then
    echo "check-deps: $f comes from $pkgs, which tools/install-deps.sh does not install" >&2
    bad=1
  fi
done <<<"$owners"
[ $bad = 0 ] && echo "check-deps: every library, plugin and Python module used comes from a listed package"
exit $bad
