#!/usr/bin/python3
"""Cold reads from emulated slow parallel storage: h5py, a direct reader and h5direct side by side
(issue 27). Benchmark only: never run by ctest.

Topology of every pass: the data lies in WORK/D on local disk; bench/slowfs mounts D at WORK/S
(slow storage: every read request costs latency + size / bandwidth, requests overlap); readers
read S directly (h5py; bench/direct_reader.py, EXtra-data's direct reader in Python; for run
keys EXtra-data-style h5py reads of the sequence files by INDEX) or through h5direct mounted on
S afresh for each pass. Before every pass: sync; echo 3 > /proc/sys/vm/drop_caches (root), so
the page caches of slowfs's files and of h5direct's files are both cold. One slowfs mount per
storage setting (latency x bandwidth); `--slowfs none` reads D itself (no emulator, latency 0).

Cells: deflate1 (shuffle+deflate(1), one 512x128 uint16 frame per chunk), deflate8 (8 frames a
chunk), chunked (uncompressed, a frame a chunk), contiguous (uncompressed, contiguous), run (an
EuXFEL run's image.data over 3 sequence files, raw: uncompressed, a frame a chunk), stack (a
4-module JUNGFRAU-like stack, frames first, raw), run_deflate / stack_deflate (the same with
shuffle+deflate(1)); deflate1_farray / deflate1_earray / deflate1_btree2 (deflate1 written with
libver='latest': its chunk index a fixed array, an extensible array (one unlimited axis), a v2
B-tree (two)); deflate_tiles (deflate1 in chunks of 64x128, 8 a frame), deflate_auto / chunked_auto
(deflate1 / uncompressed in h5py's own chunk shape), deflate_blocks (chunks of 10 frames x 128
rows), lz4 / blosc (a frame a chunk, hdf5plugin's LZ4 and Blosc(lz4, byte shuffle): the direct
reader, which decodes deflate only, sits these out); runopen (a 43-file run: listing and opening, see below). --frames scales them.

Access patterns: mmap (full copy through np.load(mmap_mode='r')), read (read() of the whole
.raw into a buffer), slice10 (the middle 10% of the frames), random1 (--random frames, one
reader, copied one by one), random4 (the same frames over 4 threads), halves (two threads, a
half each). h5py and the direct reader do the same work for mmap and read (the whole array into
a buffer): it is measured once per round and shown in both rows. File opening is timed for
every reader (h5py.File, the reader's open, np.load's open and header); mounting is not.
random1 is also timed frame by frame: the JSON's io[...]['frames'] has, per pass, the median of a
frame's first visit (the storage's round trip and what the reader adds after it) and of a repeat.
--readers h5direct runs h5direct alone (two builds compared, each in its own run): this VM's
slow passes come more often in a run with all three readers (docs/benchmarks.md, "Freed pages
and `min_free_ms`").

runopen: (a) h5direct: a fresh mount of the run (time to mount), os.listdir of the run and of
module 0's source directory, and a full read of its image.data.npy, with the run's files map and
with it hidden (renamed for that pass); (b) a fresh Python process
that opens the run as extra_data.RunDirectory does without a files map (every file's METADATA
and INDEX/trainId, INDEX/flag), then reads module 0's image.data by INDEX (emulated with h5py;
EXtra-data is not installed); (c) the same process with the run's karabo_data_map.json (written
at generation, EXtra-data's format): only the files of module 0 are opened. (b) and (c) are timed
from the spawn of the process to the array in memory (interpreter start and imports included).

Usage: bench/bench_cold.py [--build build] [--slowfs build/bench/slowfs|none] [--latency 0.5,2,10]
       [--bandwidth 200,1000] [--frames 1600] [--cells ...] [--access ...] [--rounds 3]
       [--opts MOUNT_OPTS] [--md F] [--json F] [--plot F.png] [--hold-freed-pages]
"""
import argparse
import json
import os
import os.path as osp
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import h5py
import hdf5plugin  # noqa: F401  (the filters of the lz4 / blosc cells, for h5py)
import numpy as np

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import benchlib  # noqa: E402
from benchlib import FRAME, RowBlocks, Stack, drop_caches, split  # noqa: E402
import direct_reader  # noqa: E402

RUNOPEN_SOURCE = 'SPB_DET_AGIPD1M-1/DET/0CH0:xtdf'


# ---- runopen's EXtra-data emulation (also run as a child process: --emulate-open) -------------

