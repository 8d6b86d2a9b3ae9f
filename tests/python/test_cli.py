"""The command line as a user first meets it: the build tree's `h5direct` name, messages that
carry the name the user typed, --help / the man page / usage.md saying the same of every option,
and `h5direct info` on paths it cannot summarize (saying why) or on a single HDF5 file (its
datasets, against h5py). Nothing here mounts."""
import errno
import json
import os
import os.path as osp
import re
import subprocess

import h5py
import numpy as np
import pytest

import h5d_testlib as tl

pytestmark = pytest.mark.skipif(not tl.BIN or not osp.exists(tl.BIN),
                                reason='H5DIRECT_BIN (the built mount.h5direct) is not set')

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def run(prog, args, timeout=60):
    return subprocess.run([prog] + args, capture_output=True, text=True, timeout=timeout)


def h5direct_link():
    """The build tree's `h5direct`, beside the program (what the README's commands run)."""
    return osp.join(osp.dirname(tl.BIN), 'h5direct')


# ---- the build tree's h5direct --------------------------------------------------------------------

def test_build_tree_h5direct_resolves_inside_the_build_tree_and_runs():
    link = h5direct_link()
    assert osp.islink(link), link
    target = osp.realpath(link)
    assert target == osp.realpath(tl.BIN), (os.readlink(link), target)
    build = osp.dirname(osp.dirname(osp.realpath(tl.BIN)))
    assert target.startswith(build + os.sep)
    r = run(link, ['--help'])
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith('usage: h5direct SOURCE MOUNTPOINT'), r.stdout[:200]
    # --help names the info subcommand, on a usage line of its own
    assert re.search(r'^\s+h5direct info \[--details\] \[--json\] \[-o OPTIONS\] PATH$', r.stdout, re.M), r.stdout[:400]


# ---- messages carry the invoked name --------------------------------------------------------------

@pytest.mark.parametrize('name', ['h5direct', 'mount.h5direct', 'my-arrays'])
def test_messages_carry_the_name_the_user_invoked(name, tmp_path):
    """Every error starts with the name typed (a link of any name: argv[0]), and names no other."""
    prog = str(tmp_path / name)
    os.symlink(tl.BIN, prog)
    missing = str(tmp_path / 'nope')
    src = tl.make_tmpdir('cli-src-')
    cases = {
        'missing mount point': ([src], 'missing SOURCE and/or MOUNTPOINT'),
        'missing source': ([missing, str(tmp_path)], f'source {missing}: {os.strerror(errno.ENOENT)}'),
        'unknown option': ([src, str(tmp_path), '-o', 'threds=2'], "did you mean 'threads'"),
        'unknown argument': (['--frobnicate'], "unknown argument '--frobnicate'"),
        'info, missing path': (['info', missing], f'{missing}: {os.strerror(errno.ENOENT)}'),
        'info, no path': (['info'], 'info needs one PATH'),
    }
    others = {'h5direct', 'mount.h5direct', 'my-arrays'} - {name}
    for what, (args, says) in cases.items():
        r = run(prog, args)
        assert r.returncode != 0, what
        first = r.stderr.splitlines()[0]
        assert first.startswith(name + (' info: ' if what == 'info, missing path' else ': ')), (what, r.stderr)
        assert says in r.stderr, (what, r.stderr)
        for other in others:
            assert not re.search(rf'(^|[\s(]){re.escape(other)}[: ]', r.stderr), (what, other, r.stderr)
    # a wrong command line is followed by the usage, with the name typed
    r = run(prog, [src])
    assert f'usage: {name} SOURCE MOUNTPOINT' in r.stderr and f'{name} info ' in r.stderr, r.stderr


# ---- --help, the man page and usage.md agree ------------------------------------------------------

def help_options():
    """--help's options: name -> (value syntax, default, text); and the accepted-and-ignored names."""
    out = run(tl.BIN, ['--help']).stdout
    opts = {}
    lines = out.splitlines()
    for i, ln in enumerate(lines):
        mo = re.match(r'^  -o (\w+)(?:=(\S+))?$', ln)
        if mo:
            d = re.match(r'^\s+(.*) \[default: (.*)\]$', lines[i + 1])
            assert d, lines[i + 1]
            opts[mo.group(1)] = (mo.group(2) or '', d.group(2), d.group(1))
    ignored = re.search(r'^Accepted and ignored \(mount\(8\), fstab\): (.*)$', out, re.M).group(1)
    return opts, {x.strip() for x in ignored.split(',')}


