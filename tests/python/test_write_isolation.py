"""Writes (-o writable) across the libhdf5 process boundary: every libhdf5 call of a file created
through the mount runs in that file's own HDF5 writer process (an h5direct-helper). A writer
process that is killed, crashes or hangs costs that file only: the writes, fsync() and close()
that needed it fail with EIO (one log line naming the file and the call), other written files and
every read-only part of the mount keep working, the daemon stays up and later creates work. What
is then on disk is never served as wrong bytes. A created file whose bytes its owner changes
directly while the mount holds it open for writing costs at most EIO for that file."""
import errno
import json
import os
import os.path as osp
import re
import signal
import time

import h5py
import numpy as np
import pytest

import h5d_testlib as tl
from h5d_testlib import Mount
from test_isolation import check_good, daemon_alive, write_good

SHAPE = (8, 64, 64)   # u2, chunks of one frame (8 KiB): 8 chunks
CHUNKS = [1, 64, 64]


def ref(seed):
    return np.random.default_rng(seed).integers(0, 60000, size=SHAPE).astype('<u2')


def make_dataset(m, fname, dname='x', compression='gzip'):
    spec = {'shape': list(SHAPE), 'dtype': '<u2'}
    if compression:  # chunked; else contiguous
        spec.update(compression=compression, chunks=CHUNKS)
    with open(m.path(fname, dname + '.json'), 'w') as f:
        json.dump(spec, f)
    return os.open(m.path(fname, dname + '.raw'), os.O_RDWR)


def writer_pid(m, fname):
    """The writer process of a created file, from the daemon's line 'created HDF5 file ...'."""
    for ln in m.log().splitlines():
        mm = re.search(r'created HDF5 file (\S+) \(HDF5 writer process pid (\d+)\)', ln)
        if mm and mm.group(1).endswith('/' + fname):
            return int(mm.group(2))
    raise AssertionError(m.log())


def kill_and_wait(pid):
    os.kill(pid, signal.SIGKILL)
    for _ in range(200):  # gone or a zombie (the daemon reaps it when it next talks to it)
        try:
            with open(f'/proc/{pid}/stat') as f:
                if f.read().split(') ')[-1].startswith('Z'):
                    return
        except FileNotFoundError:
            return
        time.sleep(0.01)
    raise AssertionError(f'writer process {pid} still running')


def failure_lines(m, fname):
    """The daemon's lines saying a file's writer process failed. The one from the writer names
    the file, the dataset and the call; fusefs's release logs every flush that fails at a last
    close (it cannot return it), so that one is left out here."""
    return [ln for ln in m.log().splitlines()
            if 'HDF5 writer process (pid' in ln and fname in ln and 'error:' in ln and 'release (inode' not in ln]


def two_written_files(m, first, seeds):
    """`first` and other.h5 created through the mount, each with a chunked dataset x: returns
    (descriptor, reference) for each."""
    os.mkdir(m.path(first))
    os.mkdir(m.path('other.h5'))
    return [(make_dataset(m, n), ref(s)) for n, s in zip((first, 'other.h5'), seeds)]


def frame_bytes(a, k):
    return a[k].tobytes()


def write_frames(fd, a, frames):
    n = len(frame_bytes(a, 0))
    for k in frames:
        assert os.pwrite(fd, frame_bytes(a, k), k * n) == n


def eio(fn):
    """Runs fn; returns True when it failed with EIO, False when it succeeded (other errors fail)."""
    try:
        fn()
        return False
    except OSError as e:
        assert e.errno == errno.EIO, e
        return True


def served_or_eio(ro_mount_path, src_file, dname):
    """A dataset of a file left by a dead writer, read through a read-only mount: h5py's bytes
    (h5py as the oracle on the same file) or EIO, never other bytes."""
    try:
        with h5py.File(src_file, 'r') as f:
            expected = f[dname][()]
    except Exception:  # h5py cannot read it: the mount must not serve bytes for it either
        expected = None
    try:
        got = np.load(osp.join(ro_mount_path, dname + '.npy'))
    except (OSError, ValueError) as e:
        if isinstance(e, OSError):
            assert e.errno in (errno.EIO, errno.ENOENT), e
        return 'eio'
    assert expected is not None, 'served bytes h5py cannot read'
    assert got.dtype == expected.dtype and np.array_equal(got, expected)
    return 'same'


@pytest.fixture
def srcdir():
    d = tl.make_tmpdir('wiso-src-')
    return d


