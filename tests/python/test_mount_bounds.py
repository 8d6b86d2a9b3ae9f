"""Memory and descriptors bounded against the input: symlink loops in the source, partly
written chunks of a writable mount (write_buffer), max_open_files against the process's
descriptor limit. Memory is the daemon's peak resident size (VmHWM in /proc/PID/status)."""
import errno
import json
import os
import os.path as osp
import re
import shutil
import subprocess

import h5py
import numpy as np
import pytest

import h5d_testlib as tl

SANITIZED = bool(os.environ.get('H5D_SANITIZED'))  # ASan's shadow memory: no RSS bounds there


def vm_hwm(pid):
    with open(f'/proc/{pid}/status') as f:
        return [int(ln.split()[1]) for ln in f if ln.startswith('VmHWM')][0] << 10


def test_symlink_loops_are_left_out_and_find_terminates(mount):
    """ln -s . self, and a -> b -> a through two directories: each loop is left out of the tree
    (found by the device and inode of the directory it leads to) with a log line; find over the
    mount ends, and the daemon's memory stays small."""
    src = tl.make_tmpdir('loop-')
    for d in ('a', 'b'):
        os.mkdir(osp.join(src, d))
        with h5py.File(osp.join(src, d, f'{d}.h5'), 'w') as f:
            f['x'] = np.arange(10)
    os.symlink('.', osp.join(src, 'self'))
    os.symlink('../b', osp.join(src, 'a', 'to_b'))
    os.symlink('../a', osp.join(src, 'b', 'to_a'))
    os.symlink(src, osp.join(src, 'a', 'to_top'))
    m = mount(src)
    r = subprocess.run(['find', m.mnt], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    found = sorted(osp.relpath(p, m.mnt) for p in r.stdout.split())
    assert 'self' not in found
    assert 'a/to_top' not in found
    # a/to_b is b seen from a (no loop); inside it, to_a leads back to a: left out
    assert 'a/to_b/b.h5/x.npy' in found and 'b/to_a/a.h5/x.npy' in found
    assert 'a/to_b/to_a' not in found and 'b/to_a/to_b' not in found
    assert len(found) < 40, found
    log = m.log()
    assert log.count('symlink loop') >= 4, log
    assert f'left out {osp.join(src, "self")}: symlink loop' in log
    if not SANITIZED:
        assert vm_hwm(m.proc.pid) < 150 << 20


def _make_spec(m, name, spec):
    with open(m.path('w.h5', name + '.json'), 'w') as f:
        json.dump(spec, f)


def test_partly_written_chunks_are_bounded_by_write_buffer(mount):
    """A gzip dataset of 24 chunks of 16 MiB, one byte written into each: with write_buffer=48M
    the partial chunks beyond the budget are spilled to the file (padded with fill), so the
    daemon never holds 24 of them (384 MiB); every byte reads back right, through the mount and
    through h5py."""
    src = tl.make_tmpdir('wbuf-')
    m = mount(src, 'writable,write_compression=gzip,write_buffer=48M')
    os.mkdir(m.path('w.h5'))
    chunk = 16 << 20
    _make_spec(m, 'd', {'shape': [24 * chunk], 'dtype': '|u1', 'chunks': [chunk]})
    fd = os.open(m.path('w.h5', 'd.raw'), os.O_RDWR)
    for c in range(24):
        os.pwrite(fd, bytes([c + 1]), c * chunk + 1000 + c)
    for c in range(24):  # read back: spilled chunks come from the file
        assert os.pread(fd, 3, c * chunk + 999 + c) == bytes([0, c + 1, 0])
    os.close(fd)
    hwm = vm_hwm(m.proc.pid)
    log = m.log()
    assert 'write_buffer full' in log
    m.close()
    with h5py.File(osp.join(src, 'w.h5'), 'r') as f:
        d = f['d']
        for c in range(24):
            assert d[c * chunk + 999 + c: c * chunk + 1002 + c].tolist() == [0, c + 1, 0]
        assert int(np.count_nonzero(d[:16 << 20])) == 1
    if not SANITIZED:
        # The budget (3 chunks); one spilled chunk being encoded (its copy, the shuffled copy,
        # the deflate output: 3 chunks); spilled chunks read back by concurrent requests (the
        # kernel's read-ahead: 2 chunks each, decoded and unshuffled); the daemon itself
        # (~15 MiB). Measured 144-210 MiB. Without the budget: 24 chunks held, over 400 MiB.
        assert hwm < (48 << 20) + 8 * chunk + (64 << 20), hwm >> 20


def test_write_buffer_full_gives_enospc_and_too_large_chunks_efbig(mount):
    """Partial chunks of another dataset fill write_buffer=1M: a write that needs one more chunk
    gets ENOSPC (with a log line), the data already written stays; a dataset whose chunk alone
    exceeds the budget is refused at creation with EFBIG."""
    src = tl.make_tmpdir('wbuf-')
    m = mount(src, 'writable,write_compression=gzip,write_buffer=1M')
    os.mkdir(m.path('w.h5'))
    half = 512 << 10
    _make_spec(m, 'a', {'shape': [4 * half], 'dtype': '|u1', 'chunks': [half]})
    _make_spec(m, 'b', {'shape': [4 * half], 'dtype': '|u1', 'chunks': [half]})
    fa = os.open(m.path('w.h5', 'a.raw'), os.O_RDWR)
    os.pwrite(fa, b'\x07', 10)
    os.pwrite(fa, b'\x08', half + 10)        # two partial chunks of a: the budget is full
    fb = os.open(m.path('w.h5', 'b.raw'), os.O_RDWR)
    with pytest.raises(OSError) as e:
        os.pwrite(fb, b'\x09', 10)
    assert e.value.errno == errno.ENOSPC
    assert 'write_buffer=1048576 bytes is full' in m.log()
    assert os.pread(fa, 1, half + 10) == b'\x08'
    os.close(fb)
    os.close(fa)
    with pytest.raises(OSError) as e:
        _make_spec(m, 'c', {'shape': [4 << 20], 'dtype': '|u1', 'chunks': [2 << 20]})
    assert e.value.errno == errno.EFBIG
    assert 'does not fit write_buffer' in m.log()


def test_max_open_files_above_the_descriptor_limit_is_lowered(mount):
    """max_open_files=240 under ulimit -n 256: lowered at start-up with a warning saying why, so
    that listing 400 files (each opened for its signature, then as HDF5) never fails with
    EMFILE."""
    if not shutil.which('prlimit'):
        pytest.skip('needs prlimit')
    src = tl.make_tmpdir('nofile-')
    proto = osp.join(src, 'f000.h5')
    with h5py.File(proto, 'w') as f:
        f['x'] = np.arange(5)
    for i in range(1, 400):
        shutil.copyfile(proto, osp.join(src, f'f{i:03d}.h5'))
    wrapper = osp.join(tl.make_tmpdir('nofile-bin-'), 'h5direct-nofile256')
    with open(wrapper, 'w') as f:
        f.write(f'#!/bin/sh\nexec prlimit --nofile=256:256 -- {tl.BIN} "$@"\n')
    os.chmod(wrapper, 0o755)
    real_bin, tl.BIN = tl.BIN, wrapper
    try:
        m = mount(src, 'max_open_files=240')
    finally:
        tl.BIN = real_bin
    assert 'max_open_files=240 does not fit the descriptor limit (ulimit -n 256' in m.log()
    names = [n for n in os.listdir(m.mnt) if n != '.h5direct']
    assert len(names) == 400
    for n in names:  # each file's own directory: the file opened as HDF5 and kept
        assert sorted(os.listdir(m.path(n))) == ['.attrs.json', 'x.json', 'x.npy', 'x.raw']
    assert np.array_equal(np.load(m.path('f399.h5', 'x.npy')), np.arange(5))
    s = m.stats()
    assert s['error_replies'] == {}, s['error_replies']


def test_every_error_reply_has_one_log_line(mount):
    """Each error reply (calls that cannot change the tree, a write to an existing dataset, a
    damaged chunk) is counted in stats.json and logged once: as many '(inode N): ' lines as
    error replies. A writable mount, so that those calls reach the daemon (on a read-only mount
    the kernel refuses them itself); -o debug, where expected errors (EPERM) are logged too."""
    src = tl.make_tmpdir('errlog-')
    p = osp.join(src, 'c.h5')
    tl.write_corrupt_chunk_file(p)
    m = mount(src, 'writable,debug')
    attempts = [lambda: os.unlink(m.path('c.h5', 'good.npy')),
                lambda: os.rename(m.path('c.h5', 'good.npy'), m.path('c.h5', 'x.npy')),
                lambda: os.symlink('x', m.path('lnk')),
                lambda: open(m.path('c.h5', 'good.npy'), 'r+b'),
                lambda: os.setxattr(m.path('c.h5', 'good.npy'), 'user.x', b'1')]
    for fn in attempts:
        with pytest.raises(OSError):
            fn()
    fd = os.open(m.path('c.h5', 'z.raw'), os.O_RDONLY)
    with pytest.raises(OSError) as e:
        os.pread(fd, 4, 30000 * 4)
    assert e.value.errno == errno.EIO
    os.close(fd)
    s = m.stats()
    total = s['errors']['total']
    assert total >= len(attempts) + 1, s['errors']
    lines = [ln for ln in m.log().splitlines() if re.search(r'\(inode \d+\): ', ln)]
    assert len(lines) == total, (s['error_replies'], lines)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which('setpriv') or not shutil.which('prlimit'),
                    reason='needs root (to run the daemon as another user), setpriv and prlimit')
def test_threads_beyond_the_process_limit_are_refused():
    """A daemon run by a user whose process limit (ulimit -u 20) cannot hold threads +
    max_threads is refused before mounting, saying which limit and what it needs."""
    src = tl.make_tmpdir('nproc-')
    with h5py.File(osp.join(src, 'a.h5'), 'w') as f:
        f['x'] = np.arange(3)
    mnt = tl.make_tmpdir('nproc-mnt-')
    r = subprocess.run(['setpriv', '--reuid=61004', '--regid=61004', '--clear-groups',
                        'prlimit', '--nproc=20:20', '--', tl.BIN, src, mnt, '-f', '-o',
                        'threads=4,max_threads=16'], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert 'need 30 processes (threads + max_threads + hdf5_helpers + 8) but the limit is 20' in r.stderr, r.stderr
    assert not osp.ismount(mnt)