def usage_md_options():
    """usage.md's options table: name -> (value syntax, default, text); and the ignored names."""
    text = open(osp.join(ROOT, 'docs', 'usage.md')).read()
    table = text.split('<!-- options table: generated names, checked by test_cli.py -->')[1]
    table = table.split('\n\n')[0]
    opts, ignored = {}, set()
    for row in table.splitlines()[3:]:
        cells = [c.strip().replace('\\|', '|') for c in re.split(r'(?<!\\)\|', row.strip()[1:-1])]
        if cells[1] == 'ignored':
            ignored = set(re.findall(r'`([^`]+)`', cells[0]))
            continue
        mo = re.fullmatch(r'`(\w+)(?:=([^`]+))?`', cells[0])
        assert mo, row
        opts[mo.group(1)] = (mo.group(2) or '', cells[1], cells[2])
    return opts, ignored


def man_page_options():
    """docs/mount.h5direct.8's OPTIONS section: every `.BI NAME= VALUE` or `.B NAME` entry ->
    (value syntax, the "(default: X)" that ends its text, the text)."""
    text = open(osp.join(ROOT, 'docs', 'mount.h5direct.8')).read()
    section = text.split('\n.SH OPTIONS\n')[1].split('\n.SH ')[0]
    opts = {}
    for entry in section.split('\n.TP\n'):
        lines = entry.strip().split('\n')
        mo = re.match(r'^\.BI? "?(\w+)(=)?"?(?: (\S+))?$', lines[0])
        if not mo:
            continue  # -f, -s, --help, the ignored names
        body = ' '.join(lines[1:]).replace('\\-', '-')
        d = re.search(r'\(default: ((?:[^()]|\([^()]*\))*)\)\.?$', body)
        opts[mo.group(1)] = ((mo.group(3) or '') if mo.group(2) else '', d.group(1) if d else '(none)', body)
    return opts


def zero_means(text):
    """What the text says a value of 0 means ("0: from its third read"), lower case."""
    return {c.strip().lower() for c in re.findall(r'\b0: ([^;)|]*)', text)}


def differences(ref, other, other_name):
    out = []
    for name in sorted(set(ref) - set(other)):
        out.append(f'{name}: in --help, not in {other_name}')
    for name in sorted(set(other) - set(ref)):
        out.append(f'{name}: in {other_name}, not in --help')
    for name in sorted(set(ref) & set(other)):
        (hv, hd, ht), (ov, od, ot) = ref[name], other[name]
        if hv != ov:
            out.append(f'{name}: value {hv!r} in --help, {ov!r} in {other_name}')
        if hd != od:
            out.append(f'{name}: default {hd!r} in --help, {od!r} in {other_name}')
        for clause in zero_means(ht) - zero_means(ot):
            out.append(f'{name}: --help says "0: {clause}", {other_name} says {sorted(zero_means(ot)) or "nothing of 0"}')
    return out


def test_help_man_page_and_usage_md_agree_on_every_option():
    """Names, value syntax, defaults and what 0 means, for every option: --help (the table that
    parses them) against usage.md's table and the man page's OPTIONS; the failure lists every
    difference. (The man page once said prefetch_after=0 starts at a stream's second read, the
    others the third: the third is what the code does, unit "sequential prefetcher:
    prefetch_after=0 decodes ahead from a stream's third read".)"""
    h, hi = help_options()
    assert len(h) > 20
    d, di = usage_md_options()
    man = man_page_options()
    diffs = differences(h, d, 'usage.md') + differences(h, man, 'the man page')
    if hi != di:
        diffs.append(f'ignored names: --help only {sorted(hi - di)}, usage.md only {sorted(di - hi)}')
    assert not diffs, 'the option lists differ:\n' + '\n'.join(diffs)


