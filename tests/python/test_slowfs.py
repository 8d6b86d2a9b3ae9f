"""bench/slowfs, the slow-storage emulator (docs/benchmarks.md, "Slow-storage emulator:
bench/slowfs"): bytes and metadata pass through unchanged (the source itself is the oracle), writes
are refused, and the costs it promises hold. Only what the emulator guarantees is timed: lower
bounds (a request never answers before its latency + size / bandwidth, measured on CLOCK_MONOTONIC
as time.monotonic is), and for overlap an upper bound with a margin of several times."""
import json
import os
import os.path as osp
import signal
import subprocess
import threading
import time

import numpy as np
import pytest

import h5d_testlib
from h5d_testlib import check_random_reads, make_tmpdir

SLOWFS = os.environ.get('H5DIRECT_SLOWFS')
pytestmark = pytest.mark.skipif(not SLOWFS or not osp.exists(SLOWFS),
                                reason='H5DIRECT_SLOWFS (the built bench/slowfs) is not set')


def slowfs(mount, src, *args):
    return mount(src, binary=SLOWFS, extra_args=[str(a) for a in args])


def stats(m, reset=False):
    with open(m.path('.slowfs_stats_reset' if reset else '.slowfs_stats')) as f:
        return json.load(f)


def write(path, data):
    with open(path, 'wb') as f:
        f.write(data)


def timed_read(path):
    t0 = time.monotonic()
    with open(path, 'rb') as f:
        data = f.read()
    return data, time.monotonic() - t0


def test_passthrough_bytes_metadata_and_refusals(mount):
    src = make_tmpdir('slowfs-src-')
    rng = np.random.default_rng(7)
    sizes = {'empty': 0, 'one': 1, 'page-1': 4095, 'page': 4096, 'page+1': 4097,
             'mib+13': (1 << 20) + 13, 'odd 3M': 3_000_017, 'new\nline': 10, 'ünï cøde': 77,
             '-dash': 5}
    for name, n in sizes.items():
        write(osp.join(src, name), rng.integers(0, 256, n, dtype=np.uint8).tobytes())
    os.mkdir(osp.join(src, 'sub'))
    write(osp.join(src, 'sub', 'inner'), b'inner bytes')
    os.chmod(osp.join(src, 'sub', 'inner'), 0o640)
    os.symlink('sub/inner', osp.join(src, 'rel-link'))
    os.symlink('/nonexistent/target', osp.join(src, 'dangling'))
    os.mkfifo(osp.join(src, 'fifo'))
    many = osp.join(src, 'many')
    os.mkdir(many)
    for i in range(2500):  # a listing that needs several readdir replies
        open(osp.join(many, f'entry_with_a_long_name_{i:05d}'), 'w').close()
    m = slowfs(mount, src, '--latency-ms', 0, '--bandwidth-mbs', 0)

    assert sorted(os.listdir(m.mnt)) == sorted(os.listdir(src))  # the stats files are not listed
    assert sorted(os.listdir(m.path('many'))) == sorted(os.listdir(many))
    for dirpath, dirnames, filenames in os.walk(src):
        for name in dirnames + filenames:
            p = osp.join(dirpath, name)
            q = m.path(osp.relpath(p, src))
            a, b = os.lstat(p), os.lstat(q)
            assert (a.st_mode, a.st_size, a.st_ino, a.st_mtime_ns, a.st_nlink) == \
                (b.st_mode, b.st_size, b.st_ino, b.st_mtime_ns, b.st_nlink), q
    assert os.readlink(m.path('rel-link')) == 'sub/inner'
    assert os.readlink(m.path('dangling')) == '/nonexistent/target'
    assert open(m.path('rel-link'), 'rb').read() == b'inner bytes'
    assert not osp.exists(m.path('missing'))
    os.statvfs(m.mnt)

    total = len(b'inner bytes')  # read through rel-link above
    for name, n in sizes.items():
        with open(osp.join(src, name), 'rb') as f:
            want = f.read()
        assert h5d_testlib.pread_all(m.path(name)) == want, name
        check_random_reads(m.path(name), want, rng, n=10)
        total += n
    s = stats(m)
    # Every byte came through the emulator (a fresh mount; at least once: the kernel may read a
    # range again), with no error.
    assert s['bytes'] >= total and s['read_errors'] == 0 and s['reads'] >= 4

    for path, flags in [(m.path('one'), os.O_WRONLY), (m.path('one'), os.O_RDWR),
                        (m.path('created'), os.O_WRONLY | os.O_CREAT)]:
        with pytest.raises(OSError) as e:
            os.open(path, flags, 0o644)
        assert e.value.errno == 30  # EROFS
    for op in (lambda: os.mkdir(m.path('d')), lambda: os.unlink(m.path('one')),
               lambda: os.rename(m.path('one'), m.path('two')), lambda: os.chmod(m.path('one'), 0o777)):
        with pytest.raises(OSError) as e:
            op()
        assert e.value.errno == 30
    assert sorted(os.listdir(m.mnt)) == sorted(os.listdir(src))

    # The reset file reports, then zeroes the counters.
    assert stats(m, reset=True)['bytes'] >= total
    assert stats(m)['bytes'] == 0 and stats(m)['reads'] == 0