def emulate_open(run_dir, source, use_map):
    """EXtra-data's RunDirectory(run_dir)[source, 'image.data'].ndarray(), emulated with h5py.
    Returns (array, files opened, files the map answered)."""
    names = sorted(n for n in os.listdir(run_dir) if n.endswith('.h5'))
    known = {}
    if use_map:
        try:
            with open(osp.join(run_dir, 'karabo_data_map.json')) as f:
                entries = json.load(f)
        except (OSError, ValueError):
            entries = []
        for e in entries:  # valid entries: size and mtime unchanged (RunFilesMap)
            try:
                st = os.stat(osp.join(run_dir, e['filename']))
            except OSError:
                continue
            if st.st_mtime == e['mtime'] and st.st_size == e['size']:
                known[e['filename']] = e
    opened, blocks = {}, []
    for n in names:  # files the map does not answer are opened now (FileAccess)
        if n in known:
            continue
        f = opened[n] = h5py.File(osp.join(run_dir, n), 'r')
        md = f['METADATA/dataSources'] if 'METADATA/dataSources' in f else f['METADATA']
        md['dataSourceId'][()]
        f['INDEX/trainId'][()]
        if 'INDEX/flag' in f:
            f['INDEX/flag'][()]
    for n in names:
        if n in known:
            if source not in known[n]['instrument_sources']:
                continue
            f = opened[n] = h5py.File(osp.join(run_dir, n), 'r')
        f = opened[n]
        if f'INDEX/{source}/image' not in f:
            continue
        tids = f['INDEX/trainId'][()]
        ntr = int((tids != 0).sum())
        first = f[f'INDEX/{source}/image/first'][:ntr]
        count = f[f'INDEX/{source}/image/count'][:ntr]
        blocks.append((int(tids[0]), f[f'INSTRUMENT/{source}/image/data'], int(first[0]), int(count.sum())))
    blocks.sort(key=lambda b: b[0])
    rb = RowBlocks([b[1:] for b in blocks])
    out = np.empty(rb.shape, rb.blocks[0][0].dtype)
    rb.read_into(out, 0, rb.shape[0])
    for f in opened.values():
        f.close()
    return out, len(opened), len(known)


if len(sys.argv) > 1 and sys.argv[1] == '--emulate-open':
    # child: RUN_DIR SOURCE USE_MAP OUT.npy; prints the wall clock when the array is in memory
    a, nopened, nknown = emulate_open(sys.argv[2], sys.argv[3], sys.argv[4] == '1')
    print(json.dumps(dict(done=time.time(), opened=nopened, from_map=nknown)), flush=True)
    np.save(sys.argv[5], a)
    sys.exit(0)


# ---- options ----------------------------------------------------------------------------------

CELLS = {
    'deflate1': dict(kind='plain', chunk=1, comp='deflate'),
    'deflate8': dict(kind='plain', chunk=8, comp='deflate'),
    'chunked': dict(kind='plain', chunk=1, comp='none'),
    'contiguous': dict(kind='plain', chunk=0, comp='none'),
    'run': dict(kind='run', chunk=1, comp='none'),
    'stack': dict(kind='stack', chunk=1, comp='none'),
    'run_deflate': dict(kind='run', chunk=1, comp='deflate'),
    'stack_deflate': dict(kind='stack', chunk=1, comp='deflate'),
    # deflate1 with the chunk indexes of HDF5 1.10's file format (libver='latest'): a fixed
    # array (fixed shape), an extensible array (one unlimited axis), a v2 B-tree (two)
    'deflate1_farray': dict(kind='plain', chunk=1, comp='deflate', libver='latest'),
    'deflate1_earray': dict(kind='plain', chunk=1, comp='deflate', libver='latest', unlimited=1),
    'deflate1_btree2': dict(kind='plain', chunk=1, comp='deflate', libver='latest', unlimited=2),
    # small chunks: a frame in 8 tiles of 64x128 (16 KiB before compression)
    'deflate_tiles': dict(kind='plain', chunk=1, comp='deflate', chunks=(1, 64, 128)),
    # h5py's own chunk shape (chunks=True: (75, 32, 16) for 1,200 frames), as files get it when
    # their writer asks for compression and nothing else
    'deflate_auto': dict(kind='plain', chunk=1, comp='deflate', chunks=True),
    'chunked_auto': dict(kind='plain', chunk=1, comp='none', chunks=True),  # the same, uncompressed
    # chunks of 10 frames and a quarter of each (128 of 512 rows): decode units of 32 KiB
    'deflate_blocks': dict(kind='plain', chunk=1, comp='deflate', chunks=(10, 128, 128)),
    # other codecs of detector files (filters Debian's HDF5 plugins write), one frame per chunk:
    # LZ4, Blosc (LZ4, byte shuffle)
    'lz4': dict(kind='plain', chunk=1, comp='lz4'),
    'blosc': dict(kind='plain', chunk=1, comp='blosc'),
}
DEFAULT_CELLS = ['deflate1', 'deflate8', 'chunked', 'contiguous', 'run', 'stack', 'runopen']
ACCESS = ['mmap', 'read', 'slice10', 'random1', 'random4', 'halves']
READERS = ['h5py', 'direct', 'h5direct']

p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
p.add_argument('--build', default='build')
p.add_argument('--slowfs', default=None, help='the emulator (default BUILD/bench/slowfs); none: read D itself')
p.add_argument('--latency', default='0.5,2,10', help='ms per request, comma-separated')
p.add_argument('--bandwidth', default='200,1000', help='MB/s per request, comma-separated')
p.add_argument('--aggregate-mbs', default=None, help="slowfs's --aggregate-mbs (default: its own)")
p.add_argument('--slowfs-threads', default=None, help="slowfs's --threads (default: its own)")
p.add_argument('--slowfs-readahead-kb', default=None, help="slowfs's --readahead-kb (default: its own)")
p.add_argument('--frames', type=int, default=1600, help='frames of each cell (stack: over 4 modules)')
p.add_argument('--runopen-frames', type=int, default=None,
               help='frames per module of the runopen run (default frames // 8, at least 8)')