def test_agreement_check_sees_a_drift(tmp_path):
    """The check above fails on what it is for: a default, a value syntax or a meaning of 0 that
    one document says otherwise (the man page's old prefetch_after text)."""
    h, _ = help_options()
    man = dict(man_page_options())
    v, dflt, text = man['prefetch_after']
    man['prefetch_after'] = (v, dflt, 'Prefetch once a read stream has gone this far (0: from its second read)')
    man['threads'] = (man['threads'][0], '4', man['threads'][2])
    man['vds_missing'] = ('error', *man['vds_missing'][1:])
    del man['push']
    diffs = differences(h, man, 'the man page')
    assert any(x.startswith('prefetch_after: --help says "0: from its third read"') for x in diffs), diffs
    assert any(x.startswith("threads: default 'the number of cores' in --help, '4'") for x in diffs), diffs
    assert any(x.startswith('vds_missing: value') for x in diffs), diffs
    assert 'push: in --help, not in the man page' in diffs
    assert len(diffs) == 4, diffs


# ---- h5direct info ---------------------------------------------------------------------------------

def test_info_says_why_it_cannot_take_a_path(tmp_path):
    prog = h5direct_link()
    missing = str(tmp_path / 'r0001')
    text = tmp_path / 'notes.txt'
    text.write_text('not hdf5\n')
    empty = tmp_path / 'empty'
    empty.mkdir()
    cases = [
        (missing, os.strerror(errno.ENOENT)),
        (str(text), 'not a directory, nor an HDF5 file: info takes a run directory, a run in a mount, or an HDF5 file'),
        ('/dev/null', 'not a directory: info takes a run directory, a run in a mount, or an HDF5 file'),
        (str(empty), 'no readable EuXFEL data files'),
    ]
    for path, why in cases:
        r = run(prog, ['info', path])
        assert r.returncode == 1 and r.stdout == '', (path, r)
        assert r.stderr == f'h5direct info: {path}: {why}\n', (path, r.stderr)


def test_info_on_a_private_file_says_permission_denied(tmp_path):
    """As another user (nobody), a 0600 file: the reason is the system's own (strerror)."""
    if os.geteuid() != 0:
        pytest.skip('needs root (another user)')
    d = tl.make_tmpdir('cli-priv-')
    f = osp.join(d, 'private.h5')
    with h5py.File(f, 'w') as h:
        h['x'] = np.arange(3)
    os.chmod(f, 0o600)
    r = subprocess.run(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups',
                        h5direct_link(), 'info', f], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and r.stderr == f'h5direct info: {f}: {os.strerror(errno.EACCES)}\n', r.stderr


def test_info_on_an_hdf5_file_lists_its_datasets_as_h5py_sees_them(tmp_path):
    f = str(tmp_path / 'scan.h5')
    with h5py.File(f, 'w') as h:
        h.create_dataset('entry/data', data=np.arange(24, dtype='<u2').reshape(2, 3, 4),
                         chunks=(1, 3, 4), compression='gzip', shuffle=True)
        h['entry/sub/t'] = np.linspace(0, 1, 5, dtype='>f4')
        h['x'] = np.arange(3, dtype='<i8')
        h['scalar'] = 7.5
        h['name'] = 'hello'
        h['alias'] = h5py.SoftLink('/entry')
    want = {}
    with h5py.File(f, 'r') as h:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                want['/' + name] = (list(obj.shape), obj.dtype.str, list(obj.chunks) if obj.chunks else None,
                                    obj.dtype.kind != 'O')
        h.visititems(visit)
    r = run(h5direct_link(), ['info', '--json', f])
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got['file'] == f
    by_path = {d['path']: d for d in got['datasets']}
    assert set(by_path) == set(want)
    for path, (shape, dtype, chunks, is_array) in want.items():
        d = by_path[path]
        assert d['is_array'] == is_array, (path, d)
        if is_array:
            assert (d['shape'], d['dtype'], d['chunks']) == (shape, dtype, chunks), (path, d)
    assert [x['name'] for x in by_path['/entry/data']['filters']] == ['shuffle', 'deflate']
    assert got['links'] == [{'path': '/alias', 'target': '/entry'}]
    text = run(h5direct_link(), ['info', f])
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f'{f}: HDF5 file, {len(want)} datasets (mount it to read them as .npy files)'
    assert '  /entry/data  (2, 3, 4) <u2  chunked (1, 3, 4) shuffle deflate' in lines
    assert '  /x  (3,) <i8  contiguous' in lines
    assert '  /alias/  -> /entry' in lines