def test_request_costs_and_cache(mount):
    lat, bw = 0.1, 2e6  # 100 ms per request, 2 MB/s per request
    src = make_tmpdir('slowfs-src-')
    n = 100_000
    for i in range(6):
        write(osp.join(src, f'f{i}'), bytes([i]) * n)
    m = slowfs(mount, src, '--latency-ms', lat * 1e3, '--bandwidth-mbs', bw / 1e6)

    # A cold read waits for requests that together bring its n bytes; at best they all overlap,
    # so it lasts at least one latency plus the transfer of the largest, which is at least n
    # over the number of requests (1 here, in practice).
    stats(m, reset=True)
    data, t = timed_read(m.path('f0'))
    s = stats(m)
    assert data == bytes([0]) * n and s['bytes'] >= n
    assert t >= lat + n / s['reads'] / bw, (t, s)

    # Reads issued one after another each wait for at least one request: K files, K latencies.
    stats(m, reset=True)
    t0 = time.monotonic()
    for i in range(1, 6):
        assert h5d_testlib.pread_all(m.path(f'f{i}')) == bytes([i]) * n
    t = time.monotonic() - t0
    assert stats(m)['reads'] >= 5
    assert t >= 5 * lat, t

    # Page-cache hits cost nothing and reach no request, also after reopening the file.
    assert rereads_reach_no_request(m, 'f0', bytes([0]) * n)
    h5d_testlib.evict_pages(m.path('f0'))  # ... and dropping its pages makes the next read cold
    before = stats(m)['reads']
    data, t = timed_read(m.path('f0'))
    assert data == bytes([0]) * n
    assert stats(m)['reads'] > before and t >= lat


def rereads_reach_no_request(m, name, want, tries=5):
    """Whether reading a cached file again (reopened each time) reaches no request. Tried again
    when one did: other processes on this machine may drop the caches at any moment (cold
    benchmarks do); a cache that does not hold fails every try."""
    for _ in range(tries):
        assert h5d_testlib.pread_all(m.path(name)) == want  # cached now (unless dropped since)
        before = stats(m)['reads']
        for _ in range(3):
            assert h5d_testlib.pread_all(m.path(name)) == want
        if stats(m)['reads'] == before:
            return True
    return False


def read_concurrently(paths):
    """Reads every path from its own thread, all started together; (contents, seconds)."""
    out = [None] * len(paths)
    start = threading.Barrier(len(paths) + 1)

    def work(i):
        start.wait()
        out[i] = h5d_testlib.pread_all(paths[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(paths))]
    for th in threads:
        th.start()
    start.wait()
    t0 = time.monotonic()
    for th in threads:
        th.join()
    return out, time.monotonic() - t0