p.add_argument('--cells', default=','.join(DEFAULT_CELLS))
p.add_argument('--access', default=','.join(ACCESS))
p.add_argument('--random', type=int, default=1000, help='frames of random1/random4')
p.add_argument('--readers', default=','.join(READERS),
               help='the readers to run (the others show as -): h5direct alone to compare two builds')
p.add_argument('--rounds', type=int, default=3)
p.add_argument('--direct-threads', type=int, default=16)
p.add_argument('--opts', default='', help='-o options of mount.h5direct (e.g. io_depth=32)')
p.add_argument('--workdir', default=None, help='keep the data here (reused when present)')
p.add_argument('--json', default=None)
p.add_argument('--md', default=None)
p.add_argument('--plot', default=None)
p.add_argument('--hold-freed-pages', action='store_true',
               help='keep freed guest pages from the host for 60 s during the run (benchlib.hold_freed_pages)')
args = p.parse_args()
if os.geteuid() != 0:
    sys.exit('bench_cold.py drops the page cache before every pass: run it as root')
if args.hold_freed_pages and not benchlib.hold_freed_pages():
    sys.exit('--hold-freed-pages: cannot set ' + benchlib.MIN_FREE_MS + ' (root, a VM with it)')

BIN = osp.abspath(osp.join(args.build, 'daemon', 'mount.h5direct'))
run_readers = args.readers.split(',')
if not run_readers or set(run_readers) - set(READERS):
    sys.exit(f'--readers: a comma-separated choice of {",".join(READERS)}')
SLOWFS = args.slowfs or osp.join(args.build, 'bench', 'slowfs')
if SLOWFS != 'none':
    SLOWFS = osp.abspath(SLOWFS)
    if not os.access(SLOWFS, os.X_OK):
        sys.exit(f'no slow-storage emulator at {SLOWFS} (build bench/slowfs, or --slowfs none)')
for b in [BIN]:
    if not os.access(b, os.X_OK):
        sys.exit(f'no {b}: build the project (--build DIR)')
work = osp.abspath(args.workdir or tempfile.mkdtemp(prefix='h5d-cold-'))
D, S, M = (osp.join(work, x) for x in ('D', 'S', 'M'))
for d in (D, S, M):
    os.makedirs(d, exist_ok=True)
cell_names = [c for c in args.cells.split(',') if c]
for c in cell_names:
    if c not in CELLS and c != 'runopen':
        sys.exit(f'unknown cell {c} (known: {", ".join(list(CELLS) + ["runopen"])})')
accesses = [a for a in args.access.split(',') if a]
for a in accesses:
    if a not in ACCESS:
        sys.exit(f'unknown access {a} (known: {", ".join(ACCESS)})')
storages = [(float(lat), float(bw)) for lat in args.latency.split(',') for bw in args.bandwidth.split(',')]
if SLOWFS == 'none':
    storages = [(0.0, 0.0)]


def storage_name(st):
    return 'local disk (no slowfs)' if SLOWFS == 'none' else f'{st[0]:g} ms, {st[1]:g} MB/s'


# ---- data -------------------------------------------------------------------------------------

def noisy(n, seed):
    """Detector frames that shuffle + deflate(1) compresses about 2.4x."""
    return benchlib.frames_data(n, seed, spread=20, sigma=3)


def h5_kw(spec):
    kw = dict(chunks=spec.get('chunks', (spec['chunk'],) + FRAME)) if spec['chunk'] else {}
    if spec['comp'] == 'deflate':
        kw.update(compression='gzip', compression_opts=1, shuffle=True)
    elif spec['comp'] != 'none':
        kw.update({'lz4': hdf5plugin.LZ4,
                   'blosc': lambda: hdf5plugin.Blosc(cname='lz4', clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE)}
                  [spec['comp']]())
    if spec.get('unlimited'):
        kw['maxshape'] = (None,) * spec['unlimited'] + FRAME[spec['unlimited'] - 1:]
    return kw


