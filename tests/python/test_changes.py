"""Source files that change while mounted (runs are written while people read them).

The promise (docs/semantics.md, "Files that change"): h5direct records each file's identity
(device, inode, size, mtime) when it reads its metadata. A new open() of a virtual file whose
source changed reads the metadata again and serves the new contents (the kernel's cached pages
are dropped); a read through a handle opened before the change fails with ESTALE, never returning
new bytes mixed with old ones; a file that changed is listed again (at a lookup, at most once per
-o revalidate seconds), so a grown dataset shows its new shape and a new dataset appears; an open
file keeps reading a source deleted or replaced by rename (its descriptor is held), while opens
made after it fail with ESTALE. Each failure is one log line naming the file."""
import errno
import json
import os
import os.path as osp
import shutil
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
    """An open file keeps reading a deleted source (its descriptor is held: test_deleted_sources.py);
    an open made after the deletion (through a name the kernel still caches) reads nothing of it
    but the pages the kernel already held, and its failed reads are logged saying so."""
    p = osp.join(src, 'run.h5')
    m = mount(src)
    path = m.path('run.h5', 'contig.raw')
    old = _expected(p, 'contig').tobytes()
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, 0) == old[:4096]
        os.unlink(p)
        assert os.pread(fd, 65536, len(old) // 2) == old[len(old) // 2:len(old) // 2 + 65536]
    finally:
        os.close(fd)
    try:
        got = _pread(path, len(old) - 65536, 65536)
        assert got == old[len(old) - 65536:]
    except OSError as e:
        assert e.errno in (errno.ESTALE, errno.ENOENT, errno.EIO)
        if e.errno == errno.ESTALE:
            assert 'run.h5' in m.log() and 'deleted' in m.log(), m.log()
    np.testing.assert_array_equal(np.load(m.path('other.h5', 'contig.npy')),
                                  _expected(osp.join(src, 'other.h5'), 'contig'))
    assert m.proc.poll() is None


# ---- The source tree: names added and removed while mounted -----------------------------------
#
# Every directory shown for a source directory is checked (one stat of the directory) at a
# lookup or listing at most once per -o revalidate seconds, and listed again when it changed
# (docs/semantics.md, "Files that change"). Waiting for a change to show is a poll with a
# generous deadline, not a timing claim.

DEADLINE = 30.0


def _wait_until(pred, what):
    t0 = time.monotonic()
    while True:
        got = pred()
        if got:
            return got
        assert time.monotonic() - t0 < DEADLINE, 'not seen within the deadline: ' + what
        time.sleep(0.1)


def _small(path, seed):
    """A small HDF5 file (h5py) with one dataset `x`; returns its values."""
    x = np.random.default_rng(seed).integers(0, 1 << 20, 5000, dtype='<i4')
    with h5py.File(path, 'w') as f:
        f['x'] = x
    return x


def _names(path):
    return sorted(n for n in os.listdir(path) if not n.startswith('.'))


@pytest.fixture
def tree():
    """A proposal tree: p900001/raw/r0001/{a.h5, sub/b.h5}."""
    d = osp.join(tl.make_tmpdir('tree-'), 'p900001')
    os.makedirs(osp.join(d, 'raw', 'r0001', 'sub'))
    _small(osp.join(d, 'raw', 'r0001', 'a.h5'), 1)
    _small(osp.join(d, 'raw', 'r0001', 'sub', 'b.h5'), 2)
    return d


def test_tree_changes_show_while_mounted(tree, mount):
    """New and deleted files and directories anywhere in the tree (a run's parent, a run
    directory, nested directories, a plain .h5) show without a remount, by lookup and by
    listing; the kernel's cached names (positive and negative) do not hide them."""
    raw = osp.join(tree, 'raw')
    m = mount(tree, 'revalidate=1')
    assert _names(m.path('raw')) == ['r0001']
    assert _names(m.path('raw', 'r0001')) == ['a.h5', 'sub']
    assert _names(m.path('raw', 'r0001', 'a.h5')) == ['x.json', 'x.npy', 'x.raw']
    assert _names(m.path('raw', 'r0001', 'sub', 'b.h5')) == ['x.json', 'x.npy', 'x.raw']
    assert not osp.exists(m.path('raw', 'r0002'))   # the kernel keeps the negative answer
    # added: a new run directory with a nested directory and file, a plain file beside others
    os.makedirs(osp.join(raw, 'r0002', 'deep'))
    c = _small(osp.join(raw, 'r0002', 'deep', 'c.h5'), 3)
    new = _small(osp.join(raw, 'r0001', 'new.h5'), 4)
    # removed: a file and a directory whose names the kernel has cached
    os.unlink(osp.join(raw, 'r0001', 'a.h5'))
    shutil.rmtree(osp.join(raw, 'r0001', 'sub'))
    # by lookup alone (no listing of raw/ first), down the new nested path
    _wait_until(lambda: osp.exists(m.path('raw', 'r0002', 'deep', 'c.h5', 'x.npy')),
                'raw/r0002/deep/c.h5/x.npy looked up')
    np.testing.assert_array_equal(np.load(m.path('raw', 'r0002', 'deep', 'c.h5', 'x.npy')), c)
    _wait_until(lambda: not osp.exists(m.path('raw', 'r0001', 'a.h5', 'x.npy')), 'a.h5 gone (lookup)')
    _wait_until(lambda: not osp.exists(m.path('raw', 'r0001', 'sub')), 'sub gone (lookup)')
    with pytest.raises(FileNotFoundError):
        np.load(m.path('raw', 'r0001', 'a.h5', 'x.npy'))
    # by listing
    _wait_until(lambda: _names(m.path('raw')) == ['r0001', 'r0002'], 'r0002 listed')
    _wait_until(lambda: _names(m.path('raw', 'r0001')) == ['new.h5'], 'raw/r0001 listed anew')
    np.testing.assert_array_equal(np.load(m.path('raw', 'r0001', 'new.h5', 'x.npy')), new)
    # a whole directory removed, then made again with other contents
    shutil.rmtree(osp.join(raw, 'r0002'))
    _wait_until(lambda: _names(m.path('raw')) == ['r0001'], 'r0002 gone from the listing')
    os.makedirs(osp.join(raw, 'r0002'))
    e = _small(osp.join(raw, 'r0002', 'e.h5'), 5)
    _wait_until(lambda: osp.exists(m.path('raw', 'r0002', 'e.h5', 'x.npy')), 'r0002/e.h5 made again')
    assert _names(m.path('raw', 'r0002')) == ['e.h5']
    np.testing.assert_array_equal(np.load(m.path('raw', 'r0002', 'e.h5', 'x.npy')), e)
    assert m.proc.poll() is None


def test_file_written_while_listed_appears_once_complete(tree, mount):
    """A file h5py is still writing when its directory is listed (no superblock on disk yet, or
    one libhdf5 has not finished) shows once written, though writing into it does not change
    its directory."""
    d = osp.join(tree, 'raw', 'r0001')
    m = mount(tree, 'revalidate=1')
    assert _names(m.path('raw', 'r0001')) == ['a.h5', 'sub']
    x = np.arange(100000, dtype='<f8')
    f = h5py.File(osp.join(d, 'late.h5'), 'w')
    try:
        f['x'] = x
        time.sleep(1.5)   # a check is due: the directory is listed while the file is open
        _names(m.path('raw', 'r0001'))
        time.sleep(1.5)
        _names(m.path('raw', 'r0001'))
    finally:
        f.close()
    _wait_until(lambda: 'late.h5' in _names(m.path('raw', 'r0001')) and
                osp.exists(m.path('raw', 'r0001', 'late.h5', 'x.npy')), 'late.h5 once closed')
    _wait_until(lambda: np.array_equal(np.load(m.path('raw', 'r0001', 'late.h5', 'x.npy')), x),
                'late.h5 read as h5py wrote it')
    assert m.proc.poll() is None


def test_deleted_or_replaced_file_open_readers_get_old_bytes_or_estale(src, mount):
    """A file deleted while open: its open descriptors and mappings read its old bytes or fail
    with ESTALE, never other bytes; its name goes from the listing; a new file put under the
    same name is a new file, and the old descriptors still never read it."""
    p = osp.join(src, 'run.h5')
    m = mount(src, 'revalidate=1')
    old = {n: _expected(p, n) for n in ('contig', 'chunked')}
    fds = {n: os.open(m.path('run.h5', n + '.raw'), os.O_RDONLY) for n in old}
    mm = np.load(m.path('run.h5', 'contig.npy'), mmap_mode='r')
    held = np.array(mm[:N // 4])    # these pages are held by the mapping
    try:
        for n, fd in fds.items():
            assert os.pread(fd, 4096, 0) == old[n].tobytes()[:4096]

        def check_old_or_estale():
            for n, fd in fds.items():
                ob = old[n].tobytes()
                for off in (0, len(ob) // 3, len(ob) - 100000):
                    try:
                        got = os.pread(fd, 65536, off)
                    except OSError as e:
                        assert e.errno == errno.ESTALE, e
                        continue
                    assert got == ob[off:off + len(got)], (n, off)
            np.testing.assert_array_equal(mm[:N // 4], held)

        os.unlink(p)
        check_old_or_estale()
        _wait_until(lambda: _names(m.mnt) == ['other.h5'], 'run.h5 gone from the listing')
        with pytest.raises(FileNotFoundError):
            np.load(m.path('run.h5', 'contig.npy'))
        check_old_or_estale()
        # another file under the old name
        _bump_mtime_clock()
        _write(p, seed=5)
        new = _expected(p, 'contig')
        _wait_until(lambda: osp.exists(m.path('run.h5', 'contig.npy')), 'run.h5 again')
        np.testing.assert_array_equal(np.load(m.path('run.h5', 'contig.npy')), new)
        check_old_or_estale()
    finally:
        for fd in fds.values():
            os.close(fd)
        del mm
    np.testing.assert_array_equal(np.load(m.path('other.h5', 'contig.npy')),
                                  _expected(osp.join(src, 'other.h5'), 'contig'))
    assert m.proc.poll() is None


def test_revalidate_0_keeps_directory_listings(tree, mount):
    """-o revalidate=0: directories are listed once per mount (a new file shows after a
    remount)."""
    m = mount(tree, 'revalidate=0')
    assert _names(m.path('raw', 'r0001')) == ['a.h5', 'sub']
    _small(osp.join(tree, 'raw', 'r0001', 'new.h5'), 4)
    time.sleep(2.5)   # several periods of the default revalidate=1
    assert _names(m.path('raw', 'r0001')) == ['a.h5', 'sub']
    m.close()
    assert _names(mount(tree).path('raw', 'r0001')) == ['a.h5', 'new.h5', 'sub']
