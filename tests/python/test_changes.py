"""Source files that change while mounted (runs are written while people read them).

The promise (docs/semantics.md, "Files that change"): h5direct records each file's identity
(device, inode, size, mtime) when it reads its metadata. A new open() of a virtual file whose
source changed reads the metadata again and serves the new contents (the kernel's cached pages
are dropped); a read through a handle opened before the change fails with ESTALE, never returning
new bytes mixed with old ones; a file that changed is listed again (at a lookup, at most once per
-o revalidate seconds), so a grown dataset shows its new shape and a new dataset appears; a
deleted file's reads fail with ESTALE. Each failure is one log line naming the file."""
import errno
import json
import os
import os.path as osp
import time

import h5py
import numpy as np
import pytest

import h5d_testlib as tl

N = 1 << 20  # 4 MiB of <i4: far more than the kernel's read-ahead


def _write(path, seed, extra=None, mode='w'):
    rng = np.random.default_rng(seed)
    with h5py.File(path, mode) as f:
        f['contig'] = rng.integers(0, 1 << 30, N, dtype='<i4')
        f.create_dataset('chunked', data=rng.integers(0, 1000, N, dtype='<i4'), chunks=(16384,),
                         compression='gzip', maxshape=(None,))
        if extra:
            extra(f)


def _expected(path, name):
    with h5py.File(path, 'r') as f:
        return f[name][()]


def _bump_mtime_clock():
    time.sleep(0.05)  # file times are coarse (jiffies): a rewrite must not share the old mtime


def _pread(path, off, n):
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, n, off)
    finally:
        os.close(fd)


@pytest.fixture
def src():
    d = tl.make_tmpdir('chg-')
    _write(osp.join(d, 'run.h5'), seed=1)
    _write(osp.join(d, 'other.h5'), seed=9)
    return d


@pytest.mark.parametrize('how', ['in_place', 'rename'])
def test_rewritten_file_new_opens_see_new_contents(src, mount, how):
    p = osp.join(src, 'run.h5')
    m = mount(src)
    old = {n: _expected(p, n) for n in ('contig', 'chunked')}
    for n in old:  # whole files read: their pages sit in the kernel's cache (keep_cache)
        np.testing.assert_array_equal(np.load(m.path('run.h5', n + '.npy')), old[n])
    _bump_mtime_clock()
    if how == 'in_place':
        _write(p, seed=2)               # same inode, truncated and written again
    else:
        _write(p + '.tmp', seed=2)
        os.replace(p + '.tmp', p)       # a new inode under the same name
    new = {n: _expected(p, n) for n in ('contig', 'chunked')}
    assert not np.array_equal(new['contig'], old['contig'])
    for n in new:
        np.testing.assert_array_equal(np.load(m.path('run.h5', n + '.npy')), new[n])
        mm = np.load(m.path('run.h5', n + '.npy'), mmap_mode='r')
        np.testing.assert_array_equal(mm, new[n])
        del mm
    # the untouched file is unaffected
    np.testing.assert_array_equal(np.load(m.path('other.h5', 'contig.npy')),
                                  _expected(osp.join(src, 'other.h5'), 'contig'))
    assert m.proc.poll() is None