class Cell:
    """One data cell in D: its files, the source h5direct mounts, the path of its array there,
    and the reference array (h5py from D)."""

    def __init__(self, name):
        self.name, self.spec = name, CELLS[name]
        kind, n = self.spec['kind'], args.frames
        self.dir = osp.join(D, name)
        done = osp.join(self.dir, '.generated.json')
        if osp.exists(done):
            with open(done) as f:
                meta = json.load(f)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
            os.makedirs(self.dir)
            kw = h5_kw(self.spec)
            if kind == 'plain':
                path = osp.join(self.dir, 'frames.h5')
                with h5py.File(path, 'w', libver=self.spec.get('libver', 'earliest')) as f:
                    ds = f.create_dataset('data', shape=(n,) + FRAME, dtype='u2', **kw)
                    for a, b in split(n, max(1, n // 800)):
                        ds[a:b] = noisy(b - a, a + 1)
                meta = dict(files=[path], rel='frames.h5/data', src=self.dir)
            else:
                run_dir = osp.join(self.dir, 'r0001')
                files, rel = benchlib.write_detector_run(run_dir, kind, n, 'u2', kw, noisy)
                meta = dict(files=files, rel=rel, src=run_dir)
            meta['frames'] = n
            with open(done, 'w') as f:
                json.dump(meta, f)
        if meta['frames'] != n:
            sys.exit(f'{self.dir} holds {meta["frames"]} frames, not {n}: another --workdir')
        self.files, self.rel = meta['files'], meta['rel']
        self.src = to_s(meta['src'])
        hs, o = self.open_h5py(self.files)
        self.reference = np.empty(o.shape, np.uint16)
        read_full_h5py(o, self.reference)
        for f in hs:
            f.close()
        self.shape, self.nbytes = self.reference.shape, self.reference.nbytes
        self.ratio = self.nbytes / sum(os.path.getsize(x) for x in self.files)

    def open_h5py(self, files=None):
        """(open files, the array: an h5py dataset, or RowBlocks / Stack of the run's key)."""
        hs = [h5py.File(x, 'r') for x in (files or [to_s(x) for x in self.files])]
        if self.spec['kind'] == 'plain':
            return hs, hs[0]['data']
        mods = benchlib.detector_blocks(hs, self.spec['kind'])
        return hs, (RowBlocks(mods[0]) if self.spec['kind'] == 'run' else Stack([RowBlocks(b) for b in mods]))

    def open_direct(self, threads):
        """(open h5py files, a reader with plan(out, lo, hi) / run(tasks) / close())."""
        hs = [h5py.File(to_s(x), 'r') for x in self.files]
        if self.spec['kind'] == 'plain':
            ds = hs[0]['data']
            return hs, direct_reader.DirectReader([(ds, 0, ds.shape[0])], threads)
        mods = benchlib.detector_blocks(hs, self.spec['kind'])
        if self.spec['kind'] == 'run':
            return hs, direct_reader.DirectReader(mods[0], threads)
        return hs, DirectStack(mods, threads)


class DirectStack:
    """The direct reader over a frames-first stack: each module's rows into out[:, module]."""

    def __init__(self, mods, threads):
        from concurrent.futures import ThreadPoolExecutor
        self.mods = [direct_reader.DirectReader(b, 0) for b in mods]
        self.pool = ThreadPoolExecutor(threads) if threads else None

    def plan(self, out, lo, hi):
        return [t for k, m in enumerate(self.mods) for t in m.plan(out[:, k, None], lo, hi)]

    def run(self, tasks):
        direct_reader.run_tasks(tasks, self.pool)

    def read(self, out, lo, hi):
        self.run(self.plan(out, lo, hi))

    def close(self):
        if self.pool:
            self.pool.shutdown()
        for m in self.mods:
            m.close()


def to_s(path):
    """The path of a file of D as the readers see it: on the slow storage S."""
    return path if SLOWFS == 'none' else osp.join(S, osp.relpath(path, D))


def read_full_h5py(o, out):
    if isinstance(o, h5py.Dataset):
        o.read_direct(out)
    else:
        o.read_into(out, 0, out.shape[0])


# ---- the readers' passes ----------------------------------------------------------------------

class Buffers:
    """Output arrays of a cell, allocated and touched once (no pass pays the first touch)."""

    def __init__(self, cell, idx):
        n = cell.shape[0]
        self.lo, self.hi = n // 2, n // 2 + max(1, n // 10)
        self.full = np.zeros(cell.shape, np.uint16)
        self.slice = np.zeros((self.hi - self.lo,) + cell.shape[1:], np.uint16)
        self.frames = np.zeros((len(idx),) + cell.shape[1:], np.uint16)
        self.idx = idx

    def of(self, access):
        return {'slice10': self.slice, 'random1': self.frames, 'random4': self.frames}.get(access, self.full)

    def expected(self, cell, access):
        if access == 'slice10':
            return cell.reference[self.lo:self.hi]
        if access.startswith('random'):
            return cell.reference[self.idx]
        return cell.reference


def quarters(idx):
    return [(a, b) for a, b in split(len(idx), 4)]


FRAME_TIMES = []  # seconds of each frame of the current random1 pass, in buf.idx order


def per_frame(frames, n):
    """random1: frames(k, k + 1) for every k, each timed into FRAME_TIMES."""
    clock = time.perf_counter
    for k in range(n):
        t = clock()
        frames(k, k + 1)
        FRAME_TIMES.append(clock() - t)


def frame_summary(idx):
    """A random1 pass frame by frame: the median time of a frame's first visit (the storage's
    round trip and what each reader adds after it) and of a repeat (cached by the reader or the
    page cache)."""
    seen, first, again = set(), [], []
    for i, t in zip(idx, FRAME_TIMES):
        (again if int(i) in seen else first).append(t)
        seen.add(int(i))
    med = lambda xs: round(float(np.median(xs)) * 1e3, 4) if xs else None  # noqa: E731
    return {'distinct': len(first), 'first_median_ms': med(first), 'repeat_median_ms': med(again)}


def h5py_access(cell, access, buf):
    hs, o = cell.open_h5py()
    plain = isinstance(o, h5py.Dataset)
    n = cell.shape[0]

    def frames(a, b):
        for k in range(a, b):
            buf.frames[k] = o[int(buf.idx[k])] if plain else o.row(int(buf.idx[k]))

    def rows(out, lo, hi):
        if plain:
            o.read_direct(out, np.s_[lo:hi])
        else:
            o.read_into(out, lo, hi)
    if access in ('mmap', 'read'):
        rows(buf.full, 0, n)
    elif access == 'slice10':
        rows(buf.slice, buf.lo, buf.hi)
    elif access == 'random1':
        per_frame(frames, len(buf.idx))
    elif access == 'random4':  # one file handle: h5py's global lock serialises the threads
        benchlib.in_threads(frames, quarters(buf.idx))
    elif access == 'halves':
        benchlib.in_threads(lambda lo, hi: rows(buf.full[lo:hi], lo, hi), split(n, 2))
    for f in hs:
        f.close()


def direct_access(cell, access, buf):
    one = access in ('random1', 'random4')  # one frame at a time: no pool, on the caller's thread
    hs, r = cell.open_direct(0 if one else args.direct_threads)
    n = cell.shape[0]

    def frames(a, b):
        for k in range(a, b):
            i = int(buf.idx[k])
            r.run(r.plan(buf.frames[k:k + 1], i, i + 1))
    if access in ('mmap', 'read'):
        r.run(r.plan(buf.full, 0, n))
    elif access == 'slice10':
        r.run(r.plan(buf.slice, buf.lo, buf.hi))
    elif access == 'random1':
        per_frame(frames, len(buf.idx))
    elif access == 'random4':
        benchlib.in_threads(frames, quarters(buf.idx))
    elif access == 'halves':
        benchlib.in_threads(lambda lo, hi: r.run(r.plan(buf.full[lo:hi], lo, hi)), split(n, 2))
    r.close()
    for f in hs:
        f.close()


def mount_access(cell, access, buf):
    npy = osp.join(M, cell.rel + '.npy')
    if access == 'read':
        benchlib.read_all(osp.join(M, cell.rel + '.raw'), memoryview(buf.full).cast('B'))
        return
    a = np.load(npy, mmap_mode='r')
    n = cell.shape[0]

    def frames(lo, hi):
        for k in range(lo, hi):
            buf.frames[k] = a[int(buf.idx[k])]
    if access == 'mmap':
        buf.full[...] = a
    elif access == 'slice10':
        buf.slice[...] = a[buf.lo:buf.hi]
    elif access == 'random1':
        per_frame(frames, len(buf.idx))
    elif access == 'random4':
        benchlib.in_threads(frames, quarters(buf.idx))
    elif access == 'halves':
        def half(lo, hi):
            buf.full[lo:hi] = a[lo:hi]
        benchlib.in_threads(half, split(n, 2))
    del a


def slowfs_stats(name='.slowfs_stats'):
    """slowfs's counters (S/.slowfs_stats: JSON, or 'name value' / 'name=value' / 'name: value'
    lines); {} when it has none."""
    if SLOWFS == 'none':
        return {}
    try:
        with open(osp.join(S, name)) as f:
            text = f.read()
    except OSError:
        return {}
    try:
        d = json.loads(text)
        return {k: v for k, v in d.items() if isinstance(v, (int, float))}
    except ValueError:
        out = {}
        for line in text.splitlines():
            parts = line.replace('=', ' ').replace(':', ' ').split()
            if len(parts) == 2:
                try:
                    out[parts[0]] = float(parts[1])
                except ValueError:
                    pass
        return out


def slowfs_reset():
    """Zeroes slowfs's counters where it can (reading S/.slowfs_stats_reset); else returns the
    counters now, for counters_delta."""
    if SLOWFS != 'none' and osp.exists(osp.join(S, '.slowfs_stats_reset')):
        slowfs_stats('.slowfs_stats_reset')
        return {}
    return slowfs_stats()


def counters_delta(before, after):
    """Counters of one pass: differences, except maxima / gauges (names with max, in_flight,
    now, current, peak, or options such as latency), shown as they are after the pass."""
    gauge = ('max', 'in_flight', 'now', 'current', 'peak', 'latency', 'bandwidth', 'threads', 'mbs', 'ms')
    return {k: (v if any(g in k for g in gauge) else v - before.get(k, 0)) for k, v in after.items()}


def h5direct_io(st):
    """stats.json fields about I/O: bytes_pread, reads, and every io_* field."""
    keep = {k: v for k, v in st.items() if k in ('bytes_pread', 'reads', 'bytes_pushed') or k.startswith('io_')}
    return {k: v for k, v in keep.items() if isinstance(v, (int, float))}


def cpu_times(pid=None):
    """(user, system, idle, steal) seconds: of process `pid` (idle and steal 0), or of the whole
    machine (/proc/stat, all cores; iowait counted as idle; steal: time the host ran others)."""
    tck = os.sysconf('SC_CLK_TCK')
    try:
        if pid:
            with open(f'/proc/{pid}/stat') as f:
                v = f.read().rsplit(')', 1)[1].split()
            return int(v[11]) / tck, int(v[12]) / tck, 0.0, 0.0
        with open('/proc/stat') as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (v[0] + v[1]) / tck, (v[2] + v[5] + v[6]) / tck, (v[3] + v[4]) / tck, v[7] / tck
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0, 0.0, 0.0


VMSTAT = ('allocstall_normal', 'allocstall_movable', 'pgscan_direct', 'compact_stall', 'pgmajfault')


def vmstat():
    """The kernel's counters of memory stalls (/proc/vmstat): direct reclaim and compaction."""
    try:
        with open('/proc/vmstat') as f:
            d = dict(line.split() for line in f)
        return tuple(int(d.get(k, 0)) for k in VMSTAT)
    except (OSError, ValueError):
        return (0,) * len(VMSTAT)


def cpu_delta(a, b, names):
    return {n: round(y - x, 3) for n, x, y in zip(names, a, b)}


def one_pass(cell, access, reader, buf, verify):
    if verify:  # a reader that leaves a part unwritten must not pass on an earlier reader's bytes
        buf.of(access).fill(0x5A5A)
    m = None
    if reader == 'h5direct':
        m = benchlib.mount_h5direct(BIN, cell.src, args.opts or None, mnt=M)
    try:
        drop_caches()
        before = slowfs_reset()
        fn = {'h5py': h5py_access, 'direct': direct_access, 'h5direct': mount_access}[reader]
        # CPU during the pass: the machine's (was it busy or waiting?), the daemon's and the
        # emulator's (user / system: a slow pass with much system time met fresh memory)
        c0 = cpu_times(), cpu_times(m.proc.pid if m else None), cpu_times(slow.proc.pid if slow else None), vmstat()
        del FRAME_TIMES[:]
        secs, _ = benchlib.timed(lambda: fn(cell, access, buf))
        c1 = cpu_times(), cpu_times(m.proc.pid if m else None), cpu_times(slow.proc.pid if slow else None), vmstat()
        io = {'slowfs': counters_delta(before, slowfs_stats()),
              'cpu': dict(**cpu_delta(c0[0], c1[0], ('machine_user_s', 'machine_sys_s', 'machine_idle_s', 'machine_steal_s')),
                          **cpu_delta(c0[2], c1[2], ('slowfs_user_s', 'slowfs_sys_s')),
                          **cpu_delta(c0[3], c1[3], VMSTAT))}
        if access == 'random1' and FRAME_TIMES:
            io['frames'] = frame_summary(buf.idx)
        if m:
            io['h5direct'] = h5direct_io(benchlib.mount_stats(M))
            io['h5direct'].update(cpu_delta(c0[1], c1[1], ('daemon_user_s', 'daemon_sys_s')))
    finally:
        if m:
            m.close()
    if verify and not np.array_equal(buf.of(access), buf.expected(cell, access)):
        sys.exit(f'[cold] {cell.name} {access}: {reader} read other bytes than h5py from local disk')
    return secs, io


# ---- runopen ----------------------------------------------------------------------------------

class RunOpen:
    """A 43-file EuXFEL run: 16 AGIPD modules with 3 (even modules) or 2 sequence files, and slow
    data in 3, raw image.data (2, 512, 128) uint16 uncompressed; karabo_data_map.json beside."""

    def __init__(self):
        sys.path.insert(0, osp.join(osp.dirname(osp.abspath(__file__)), '..', 'tests', 'python'))
        import euxfel_mock
        self.frames = args.runopen_frames or max(8, args.frames // 8)
        self.dir = osp.join(D, 'runopen', 'r0338')
        done = osp.join(D, 'runopen', '.generated.json')
        if not osp.exists(done) or json.load(open(done))['frames'] != self.frames:
            shutil.rmtree(osp.join(D, 'runopen'), ignore_errors=True)
            w = euxfel_mock.RunWriter(self.dir, keep_data=False)
            first, n = 10000, self.frames
            for m in range(16):
                src = euxfel_mock.detector_module(f'SPB_DET_AGIPD1M-1/DET/{m}CH0', lambda t: 1)
                for k in src.groups[0].keys:
                    if k.name == 'image.data':
                        k.make = lambda t, j, m=m: noisy(2 * len(t), int(t[0]) + m).reshape(
                            (len(t), 2) + FRAME)
                for s, (a, b) in enumerate(split(n, 3 if m % 2 == 0 else 2)):
                    w.write_file(f'AGIPD{m:02d}', s, [src], list(range(first + a, first + b)))
            slow = [euxfel_mock.xgm_control('SA1_XTD2_XGM/DOOCS/MAIN'),
                    euxfel_mock.xgm_instrument('SA1_XTD2_XGM/DOOCS/MAIN')]
            for s, (a, b) in enumerate(split(n, 3)):
                w.write_file('DA01', s, slow, list(range(first + a, first + b)))
            write_files_map(self.dir)
            with open(done, 'w') as f:
                json.dump(dict(frames=self.frames), f)
        self.nfiles = len([x for x in os.listdir(self.dir) if x.endswith('.h5')])
        self.reference = emulate_open(self.dir, RUNOPEN_SOURCE, False)[0]
        self.buf = np.zeros_like(self.reference)

    def h5direct(self, use_map=True):
        mp = osp.join(self.dir, 'karabo_data_map.json')
        if not use_map:  # the map hidden for this pass (renamed on the emulator's source side)
            os.rename(mp, mp + '.hidden')
        try:
            return self._h5direct()
        finally:
            if not use_map:
                os.rename(mp + '.hidden', mp)

    def _h5direct(self):
        drop_caches()
        t0 = time.perf_counter()
        m = benchlib.mount_h5direct(BIN, to_s(self.dir), args.opts or None, mnt=M)
        try:
            t_mount = time.perf_counter() - t0
            os.listdir(M)
            os.listdir(osp.join(M, RUNOPEN_SOURCE))
            t_list = time.perf_counter() - t0 - t_mount
            self.buf[...] = np.load(osp.join(M, RUNOPEN_SOURCE, 'image.data.npy'), mmap_mode='r')
            total = time.perf_counter() - t0
            stats = benchlib.mount_stats(M)
            io = h5direct_io(stats)
        finally:
            m.close()
        if not np.array_equal(self.buf, self.reference):
            sys.exit('[cold] runopen: h5direct read other bytes than h5py from local disk')
        return total, dict(mount=t_mount, list=t_list, read=total - t_mount - t_list,
                           opened=stats.get('hdf5_helper', {}).get('files', -1), h5direct=io)

    def extra_data(self, use_map):
        drop_caches()
        out = osp.join(work, 'runopen-out.npy')
        t0 = time.time()
        r = subprocess.run([sys.executable, osp.abspath(__file__), '--emulate-open', to_s(self.dir),
                            RUNOPEN_SOURCE, '1' if use_map else '0', out],
                           stdout=subprocess.PIPE, check=True, text=True)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        if not np.array_equal(np.load(out), self.reference):
            sys.exit('[cold] runopen: the EXtra-data emulation read other bytes than from local disk')
        os.unlink(out)
        return res['done'] - t0, dict(opened=res['opened'], from_map=res['from_map'])


def write_files_map(run_dir):
    """karabo_data_map.json as EXtra-data's RunFilesMap.save writes it: per file its name, mtime,
    size, train IDs, sources and suspect train indices."""
    entries = []
    for n in sorted(x for x in os.listdir(run_dir) if x.endswith('.h5')):
        path = osp.join(run_dir, n)
        st = os.stat(path)
        with h5py.File(path, 'r') as f:
            tids = f['INDEX/trainId'][()]
            ntr = int((tids != 0).sum())
            flag = f['INDEX/flag'][:ntr] if 'INDEX/flag' in f else np.ones(ntr)
            ids = [x.decode() for x in f['METADATA/dataSources/dataSourceId'][()] if x]
        ctrl = sorted({x.split('/', 1)[1] for x in ids if x.startswith('CONTROL/')})
        inst = sorted({x.split('/', 1)[1].rsplit('/', 1)[0] for x in ids if x.startswith('INSTRUMENT/')})
        entries.append(dict(filename=n, mtime=st.st_mtime, size=st.st_size,
                            train_ids=[int(t) for t in tids[:ntr]], control_sources=ctrl,
                            instrument_sources=inst, legacy_sources={},
                            suspect_train_indices=[int(i) for i in np.nonzero(flag == 0)[0]]))
    with open(osp.join(run_dir, 'karabo_data_map.json'), 'w') as f:
        json.dump(entries, f, indent=2)


# ---- run --------------------------------------------------------------------------------------

command = ' '.join(shlex.quote(x) for x in [sys.executable] + sys.argv)
cells = []
runopen = None
for name in cell_names:
    t0 = time.monotonic()
    if name == 'runopen':
        runopen = RunOpen()
        print(f'[cold] runopen: {runopen.nfiles} files, {runopen.frames} frames a module, '
              f'in {time.monotonic() - t0:.1f} s', flush=True)
    else:
        cells.append(Cell(name))
        print(f'[cold] {name}: {cells[-1].nbytes / 1e6:.0f} MB, {cells[-1].ratio:.2f}x compressed, '
              f'in {time.monotonic() - t0:.1f} s', flush=True)

results = {}  # (cell, storage, access, reader) -> [seconds]
iolog = {}    # (cell, storage, access, reader) -> [counters of each pass]
state = benchlib.reporting_state()


def slowfs_cmd(st):
    cmd = [SLOWFS, D, S, '-f', '--latency-ms', f'{st[0]:g}', '--bandwidth-mbs', f'{st[1]:g}']
    for opt, v in (('--aggregate-mbs', args.aggregate_mbs), ('--threads', args.slowfs_threads),
                   ('--readahead-kb', args.slowfs_readahead_kb)):
        if v:
            cmd += [opt, str(v)]
    return cmd


try:
    for st in storages:
        sname = storage_name(st)
        slow = None if SLOWFS == 'none' else benchlib.Mount(slowfs_cmd(st), S, stderr=subprocess.PIPE)
        try:
            bufs = {c.name: Buffers(c, np.random.default_rng(7).integers(0, c.shape[0], args.random))
                    for c in cells}
            for rnd in range(args.rounds):
                readers = READERS[rnd % 3:] + READERS[:rnd % 3]  # who goes first changes by round
                for c in cells:
                    for reader in readers:
                        if reader not in run_readers:
                            continue
                        if reader == 'direct' and ('chunks' in c.spec or c.spec['comp'] not in ('deflate', 'none')):
                            continue  # the direct reader reads chunks of whole rows, deflated or not
                        full = None  # h5py and the direct reader: mmap and read are the same work
                        for access in accesses:
                            key = (c.name, sname, access, reader)
                            if reader != 'h5direct' and access in ('mmap', 'read') and full:
                                secs, io = full
                            else:
                                try:
                                    secs, io = one_pass(c, access, reader, bufs[c.name], verify=rnd == 0)
                                except OSError as e:
                                    if slow and slow.proc.poll() is not None:
                                        why = slow.proc.stderr.read().decode(errors='replace')[-2000:]
                                        sys.exit(f'[cold] slowfs exited ({slow.proc.returncode}) during '
                                                 f'{c.name} {access} {reader}: {e}\nslowfs said: {why}')
                                    raise
                                if reader != 'h5direct' and access in ('mmap', 'read'):
                                    full = (secs, io)
                            results.setdefault(key, []).append(secs)
                            iolog.setdefault(key, []).append(io)
                    print(f'[cold] {sname}, round {rnd + 1}: {c.name} done', flush=True)
                if runopen:
                    for variant, fn in (('h5direct, files map', runopen.h5direct),
                                        ('h5direct, no map', lambda: runopen.h5direct(False)),
                                        ('EXtra-data, no map', lambda: runopen.extra_data(False)),
                                        ('EXtra-data, files map', lambda: runopen.extra_data(True))):
                        secs, io = fn()
                        results.setdefault(('runopen', sname, 'open+read', variant), []).append(secs)
                        iolog.setdefault(('runopen', sname, 'open+read', variant), []).append(io)
                    print(f'[cold] {sname}, round {rnd + 1}: runopen done', flush=True)
        finally:
            if slow:
                slow.close()
finally:
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


# ---- report -----------------------------------------------------------------------------------

def med(v):
    v = sorted(v)
    return v[len(v) // 2] if v else None


def num(v, digits):
    """v with `digits` decimals; '-' for a reader that did not read the cell."""
    return '-' if v is None else f'{v:.{digits}f}'


def med_io(key):
    """Per counter, the median over the passes."""
    passes = iolog.get(key, [])
    out = {}
    for part in ('slowfs', 'h5direct', 'cpu'):
        names = sorted({k for p in passes for k in p.get(part, {})})
        if names:
            out[part] = {k: med([p[part][k] for p in passes if k in p.get(part, {})]) for k in names}
    return out


def fmt_io(d):
    if not d:
        return ''
    return ', '.join(f'{k} {v / 1e6:.1f}M' if isinstance(v, (int, float)) and abs(v) >= 1e6 else f'{k} {v:g}'
                     for k, v in d.items())


def slowfs_brief(d):
    """The counters the table shows (the JSON has all): requests, bytes, most in flight."""
    d = d or {}
    brief = {k: d[k] for k in ('reads', 'bytes', 'max_in_flight') if k in d}
    return brief or d


lines = [f'Command: `{command}`', '',
         f'{args.rounds} rounds (readers interleaved, first reader rotating), medians; '
         f'{os.cpu_count()} cores; libhdf5 {h5py.version.hdf5_version}; h5py {h5py.version.version}; '
         f'mount options: {args.opts or "(defaults)"}; direct reader threads: {args.direct_threads}; '
         f'emulator: {SLOWFS}; page cache dropped before every pass; {state}.', '',
         '| cell | storage | access | h5py s | direct s | h5direct s | x h5py | x direct | '
         'h5direct I/O (stats.json) | slowfs requests h5py / direct / h5direct |',
         '|---|---|---|---|---|---|---|---|---|---|']
table = []
for c in cells:
    for st in storages:
        sname = storage_name(st)
        for access in accesses:
            t = {r: med(results.get((c.name, sname, access, r), [])) for r in READERS}
            ios = {r: med_io((c.name, sname, access, r)) for r in READERS}
            x_direct = t['direct'] / t['h5direct'] if None not in (t['direct'], t['h5direct']) else None
            x_h5py = t['h5py'] / t['h5direct'] if None not in (t['h5py'], t['h5direct']) else None
            row = dict(cell=c.name, storage=sname, latency_ms=st[0], bandwidth_mbs=st[1], access=access,
                       seconds=t, x_h5py=x_h5py, x_direct=x_direct, io=ios)
            table.append(row)
            reqs = ' / '.join(fmt_io(slowfs_brief(ios[r].get('slowfs'))) or '-' for r in READERS)
            lines.append(f'| {c.name} ({c.nbytes / 1e6:.0f} MB, {c.ratio:.1f}x) | {sname} | {access} | '
                         f'{num(t["h5py"], 3)} | {num(t["direct"], 3)} | {num(t["h5direct"], 3)} | {num(x_h5py, 2)} | '
                         f'{num(x_direct, 2)} | {fmt_io(ios["h5direct"].get("h5direct"))} | {reqs} |')
if runopen:
    lines += ['', f'runopen: {runopen.nfiles} files, {runopen.frames} frames a module; the key read is '
              f'{RUNOPEN_SOURCE} image.data ({runopen.reference.nbytes / 1e6:.0f} MB).', '',
              '| storage | variant | seconds | details (medians) |', '|---|---|---|---|']
    for st in storages:
        sname = storage_name(st)
        for variant in ('h5direct, files map', 'h5direct, no map', 'EXtra-data, no map', 'EXtra-data, files map'):
            key = ('runopen', sname, 'open+read', variant)
            passes = iolog[key]
            det = {k: med([p[k] for p in passes]) for k in passes[0] if k != 'h5direct'}
            s = med(results[key])
            table.append(dict(cell='runopen', storage=sname, variant=variant, seconds=s, details=det))
            lines.append(f'| {sname} | {variant} | {s:.3f} | '
                         + ', '.join(f'{k} {v:.3f} s' if isinstance(v, float) else f'{k} {v}'
                                     for k, v in det.items()) + ' |')
benchlib.write_report('\n'.join(lines), args.md, args.json,
                      dict(command=command, machine=state, cores=os.cpu_count(), table=table,
                           raw={'|'.join(map(str, k)): v for k, v in results.items()},
                           io={'|'.join(map(str, k)): v for k, v in iolog.items()}))
if args.plot and cells:
    import plot_cold
    plot_cold.plot(table, args.plot, f'cold reads from emulated storage; {state}')
