"""Shared helpers for tests that mount with mount.h5direct (tests/python/test_mount*.py).

Every mount is started in the foreground (-f) as a child process, polled until it appears, and
always unmounted (fusermount3 -u -z) and reaped when the test ends, even when it fails.
"""
import json
import os
import os.path as osp
import signal
import subprocess
import tempfile
import time

import numpy as np

BIN = os.environ.get('H5DIRECT_BIN')
MOUNT_TIMEOUT = 20


def traversable_by_others(path):
    """Whether a user other than the owner may pass through every directory up to `path`."""
    path = osp.realpath(path)
    while True:
        if not os.stat(path).st_mode & 0o001:
            return False
        if path == '/':
            return True
        path = osp.dirname(path)


def tmp_base():
    """Where tests make their sources and mount points: H5D_TEST_TMP (the build tree) when other
    users can reach it, else a directory under the system's temp dir. Tests read through the
    mount as other users (nobody, throwaway users), who must be able to reach the mount point
    wherever the checkout lives (a 0700 home, /root)."""
    base = os.environ.get('H5D_TEST_TMP') or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    if not traversable_by_others(base):
        base = osp.join(tempfile.gettempdir(), f'h5direct-tests-{os.getuid()}')
        os.makedirs(base, exist_ok=True)
        os.chmod(base, 0o755)
    return base


def make_tmpdir(prefix):
    d = tempfile.mkdtemp(prefix=prefix, dir=tmp_base())
    os.chmod(d, 0o755)  # mkdtemp makes it 0700: other users could not reach what lies inside
    return d


def unmount(mnt):
    subprocess.run(['fusermount3', '-u', '-z', mnt], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=20)


class Mount:
    """mount.h5direct SRC MNT -f [-o opts]; close() always unmounts and reaps the daemon.
    `binary`: another FUSE program taking the same SRC MNT -f (bench/slowfs)."""

    def __init__(self, src, opts=None, mnt=None, timeout=MOUNT_TIMEOUT, extra_args=(), env=None,
                 binary=None):
        self.src = src
        self.mnt = mnt or tempfile.mkdtemp(prefix='mnt-', dir=tmp_base())
        binary = binary or BIN
        self.cmd = [binary, src, self.mnt, '-f'] + list(extra_args)
        if opts:
            self.cmd += ['-o', opts]
        self.log_path = self.mnt.rstrip('/') + '.log'
        self._log = open(self.log_path, 'w')
        self.proc = subprocess.Popen(self.cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env)
        t0 = time.monotonic()
        while not osp.ismount(self.mnt):
            if self.proc.poll() is not None:
                self.close()
                raise RuntimeError(f'{osp.basename(binary)} exited with {self.proc.returncode}: '
                                   + self.log())
            if time.monotonic() - t0 > timeout:
                self.close()
                raise TimeoutError('the mount did not appear: ' + self.log())
            time.sleep(0.02)

    def path(self, *parts):
        return osp.join(self.mnt, *parts)

    def log(self):
        self._log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stats(self):
        with open(self.path('.h5direct', 'stats.json')) as f:
            return json.load(f)

    def close(self):
        unmount(self.mnt)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()
        try:
            os.rmdir(self.mnt)
        except OSError:
            pass


def write_corrupt_chunk_file(path):
    """An HDF5 file with `good` (1000 int32, contiguous) and `z` (100000 int32 in gzip chunks of
    10000) whose chunk 3 is damaged: reading elements 30000-39999 of z fails."""
    import h5py
    with h5py.File(path, 'w') as f:
        f.create_dataset('good', data=np.arange(1000, dtype='<i4'))
        f.create_dataset('z', data=np.arange(100000, dtype='<i4'), chunks=(10000,),
                         compression='gzip')
        info = f['z'].id.get_chunk_info(3)
    with open(path, 'r+b') as fh:
        fh.seek(info.byte_offset + 10)
        fh.write(b'\xff' * 64)


def h5_files_holding(directory, path):
    """(name, open h5py.File) of each .h5 file of `directory`, in name order, that holds `path`
    (each file closed when the next is asked for)."""
    import h5py
    for name in sorted(os.listdir(directory)):
        if not name.endswith('.h5'):
            continue
        with h5py.File(osp.join(directory, name), 'r') as f:
            if path in f:
                yield name, f


