"""tools/check_docs.py (ctest docs_check keeps the docs true to the program and the tests): it
passes on a copy of the docs, README and tests, and fails, naming the file and the problem, once
an option goes undocumented, a cited test does not exist or a placeholder is left in that copy."""
import os.path as osp
import shutil
import subprocess
import sys

import pytest

import h5d_testlib as tl

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SCRIPT = osp.join(ROOT, 'tools', 'check_docs.py')


def run(root, binary=True):
    args = [sys.executable, SCRIPT, str(root)] + (['--binary', tl.BIN] if binary and tl.BIN else [])
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout


@pytest.fixture
def tree(tmp_path):
    """A copy of what the check reads: docs/, README.md, tests/, bench/ and the C++ sources."""
    for d in ('docs', 'tests', 'bench', 'core', 'vfs', 'fusefs', 'daemon', 'config', 'helper'):
        shutil.copytree(osp.join(ROOT, d), tmp_path / d, ignore=shutil.ignore_patterns('*.o', '__pycache__'))
    shutil.copy(osp.join(ROOT, 'README.md'), tmp_path / 'README.md')
    return tmp_path


def edit(path, old, new):
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


@pytest.mark.skipif(not tl.BIN or not osp.exists(tl.BIN), reason='H5DIRECT_BIN is not set')
def test_the_copy_passes(tree):
    assert run(tree) == (0, '')


@pytest.mark.skipif(not tl.BIN or not osp.exists(tl.BIN), reason='H5DIRECT_BIN is not set')
def test_an_undocumented_option_fails(tree):
    """Every code span naming the option (or flag) gone from usage.md: the check names it."""
    usage = tree / 'docs' / 'usage.md'
    text = usage.read_text()
    assert '`io_depth' in text and '`-s`' in text
    usage.write_text(text.replace('`io_depth', '`iodepth').replace('`-s`', '-s'))
    rc, out = run(tree)
    assert rc == 1
    lines = out.splitlines()
    assert 'docs/usage.md: the option io_depth (--help) is not documented (as `io_depth`)' in lines, out
    assert 'docs/usage.md: the flag -s (--help) is not documented (as `-s`)' in lines, out


@pytest.mark.skipif(not tl.BIN or not osp.exists(tl.BIN), reason='H5DIRECT_BIN is not set')
def test_a_wrong_usage_line_fails(tree):
    edit(tree / 'README.md', '[-f] [-s] [-d] [-o', '[-f] [-o')
    rc, out = run(tree)
    assert rc == 1
    assert 'README.md: the usage line "h5direct SOURCE MOUNTPOINT [-f] [-s] [-d] [-o opt[,opt...]]" (--help) is missing' \
        in out.splitlines(), out


@pytest.mark.parametrize('old,new,problem', [
    # a test function renamed away
    ('`test_mount_basic.py::test_tree_shape`', '`test_mount_basic.py::test_the_tree_shape`',
     'cites test_mount_basic.py::test_the_tree_shape, which does not exist'),
    # ::name after a file: checked in that file
    ('`::test_links_are_followed`', '`::test_links_are_not_followed`',
     'cites test_mount_basic.py::test_links_are_not_followed, which does not exist'),
    # a file that is gone
    ('`test_hung_source.py`', '`test_hanging_source.py`', 'cites test_hanging_source.py, which does not exist'),
    # Catch2 cases by name and by tag
    ('unit "permissions mirror the source without write bits"', 'unit "permissions mirror the source"',
     'cites the unit test "permissions mirror the source", which does not exist'),
    ('unit `[splice]`', 'unit `[splicing]`', 'cites the unit test tag [splicing], which no test has'),
    ('`fuzz_h5proto`', '`fuzz_h5protocol`', 'cites fuzz_h5protocol, which does not exist'),
])
def test_a_cited_test_that_does_not_exist_fails(tree, old, new, problem):
    sem = tree / 'docs' / 'semantics.md'
    edit(sem, old, new)
    rc, out = run(tree, binary=False)
    assert rc == 1
    assert len(out.splitlines()) == 1 and out.startswith('docs/semantics.md:') and problem in out, out


@pytest.mark.parametrize('text', ['TO BE FILLED: the table', 'TODO check this', 'the rate is TBD', 'FIXME',
                                  'XXX MB/s'])
def test_a_placeholder_fails(tree, text):
    with open(tree / 'docs' / 'euxfel.md', 'a') as f:
        f.write(f'\n{text}\n')
    rc, out = run(tree, binary=False)
    assert rc == 1 and 'docs/euxfel.md:' in out and 'placeholder' in out, out


def test_legitimate_text_is_no_placeholder(tree):
    """Words that contain the patterns, metavariables and code names stay allowed."""
    with open(tree / 'docs' / 'euxfel.md', 'a') as f:
        f.write('\nTODOS and XXXL are words; `MNT/.h5direct/log` in prose; 0xXXXX; TBDs; the check looks '
                'for `TODO` and `TO BE FILLED`\n')
    assert run(tree, binary=False) == (0, '')


def test_a_mount_point_placeholder_in_a_message_fails(tree):
    with open(tree / 'daemon' / 'mount.cpp', 'a') as f:
        f.write('\nstatic const char* kBad = "see MNT/.h5direct/log";\n')
    rc, out = run(tree, binary=False)
    assert rc == 1 and 'daemon/mount.cpp:' in out and '"MNT/" in a message' in out, out