@pytest.mark.parametrize('name', ['contig', 'chunked'])
def test_open_handle_never_mixes_old_and_new_bytes(src, mount, name):
    p = osp.join(src, 'run.h5')
    m = mount(src)
    old = _expected(p, name).tobytes()
    path = m.path('run.h5', name + '.raw')
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, 0) == old[:4096]
        _bump_mtime_clock()
        _write(p, seed=3)
        new = _expected(p, name).tobytes()
        stale = 0
        for off in (len(old) // 2, len(old) - 70000, 3 * len(old) // 4, 0):
            try:
                got = os.pread(fd, 65536, off)
            except OSError as e:
                assert e.errno == errno.ESTALE, e
                stale += 1
                continue
            # whatever is served comes from one version: the old one, as this handle was opened
            assert got == old[off:off + len(got)], off
            assert got != new[off:off + len(got)] or old[off:off + len(got)] == new[off:off + len(got)]
        assert stale >= 1  # the change was detected on a range nobody had read yet
    finally:
        os.close(fd)
    time.sleep(0.1)
    log = m.log()
    assert 'run.h5' in log and any(w in log for w in ('modified', 'replaced', 'changed size')), log
    # a new open reads the new file
    assert _pread(path, 0, 1 << 16) == new[:1 << 16]
    assert m.proc.poll() is None


def test_grown_file(src, mount):
    """Appending a dataset (the file grows): existing datasets read the same bytes at the next
    open; the new dataset appears after a remount (listings are cached)."""
    p = osp.join(src, 'run.h5')
    m = mount(src)
    old = _expected(p, 'chunked')
    np.testing.assert_array_equal(np.load(m.path('run.h5', 'chunked.npy')), old)
    size0 = os.path.getsize(p)
    _bump_mtime_clock()
    with h5py.File(p, 'a') as f:
        f['appended'] = np.arange(300000, dtype='<f8')
    assert os.path.getsize(p) > size0
    np.testing.assert_array_equal(np.load(m.path('run.h5', 'chunked.npy')), old)
    np.testing.assert_array_equal(np.load(m.path('run.h5', 'contig.npy')), _expected(p, 'contig'))
    m.close()
    m2 = mount(src)
    np.testing.assert_array_equal(np.load(m2.path('run.h5', 'appended.npy')),
                                  np.arange(300000, dtype='<f8'))


def test_resized_dataset(src, mount):
    """A dataset resized (appended to) while mounted: its file's directory is listed again
    (checked at most once per -o revalidate second at a lookup; the kernel keeps the names as
    long), so new opens see the new shape in .npy and .json alike; until then the name listed
    before serves the rows it was listed with, never ESTALE. An open mapping keeps the bytes it
    holds. Other datasets read normally."""
    p = osp.join(src, 'run.h5')
    m = mount(src)
    mm = np.load(m.path('run.h5', 'chunked.npy'), mmap_mode='r')
    old = np.array(mm)   # every page read: the mapping holds them
    _bump_mtime_clock()
    with h5py.File(p, 'a') as f:
        d = f['chunked']
        d.resize((N + 50000,))
        d[N:] = 7
    new = _expected(p, 'chunked')
    first = np.load(m.path('run.h5', 'chunked.npy'))   # the old name, or the new one
    assert first.shape in ((N,), (N + 50000,))
    np.testing.assert_array_equal(first, new[:len(first)])
    t0 = time.monotonic()
    while True:
        side = json.load(open(m.path('run.h5', 'chunked.json')))
        got = np.load(m.path('run.h5', 'chunked.npy'))
        if got.shape == (N + 50000,) and side['shape'] == [N + 50000]:
            break
        assert time.monotonic() - t0 < 30, (got.shape, side['shape'])
        time.sleep(0.2)
    np.testing.assert_array_equal(got, new)
    np.testing.assert_array_equal(mm, old)
    del mm
    np.testing.assert_array_equal(np.load(m.path('run.h5', 'contig.npy')), _expected(p, 'contig'))
    assert m.proc.poll() is None


def test_new_dataset_appears_without_remount(src, mount):
    p = osp.join(src, 'run.h5')
    m = mount(src)
    assert 'appended.npy' not in os.listdir(m.path('run.h5'))
    _bump_mtime_clock()
    with h5py.File(p, 'a') as f:
        f['appended'] = np.arange(1000, dtype='<f8')
    t0 = time.monotonic()
    while 'appended.npy' not in os.listdir(m.path('run.h5')):
        assert time.monotonic() - t0 < 30
        time.sleep(0.2)
    np.testing.assert_array_equal(np.load(m.path('run.h5', 'appended.npy')),
                                  np.arange(1000, dtype='<f8'))


def test_revalidate_0_keeps_listings(src, mount):
    """-o revalidate=0: sources are taken as unchanging (names cached for entry_timeout); a
    resized dataset's open fails with ESTALE (its listed shape no longer holds) until a remount."""
    p = osp.join(src, 'run.h5')
    m = mount(src, 'revalidate=0')
    np.load(m.path('run.h5', 'chunked.npy'), mmap_mode='r')
    _bump_mtime_clock()
    with h5py.File(p, 'a') as f:
        f['chunked'].resize((N - 100,))
    time.sleep(2.5)   # several periods of the default revalidate=1
    with pytest.raises(OSError) as e:
        np.load(m.path('run.h5', 'chunked.npy'))
    assert e.value.errno == errno.ESTALE
    assert 'chunked' in m.log() and 'size changed' in m.log(), m.log()


def test_deleted_file(src, mount):
    p = osp.join(src, 'run.h5')
    m = mount(src)
    path = m.path('run.h5', 'contig.raw')
    old = _expected(p, 'contig').tobytes()
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, 0) == old[:4096]
        os.unlink(p)
        with pytest.raises(OSError) as e:
            os.pread(fd, 65536, len(old) // 2)
        assert e.value.errno == errno.ESTALE
    finally:
        os.close(fd)
    # new opens: cached names may still resolve, but no read returns bytes of a deleted file
    # except those the kernel already held
    try:
        got = _pread(path, len(old) - 65536, 65536)
        assert got == old[len(old) - 65536:]
    except OSError as e:
        assert e.errno in (errno.ESTALE, errno.ENOENT, errno.EIO)
    assert 'run.h5' in m.log() and 'deleted' in m.log(), m.log()
    np.testing.assert_array_equal(np.load(m.path('other.h5', 'contig.npy')),
                                  _expected(osp.join(src, 'other.h5'), 'contig'))
    assert m.proc.poll() is None