def descr_to_dtype(descr):
    """numpy dtype from the sidecar's JSON dtype (a string or numpy's descr list as lists)."""
    def conv(d):
        if isinstance(d, str):
            return d
        out = []
        for item in d:
            t = [item[0], conv(item[1])]
            if len(item) > 2:
                t.append(tuple(item[2]))
            out.append(tuple(t))
        return out
    # numpy's own rule for descr lists: fields named '' are padding (np.lib.format.descr_to_dtype)
    return np.lib.format.descr_to_dtype(conv(descr))


def values_equal(got, expected):
    """Element-wise equality of two arrays, field by field for structured types (padding and
    field order ignored); NaN equals NaN."""
    got = np.asarray(got)
    expected = np.asarray(expected)
    if got.shape != expected.shape:
        return False
    if expected.dtype.names:
        if not got.dtype.names:
            return False
        return all(values_equal(got[n], expected[n]) for n in expected.dtype.names)
    if expected.dtype.kind in 'fc':
        return np.array_equal(got, expected, equal_nan=True)
    if expected.dtype.kind in 'Mm':  # NaT equals NaT: compare the stored integers
        return got.dtype == expected.dtype and np.ascontiguousarray(got).tobytes() == \
            np.ascontiguousarray(expected).tobytes()
    if expected.dtype.kind == 'S':
        return got.dtype.kind == 'S' and got.tolist() == expected.tolist()
    return np.array_equal(got, expected)


def evict_pages(*paths):
    """Drops the page cache of these files only (written back first: only clean pages go).
    Tests never drop the whole page cache (/proc/sys/vm/drop_caches): a test running beside them
    (ctest -j) that cached a file on purpose would see it gone under it."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            try:
                os.fsync(fd)
            except OSError:
                pass  # read-only mounts and virtual files: nothing of theirs is dirty
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def pread_all(path):
    with open(path, 'rb') as f:
        return f.read()


def check_random_reads(path, content, rng, n=40):
    """Reads at random offsets (unaligned, 1 byte, large spans) equal the slices of content."""
    size = len(content)
    fd = os.open(path, os.O_RDONLY)
    try:
        probes = [(0, 1), (max(size - 1, 0), 1), (max(size - 7, 0), 100), (size, 10)]
        for _ in range(n):
            off = int(rng.integers(0, max(size, 1)))
            ln = int(rng.choice([1, 3, 64, 4095, 4097, 65536 + 13, 300000]))
            probes.append((off, ln))
        for off, ln in probes:
            got = os.pread(fd, ln, off)
            assert got == content[off:off + ln], (path, off, ln)
    finally:
        os.close(fd)


def check_dataset_files(mnt_dir, name, expected, rng=None):
    """Checks NAME.npy, NAME.raw and NAME.json under mnt_dir against `expected` (what h5py's
    dset[()] returns). Returns the sidecar."""
    rng = rng or np.random.default_rng(1)
    npy = osp.join(mnt_dir, name + '.npy')
    raw = osp.join(mnt_dir, name + '.raw')
    with open(osp.join(mnt_dir, name + '.json')) as f:
        side = json.load(f)
    expected = np.asarray(expected)
    assert side['shape'] == list(expected.shape)
    content = pread_all(npy)
    assert os.stat(npy).st_size == len(content)
    off = side['npy_data_offset']
    assert off % 64 == 0 and content[off - 1:off] == b'\n'
    assert content[:6] == b'\x93NUMPY'
    a = np.load(npy)
    assert values_equal(a, expected), (name, a, expected)
    if expected.size:
        m = np.load(npy, mmap_mode='r')
        assert values_equal(m, expected)
        del m
    rawc = pread_all(raw)
    assert os.stat(raw).st_size == len(rawc) == a.nbytes
    assert rawc == content[off:]
    dt = descr_to_dtype(side['dtype'])
    assert dt == a.dtype, (dt, a.dtype)
    if expected.size:
        mm = np.memmap(raw, mode='r', dtype=dt, shape=tuple(side['shape']), offset=0)
        assert values_equal(mm, expected)
        del mm
    check_random_reads(npy, content, rng)
    return side


def process_memory(pid):
    """{'VmRSS': bytes, 'VmHWM': bytes} of a process (from /proc/PID/status)."""
    out = {}
    with open(f'/proc/{pid}/status') as f:
        for ln in f:
            if ln.startswith(('VmRSS:', 'VmHWM:')):
                out[ln.split(':')[0]] = int(ln.split()[1]) * 1024
    return out