def test_requests_overlap_up_to_threads(mount):
    lat = 0.3
    src = make_tmpdir('slowfs-src-')
    for i in range(32):
        write(osp.join(src, f'f{i}'), f'file {i}\n'.encode() * 100)
    want = [f'file {i}\n'.encode() * 100 for i in range(32)]

    m = slowfs(mount, src, '--latency-ms', lat * 1e3)
    got, t = read_concurrently([m.path(f'f{i}') for i in range(16)])
    s = stats(m)
    assert got == want[:16]
    assert lat <= t < 8 * lat, t  # 16 requests one after another would take 16 * lat
    assert s['reads'] >= 16 and s['max_in_flight'] >= 8, s
    m.close()

    # --threads caps the overlap: 16 requests, 4 at a time, take at least 4 latencies.
    m = slowfs(mount, src, '--latency-ms', lat * 1e3, '--threads', 4)
    got, t = read_concurrently([m.path(f'f{i}') for i in range(16, 32)])
    s = stats(m)
    assert got == want[16:]
    assert s['max_in_flight'] <= 4 and s['reads'] >= 16, s
    assert t >= 4 * lat, t


def test_aggregate_cap_and_meta_latency(mount):
    src = make_tmpdir('slowfs-src-')
    n = 4_000_000
    for i in range(4):
        write(osp.join(src, f'f{i}'), bytes([i + 1]) * n)
    # No per-request transfer cost, a 40 MB/s cap on everything: 16 MB in parallel from 4 files
    # takes at least 0.4 s however the requests overlap.
    m = slowfs(mount, src, '--latency-ms', 0.5, '--bandwidth-mbs', 0, '--aggregate-mbs', 40,
               '--readahead-kb', 1024)
    got, t = read_concurrently([m.path(f'f{i}') for i in range(4)])
    assert got == [bytes([i + 1]) * n for i in range(4)]
    s = stats(m)
    assert s['bytes'] >= 4 * n
    if os.geteuid() == 0:  # read-ahead above the kernel's 128 KiB: requests above it
        assert s['max_request_bytes'] > 128 * 1024, s
    assert t >= 4 * n / 40e6, t
    m.close()

    m = slowfs(mount, src, '--latency-ms', 0, '--meta-latency-ms', 200)
    t0 = time.monotonic()
    assert os.stat(m.path('f0')).st_size == n  # a lookup of a new name
    assert time.monotonic() - t0 >= 0.2


def test_command_line_daemon_and_sigterm(mount):
    src = make_tmpdir('slowfs-src-')
    write(osp.join(src, 'f'), b'abc')
    inside = osp.join(src, 'mnt')
    os.mkdir(inside)
    for mnt in (inside, src):
        r = subprocess.run([SLOWFS, src, mnt, '-f'], capture_output=True, text=True, timeout=20)
        assert r.returncode != 0 and 'inside the source' in r.stderr and not osp.ismount(mnt)
    mnt = make_tmpdir('slowfs-mnt-')
    for bad in (['--latency-ms', '-1'], ['--threads', '0'], ['--bogus'], ['--latency-ms', 'x'], []):
        r = subprocess.run([SLOWFS, src, mnt] + bad if bad else [SLOWFS], capture_output=True,
                           text=True, timeout=20)
        assert r.returncode == 2 and 'usage' in r.stderr and not osp.ismount(mnt), bad
    assert subprocess.run([SLOWFS, '--help'], capture_output=True, timeout=20).returncode == 0

    # As a daemon: the command returns once mounted; fusermount3 -u ends it.
    try:
        r = subprocess.run([SLOWFS, src, mnt, '--latency-ms', '1'], capture_output=True, timeout=20)
        assert r.returncode == 0 and osp.ismount(mnt)
        assert h5d_testlib.pread_all(osp.join(mnt, 'f')) == b'abc'
    finally:
        h5d_testlib.unmount(mnt)
    assert not osp.ismount(mnt)

    # In the foreground, SIGTERM unmounts and ends it cleanly (status 0, final counters).
    m = slowfs(mount, src, '--latency-ms', 1)
    assert h5d_testlib.pread_all(m.path('f')) == b'abc'
    m.proc.send_signal(signal.SIGTERM)
    assert m.proc.wait(20) == 0
    assert not osp.ismount(m.mnt)
    assert '"bytes": 3' in m.log()
