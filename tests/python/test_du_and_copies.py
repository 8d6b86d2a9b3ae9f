"""What du says of a mount, and copies of its files (docs/usage.md, "Copying and du";
docs/semantics.md, "Bytes").

The virtual files hold no storage: their bytes are computed from the source when read. du counts
allocated blocks (st_blocks), so a virtual file claims at most one 512-byte block (none when
empty): du of a mount is a few KiB where its files' sizes add up to far more (the 96 GiB a user saw
for 100 MB of runs). One block, not none: GNU tar --sparse archives a non-empty file with no block
at all as one hole (all zeros, without reading it). du --apparent-size gives the bytes a copy
writes. cp (its sparse heuristics look at st_blocks), tar (with and without --sparse) and rsync
(when installed) must copy every file byte for byte: the oracle is h5py reading the source file,
and EXtra-data's rows read with h5py for a run (test_extra_data_mocks.read_oracle), and every
copied file equals its bytes read through the mount.
"""
import json
import os
import os.path as osp
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import h5d_testlib as tl  # noqa: E402
import test_extra_data_mocks as edm  # noqa: E402


def _write_plain(path):
    rng = np.random.default_rng(11)
    with h5py.File(path, 'w') as f:
        f['contig'] = rng.integers(0, 60000, (256, 1024), dtype='<u2')          # 512 KiB
        f.create_dataset('chunked', data=rng.integers(0, 9, (64, 128, 64), dtype='<u2'),
                         chunks=(4, 128, 64), compression='gzip', shuffle=True)  # 1 MiB, compresses well
        f.create_dataset('zeros', data=np.zeros(300000, '<f8'), chunks=(10000,), compression='gzip')
        f['g/small'] = np.arange(5, dtype='>i4')
        f['g/scalar'] = 2.5
        f.create_dataset('empty', shape=(0, 3), dtype='<f4')
        f['text'] = 'not an array'


@pytest.fixture(scope='module')
def tree():
    d = tl.make_tmpdir('du-src-')
    _write_plain(osp.join(d, 'plain.h5'))
    run = osp.join(d, 'r0238')
    os.makedirs(run)
    edm.make_spb_run(run, raw=True, format_version='1.0', frames=2)
    yield d, edm.read_oracle(run)
    shutil.rmtree(d, ignore_errors=True)


def _files(top):
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [n for n in dirnames if n != '.h5direct']
        for n in filenames:
            p = osp.join(dirpath, n)
            if not osp.islink(p):
                yield p


def _du(*args):
    r = subprocess.run(['du', '-s', '-B1', *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.split()[0])


def test_du_counts_no_storage_for_virtual_files(tree, mount):
    src, _ = tree
    m = mount(src)
    files = list(_files(m.mnt))
    sizes = {p: os.stat(p).st_size for p in files}
    assert len(files) > 100 and sum(sizes.values()) > _du(src)
    for p, size in sizes.items():
        st = os.stat(p)
        assert st.st_blocks == (1 if size else 0), (p, size, st.st_blocks)
    # du: at most a block per file, far below both the source and the apparent sizes
    used = _du(m.path('plain.h5'), m.path('r0238'))
    assert used <= 512 * len(files), used
    with h5py.File(osp.join(src, 'plain.h5'), 'r') as f:
        for name in ('contig', 'chunked', 'zeros'):
            raw = m.path('plain.h5', name + '.raw')
            assert _du(raw) == 512
            assert _du('--apparent-size', raw) == f[name].nbytes
    assert _du('--apparent-size', m.path('plain.h5')) == sum(
        s for p, s in sizes.items() if p.startswith(m.path('plain.h5') + '/'))


def _check_copy(dst, mnt, src, oracle):
    """The copied tree: every file equals its bytes read through the mount; plain.h5's arrays
    equal h5py's, the run's keys the rows EXtra-data would give (read_oracle: h5py)."""
    copied = 0
    for p in _files(mnt):
        rel = osp.relpath(p, mnt)
        if not (rel.startswith('plain.h5/') or rel.startswith('r0238/')):
            continue
        with open(p, 'rb') as a, open(osp.join(dst, rel), 'rb') as b:
            assert a.read() == b.read(), rel
        copied += 1
    with h5py.File(osp.join(src, 'plain.h5'), 'r') as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for n in names:
            d = f[n]
            if d.dtype.kind == 'O':
                assert not osp.exists(osp.join(dst, 'plain.h5', n + '.raw'))
                continue
            with open(osp.join(dst, 'plain.h5', n + '.raw'), 'rb') as fh:
                assert fh.read() == d[()].tobytes(), n
            got = np.load(osp.join(dst, 'plain.h5', n + '.npy'))
            assert got.dtype == d.dtype and np.array_equal(got, d[()]), n
    checked = 0
    for source, ent in oracle['sources'].items():
        for key, k in ent['keys'].items():
            if not k['is_array']:
                continue
            got = np.load(osp.join(dst, 'r0238', *source.split('/'), key + '.npy'))
            assert np.array_equal(got, k['data']), (source, key)
            checked += 1
    assert checked > 10 and copied > 100


COPIES = {
    'cp': lambda mnt, dst: ['cp', '-r', mnt + '/plain.h5', mnt + '/r0238', dst],
    'cp_sparse_always': lambda mnt, dst: ['cp', '-r', '--sparse=always', mnt + '/plain.h5',
                                          mnt + '/r0238', dst],
    'tar': lambda mnt, dst: ['sh', '-c', f'tar -C {mnt} -cf - plain.h5 r0238 | tar -C {dst} -xf -'],
    'tar_sparse': lambda mnt, dst: ['sh', '-c', f'tar -C {mnt} -S -cf - plain.h5 r0238 | tar -C {dst} -xf -'],
    'rsync': lambda mnt, dst: ['rsync', '-a', mnt + '/plain.h5', mnt + '/r0238', dst],
    'rsync_sparse': lambda mnt, dst: ['rsync', '-a', '--sparse', mnt + '/plain.h5', mnt + '/r0238', dst],
}


@pytest.mark.parametrize('tool', list(COPIES))
def test_copies_are_byte_exact(tree, mount, tool):
    if tool.startswith('rsync') and not shutil.which('rsync'):
        pytest.skip('rsync is not installed')
    src, oracle = tree
    m = mount(src)
    dst = tl.make_tmpdir('du-copy-')
    try:
        r = subprocess.run(COPIES[tool](m.mnt, dst), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        _check_copy(dst, m.mnt, src, oracle)
    finally:
        shutil.rmtree(dst, ignore_errors=True)
