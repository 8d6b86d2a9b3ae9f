"""tools/check_includes.py (ctest include_graph keeps the layers of the include graph): it passes
on a copy of the source tree and fails, naming the file and the edge, once a forbidden include or
libhdf5 call is put into that copy."""
import os
import os.path as osp
import shutil
import subprocess
import sys

import pytest

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SCRIPT = osp.join(ROOT, 'tools', 'check_includes.py')
DIRS = ['core', 'vfs', 'config', 'fusefs', 'helper']


def run(root):
    p = subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout


@pytest.fixture
def tree(tmp_path):
    """A copy of the checked folders of this source tree."""
    for d in DIRS:
        shutil.copytree(osp.join(ROOT, d), tmp_path / d,
                        ignore=shutil.ignore_patterns('*.o', '__pycache__'))
    return tmp_path


def add_line(path, line, before='#pragma once\n'):
    """Puts `line` into a file: after its #pragma once (headers) or at its top."""
    text = path.read_text()
    if before in text:
        text = text.replace(before, before + line + '\n', 1)
    else:
        text = line + '\n' + text
    path.write_text(text)


def test_the_copy_passes(tree):
    rc, out = run(str(tree))
    assert (rc, out) == (0, '')


@pytest.mark.parametrize('file,include,edge', [
    # fmt below array: chunk_index.h takes Shape from vocab, not array/region.h.
    ('core/fmt/chunk_index.h', 'core/array/region.h', 'fmt must not include array'),
    # the vocabulary is the standard library only
    ('core/vocab/dataset_info.h', 'core/error.h', 'vocab must not include base'),
    ('core/vocab/shape.h', 'core/filters/filters.h', 'vocab must not include filters'),
    # array below h5lib: VDS sources and library reads are asked of DatasetSources (array/dataset.h)
    ('core/array/dataset.h', 'core/h5lib/h5file.h', 'array must not include h5lib'),
    ('core/array/vds.cpp', 'core/h5lib/h5files.h', 'array must not include h5lib'),
    # the engine is machinery: it neither plans arrays nor opens files
    ('core/engine/engine.h', 'core/array/array.h', 'engine must not include array'),
    ('core/engine/engine.cpp', 'core/h5lib/metadata.h', 'engine must not include h5lib'),
    # the files layer knows no run model and no write path (the protocol's types are its own)
    ('core/h5lib/h5proto.h', 'core/euxfel/h5meta.h', 'h5lib must not include euxfel'),
    ('core/h5lib/h5helper.cpp', 'core/write/writer.h', 'h5lib must not include write'),
    ('core/array/region.cpp', 'helper/h5lib.h', 'array must not include helper'),
    ('core/filters/filters.cpp', 'core/euxfel/run.h', 'filters must not include euxfel'),
    ('core/engine/threadpool.h', 'core/array/array.h', 'engine must not include array'),
    # core knows nothing of the virtual tree or FUSE; vfs nothing of FUSE
    ('core/euxfel/run.h', 'vfs/tree.h', 'euxfel must not include vfs'),
    ('vfs/tree.h', 'fusefs/adapter.h', 'vfs must not include fusefs'),
])
def test_a_forbidden_include_fails(tree, file, include, edge):
    target = tree / file
    assert target.exists() and (tree / include).exists()
    add_line(target, f'#include "{include}"')
    rc, out = run(str(tree))
    assert rc == 1
    assert f'{file}: {edge} ("{include}")' in out.splitlines()


def test_a_cycle_among_the_folders_fails(tree, tmp_path):
    """The table of allowed includes is a strict order, so no folder cycle passes it; were it
    loosened (a copy of the script allowing array -> h5lib), the cycle an include makes is named."""
    script = tmp_path / 'check_includes.py'
    text = open(SCRIPT).read()
    loosened = text.replace("'array': _CORE_LOW + ['fmt', 'filters', 'engine'],",
                            "'array': _CORE_LOW + ['fmt', 'filters', 'engine', 'h5lib'],")
    assert loosened != text
    script.write_text(loosened)
    add_line(tree / 'core' / 'array' / 'vds.cpp', '#include "core/h5lib/h5file.h"')
    p = subprocess.run([sys.executable, str(script), str(tree)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert 'include cycle: array -> h5lib -> array' in p.stdout.splitlines(), p.stdout


def test_an_unnamed_core_folder_fails(tree):
    (tree / 'core' / 'misc').mkdir()
    (tree / 'core' / 'misc' / 'thing.h').write_text('#pragma once\n')
    rc, out = run(str(tree))
    assert rc == 1
    assert out.startswith('core/misc/thing.h: in a folder of core that no layer names')


def daemon_side_file(tree):
    """A file of the copy marked `// Side: daemon` (the write path's public interface)."""
    for dirpath, _, names in os.walk(tree / 'core'):
        for n in sorted(names):
            p = osp.join(dirpath, n)
            with open(p) as f:
                if any(line.startswith('// Side: daemon') for line in f.read(2000).splitlines()):
                    return p
    pytest.fail('no file says "// Side: daemon"')


def test_a_daemon_side_file_that_reaches_libhdf5_fails(tree):
    from pathlib import Path
    f = Path(daemon_side_file(tree))
    rel = f.relative_to(tree).as_posix()
    # Through a chain: a harmless-looking vocab header that includes <hdf5.h>.
    (tree / 'core' / 'vocab' / 'sneaky.h').write_text('#pragma once\n#include <hdf5.h>\n')
    add_line(f, '#include "core/vocab/sneaky.h"')
    rc, out = run(str(tree))
    assert rc == 1
    assert f'{rel}: daemon side, but reaches libhdf5: {rel} -> core/vocab/sneaky.h -> <hdf5.h>' in out.splitlines()


def test_a_daemon_side_file_that_calls_libhdf5_fails(tree):
    from pathlib import Path
    f = Path(daemon_side_file(tree))
    rel = f.relative_to(tree).as_posix()
    # Named in a comment or a string: fine; called: not.
    f.write_text(f.read_text() + '\n// H5Fflush(fid) is the helper\'s\nconst char* kWhy = "H5Dread(x)";\n')
    assert run(str(tree)) == (0, '')
    f.write_text(f.read_text() + '\nint bad() { return H5Fflush(0, H5F_SCOPE_LOCAL); }\n')
    rc, out = run(str(tree))
    assert rc == 1
    assert f'{rel}: daemon side, but calls libhdf5: H5Fflush(' in out.splitlines()