def test_a_killed_writer_process_costs_only_its_file(srcdir, mount):
    good = write_good(osp.join(srcdir, 'good.h5'), 3)
    m = mount(srcdir, 'writable')
    (fa, a), (fb, b) = two_written_files(m, 'victim.h5', (1, 2))
    fc = make_dataset(m, 'victim.h5', 'plain', compression=None)  # contiguous: pwrite only
    write_frames(fa, a, range(4))
    os.fsync(fa)  # the first four chunks are in the file
    pid_a, pid_b = writer_pid(m, 'victim.h5'), writer_pid(m, 'other.h5')
    assert pid_a != pid_b and pid_a != m.proc.pid
    kill_and_wait(pid_a)

    # The victim's chunked writes need its writer process: EIO, at the latest at fsync.
    failed = [eio(lambda: write_frames(fa, a, range(4, 8)))]
    assert eio(lambda: os.fsync(fa))
    failed.append(eio(lambda: os.close(fa)))
    lines = failure_lines(m, 'victim.h5')
    assert len(lines) == 1, m.log()
    assert f'victim.h5:/x: HDF5 writer process (pid {pid_a}) crashed' in lines[0], lines
    assert 'write_chunk' in lines[0] or 'flush' in lines[0], lines
    # Contiguous data of that file never needed it (pwrite at the offset allocated at creation).
    write_frames(fc, a, range(8))
    os.fsync(fc)
    os.close(fc)

    # Everything else keeps working: the other written file, the read-only file, new files.
    assert daemon_alive(m)
    write_frames(fb, b, range(8))
    os.fsync(fb)
    os.close(fb)
    assert np.array_equal(np.load(m.path('other.h5', 'x.npy')), b)
    check_good(m.path('good.h5'), good)
    os.mkdir(m.path('later.h5'))
    fl = make_dataset(m, 'later.h5')
    write_frames(fl, a, range(8))
    os.fsync(fl)
    os.close(fl)
    assert writer_pid(m, 'later.h5') not in (pid_a, pid_b)
    assert daemon_alive(m)
    m.close()
    with open(m.log_path) as f:  # closing the mount did not log the dead process again
        log = f.read()
    assert len([ln for ln in log.splitlines() if 'HDF5 writer process (pid' in ln and 'error:' in ln
                and 'release (inode' not in ln]) == 1, log

    with h5py.File(osp.join(srcdir, 'other.h5'), 'r') as f:
        assert np.array_equal(f['x'][()], b)
    with h5py.File(osp.join(srcdir, 'later.h5'), 'r') as f:
        assert np.array_equal(f['x'][()], a)
    # What the dead writer left: h5py's bytes or EIO through a read-only mount.
    ro = mount(srcdir)
    for d in ('x', 'plain'):
        served_or_eio(ro.path('victim.h5'), osp.join(srcdir, 'victim.h5'), d)
    with h5py.File(osp.join(srcdir, 'victim.h5'), 'r') as f:
        assert np.array_equal(f['plain'][()], a)  # the metadata was flushed at its creation
    check_good(ro.path('good.h5'), good)


def test_a_created_file_changed_behind_the_mount_costs_at_most_that_file(srcdir, mount):
    m = mount(srcdir, 'writable')
    (fa, a), (fb, b) = two_written_files(m, 'changed.h5', (4, 5))
    write_frames(fa, a, range(3))
    write_frames(fb, b, range(4))
    os.fsync(fa)
    # The file's owner overwrites it (its superblock, object headers, chunk index) with noise.
    path = osp.join(srcdir, 'changed.h5')
    size = os.path.getsize(path)
    with open(path, 'r+b') as f:
        f.write(np.random.default_rng(9).integers(0, 256, size, dtype=np.uint8).tobytes())
    # Each of these may fail (EIO) but none may take the daemon down or hang.
    eio(lambda: write_frames(fa, a, range(3, 8)))
    eio(lambda: os.pread(fa, 4096, 0))   # read-modify-write of a chunk reads it back
    eio(lambda: write_frames(fa, a, [1]))
    eio(lambda: os.fsync(fa))
    eio(lambda: os.close(fa))
    eio(lambda: os.mkdir(m.path('changed.h5', 'g')))
    assert daemon_alive(m), m.log()
    # Whatever failed was logged naming the file (and, for a chunk, the dataset and the chunk).
    for ln in m.log().splitlines():
        if 'error:' in ln:
            assert 'changed.h5' in ln, ln
            if 'chunk' in ln:
                assert re.search(r'changed\.h5:/x: .*chunk \(\d+,\d+,\d+\)', ln), ln
    write_frames(fb, b, range(4, 8))
    os.fsync(fb)
    os.close(fb)
    assert np.array_equal(np.load(m.path('other.h5', 'x.npy')), b)
    os.mkdir(m.path('later.h5'))
    os.mkdir(m.path('later.h5', 'g'))
    assert daemon_alive(m)
    m.close()
    with h5py.File(osp.join(srcdir, 'other.h5'), 'r') as f:
        assert np.array_equal(f['x'][()], b)


@pytest.mark.parametrize('mode', ['hang', 'segv', 'garbage'])
def test_a_writer_process_that_hangs_crashes_or_talks_garbage(mode):
    """The helper's test hook (H5DIRECT_HELPER_FAULT_FILE) turned on for one written file after
    its dataset exists: its writer process hangs (killed after hdf5_timeout), crashes or answers
    garbage; the file's fsync gets EIO, another written file is unaffected."""
    tmp = tl.make_tmpdir('wiso-fault-')
    src = osp.join(tmp, 'src')
    os.makedirs(src)
    control = osp.join(tmp, 'fault')
    open(control, 'w').close()
    m = Mount(src, opts='writable,hdf5_timeout=2', env=dict(os.environ, H5DIRECT_HELPER_FAULT_FILE=control))
    try:
        (fa, a), (fb, b) = two_written_files(m, 'victim.h5', (6, 7))
        with open(control, 'w') as f:
            f.write(f'{mode}:victim.h5')
        t0 = time.monotonic()
        eio(lambda: write_frames(fa, a, range(8)))
        assert eio(lambda: os.fsync(fa))
        assert time.monotonic() - t0 < 60  # a hang costs one timeout, not one per chunk
        write_frames(fb, b, range(8))
        os.fsync(fb)
        os.close(fb)
        assert np.array_equal(np.load(m.path('other.h5', 'x.npy')), b)
        eio(lambda: os.close(fa))
        want = {'hang': 'timed out after 2000 ms', 'segv': 'crashed', 'garbage': 'sent a bad reply'}[mode]
        lines = failure_lines(m, 'victim.h5')
        assert len(lines) == 1 and want in lines[0], m.log()
        assert daemon_alive(m)
    finally:
        m.close()
    with h5py.File(osp.join(src, 'other.h5'), 'r') as f:
        assert np.array_equal(f['x'][()], b)
