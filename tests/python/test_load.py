"""Load: several processes read random ranges of many files through one mount for a bounded
time with a small decoded-chunk cache (-o cache_size=8M). Every byte equals h5py's; the daemon's
memory stays within the cache budget plus a fixed overhead; nothing deadlocks (every reader and
the whole test are bounded by timeouts). The bound is the documented formula (BOUND below)."""
import multiprocessing as mp
import os
import os.path as osp
import time

import h5py
import numpy as np
import pytest

import h5d_testlib as tl

DURATION = float(os.environ.get('H5D_LOAD_SECONDS', '20'))
NFILES = 24
CACHE = 8 << 20
MAX_THREADS = 16  # FUSE threads (-o max_threads): the memory bound grows with them
DECODE_THREADS = 2  # -o threads
# The documented bound (docs/semantics.md, "Memory"): cache_size + a fixed part + a part per
# thread that serves requests or decodes. Fixed: the binary and its libraries, heap of an idle
# mount with max_open_files descriptors (measured ~15 MiB; 32 allowed). Per thread (FUSE and
# decode threads, each keeps its buffers for its life): the reply buffer (up to the largest
# FUSE read, 1 MiB), the stored chunk and the filter scratch (2 x the largest chunk, 256 KiB
# here), libfuse's request buffer (1 MiB + 4 KiB, touched only as far as a request fills it).
# The read pool's workers (2 x max(io_depth, threads)) each keep a stored chunk and a filter
# scratch (2 x the largest chunk) and may hold a merged request and a read-ahead piece (at most
# 1 MiB each, Engine::kMaxScratchRequest).
IO_DEPTH = 8
LARGEST_READ = 1 << 20
LARGEST_CHUNK = 32 * 4096 * 2
FIXED = 32 << 20
PER_THREAD = LARGEST_READ + 2 * LARGEST_CHUNK + (1 << 20) + 4096
POOL = 2 * max(IO_DEPTH, DECODE_THREADS)
PER_WORKER = 2 * LARGEST_CHUNK + 2 * (1 << 20)
BOUND = CACHE + FIXED + MAX_THREADS * PER_THREAD + POOL * PER_WORKER


def _make(d, i):
    rng = np.random.default_rng(i)
    p = osp.join(d, f'f{i:02d}.h5')
    with h5py.File(p, 'w') as f:
        # 2 MiB compressed (gzip+shuffle, 256 KiB chunks), 1 MiB contiguous, small chunked lzf
        base = np.arange(1 << 20, dtype='<u2') % 4096
        f.create_dataset('img', data=(base + rng.integers(0, 64, 1 << 20)).astype('<u2').reshape(256, 4096),
                         chunks=(32, 4096), compression='gzip', shuffle=True)
        f['flat'] = rng.random(1 << 17)
        f.create_dataset('small', data=rng.integers(0, 100, (300, 70), dtype='<i4'),
                         chunks=(16, 70), compression='lzf')
    return p


def _reader(mnt, files, seed, deadline, q):
    rng = np.random.default_rng(seed)
    expected = {}
    for f in files:
        with h5py.File(f, 'r') as h:
            for n in ('img', 'flat', 'small'):
                expected[(osp.basename(f), n)] = h[n][()].tobytes()
    keys = sorted(expected)
    reads = nbytes = bad = 0
    fds = {}
    try:
        while time.monotonic() < deadline:
            key = keys[int(rng.integers(len(keys)))]
            data = expected[key]
            path = osp.join(mnt, key[0], key[1] + '.raw')
            if path not in fds or rng.random() < 0.05:  # now and then a new open
                if path in fds:
                    os.close(fds[path])
                fds[path] = os.open(path, os.O_RDONLY)
            off = int(rng.integers(0, len(data)))
            ln = int(rng.choice([1, 100, 4096, 65536, 131072 + 5, 700000]))
            if rng.random() < 0.3:  # drop the kernel's cached pages: the read reaches the daemon
                os.posix_fadvise(fds[path], 0, 0, os.POSIX_FADV_DONTNEED)
            got = os.pread(fds[path], ln, off)
            reads += 1
            nbytes += len(got)
            if got != data[off:off + ln]:
                bad += 1
    except Exception as e:  # noqa: BLE001
        q.put(('error', repr(e)))
        return
    finally:
        for fd in fds.values():
            os.close(fd)
    q.put(('ok', reads, nbytes, bad))


@pytest.mark.parametrize('readers', [6, 12])
def test_many_processes_random_ranges_small_cache(mount, readers):
    d = tl.make_tmpdir('load-')
    files = [_make(d, i) for i in range(NFILES)]
    m = mount(d, f'cache_size={CACHE},max_open_files=16,max_threads={MAX_THREADS},threads={DECODE_THREADS},io_depth={IO_DEPTH}')
    deadline = time.monotonic() + DURATION
    q = mp.get_context('fork').Queue()
    procs = [mp.get_context('fork').Process(target=_reader, args=(m.mnt, files, 100 + i, deadline, q))
             for i in range(readers)]
    for p in procs:
        p.start()
    peak_rss = 0
    while any(p.is_alive() for p in procs) and time.monotonic() < deadline + 60:
        peak_rss = max(peak_rss, tl.process_memory(m.proc.pid)['VmRSS'])
        time.sleep(0.2)
    results = [q.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(10)
        assert not p.is_alive(), 'a reader hung (deadlock?)'
    errors = [r for r in results if r[0] != 'ok']
    assert not errors, errors
    reads = sum(r[1] for r in results)
    nbytes = sum(r[2] for r in results)
    bad = sum(r[3] for r in results)
    assert bad == 0, f'{bad} of {reads} reads differed from h5py'
    assert reads > 100
    mem = tl.process_memory(m.proc.pid)
    s = m.stats()
    print(f'\nload: {readers} processes, {reads} reads, {nbytes / 1e6:.0f} MB in {DURATION:.0f} s; '
          f'daemon VmRSS peak {peak_rss >> 20} MiB, VmHWM {mem["VmHWM"] >> 20} MiB '
          f'(bound {BOUND / 2**20:.0f} MiB); chunks decoded {s["chunks_decoded"]}, '
          f'cache hits {s["cache_hits"]}')
    if not os.environ.get('H5D_SANITIZED'):  # ASan's shadow memory and quarantine
        assert mem['VmHWM'] <= BOUND, mem
    assert s['error_replies'] == {}, s['error_replies']
    assert m.proc.poll() is None
