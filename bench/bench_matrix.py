#!/usr/bin/python3
"""The read path across sizes, chunkings, dtypes, filters, array kinds and access patterns.

Every cell is measured side by side in one run: h5direct through the mount against h5py reading
the same page-cached files (run-view keys and detector stacks: EXtra-data-style h5py reads of
the sequence files, row blocks per file by INDEX), and for uncompressed data also against a bare
FUSE file served from memory (bench/fuse_ceiling, at the read-ahead h5direct uses). Each
h5direct pass mounts afresh; rounds are interleaved; medians are reported.

Data cells: a base cell (1,600 frames of 512x128 uint16, one frame per chunk, shuffle+deflate(1),
detector-like noise, a plain chunked dataset) and one-factor variations of it: sizes 200, 4,000
and 16,000 frames; chunks of 8 frames and of half a frame; float32; LZ4, Blosc(lz4, shuffle) and
no compression; sparse (photon-counting-like, highly compressible) data; a VDS over 4 source
files, a run-view key over 3 sequence files and a detector stack of 4 modules (frames first).

Access patterns: mmap full copy; read() of the whole .raw; mmap slice of 10% of the frames;
every 4th frame; a region of every frame (a[..., 100:164, :]); 1,000 random frames; a warm
second read; two threads of one process reading halves; cold page cache (dropped before each
reader, root only) for the full reads.

Goals checked (docs/benchmarks.md, "Warm reads" and "Limits"): compressed cells >= 1.0x h5py;
first sequential reads of shuffle+deflate >= 2.5x h5py or >= 90% of the CPU limit (the daemon's
decode time over the cores, from stats.json); uncompressed >= 0.8x the bare FUSE file; random
frames >= 90% of the bound (bare FUSE file + the daemon's decode time); cold uncompressed >= 1.0x,
cold deflate >= 2.5x; warm >= 5x; two threads >= 1.8x.

Usage: bench/bench_matrix.py [--build build] [--rounds 3] [--cells base,f200,...] [--patterns ...]
                             [--opts MOUNT_OPTS] [--json out.json] [--md out.md] [--plot out.png]
"""
import argparse
import os
import os.path as osp
import shutil
import sys
import tempfile
import time

import h5py
import hdf5plugin
import numpy as np

import benchlib
from benchlib import FRAME, RowBlocks, Stack, drop_caches, split, timed
BASE = dict(frames=1600, chunk='1', dtype='u2', comp='deflate', data='noisy', kind='plain')
CELLS = {
    'base': {},
    'f200': dict(frames=200),
    'f4000': dict(frames=4000),
    'f16000': dict(frames=16000),
    'chunk8': dict(chunk='8'),
    'half': dict(chunk='half'),
    'float32': dict(dtype='f4'),
    'lz4': dict(comp='lz4'),
    'blosc': dict(comp='blosc'),
    'none': dict(comp='none'),
    'sparse': dict(data='sparse'),
    'vds': dict(kind='vds'),
    'run': dict(kind='run'),
    'stack': dict(kind='stack'),
    'none-vds': dict(comp='none', kind='vds'),
    'none-f16000': dict(comp='none', frames=16000),
}
PATTERNS = ['mmap', 'read', 'slice10', 'every4', 'region', 'random', 'warm', 'threads2',
            'cold_mmap', 'cold_read']
# Cells of 16,000 frames (2 GB) are measured on the patterns whose cost grows with the size.
BIG_PATTERNS = ['mmap', 'read', 'random', 'cold_mmap', 'cold_read']

p = argparse.ArgumentParser()
p.add_argument('--build', default='build')
p.add_argument('--rounds', type=int, default=3)
p.add_argument('--cells', default=','.join(CELLS))
p.add_argument('--patterns', default=','.join(PATTERNS))
p.add_argument('--random', type=int, default=1000)
p.add_argument('--opts', default='', help='extra mount options for h5direct')
p.add_argument('--workdir', default=None)
p.add_argument('--json', default=None)
p.add_argument('--md', default=None)
p.add_argument('--plot', default=None)
p.add_argument('--hold-freed-pages', action='store_true',
               help='keep freed guest pages from the host for 60 s during the run (VMs with free page '
                    'reporting: benchlib.hold_freed_pages)')
args = p.parse_args()
if args.hold_freed_pages and not benchlib.hold_freed_pages():
    sys.exit('--hold-freed-pages: cannot set ' + benchlib.MIN_FREE_MS + ' (root, a VM with it)')

BIN = osp.abspath(osp.join(args.build, 'daemon', 'mount.h5direct'))
CEIL = osp.abspath(osp.join(args.build, 'bench', 'fuse_ceiling'))
NCPU = os.cpu_count()
ROOT = os.geteuid() == 0
work = args.workdir or tempfile.mkdtemp(prefix='h5d-matrix-')
patterns = [x for x in args.patterns.split(',') if x]
if not ROOT:
    patterns = [x for x in patterns if not x.startswith('cold')]


# ---- data -------------------------------------------------------------------------------------

def spec_of(name):
    s = dict(BASE)
    s.update(CELLS[name])
    return s


def frames_data(spec, n, seed):
    return benchlib.frames_data(n, seed, spec['dtype'], sparse=spec['data'] == 'sparse')


def h5_kw(spec):
    rows = {'1': 1, '8': 8, 'half': 1}[spec['chunk']]
    chunks = (rows, FRAME[0] // 2, FRAME[1]) if spec['chunk'] == 'half' else (rows,) + FRAME
    kw = dict(chunks=chunks)
    if spec['comp'] == 'deflate':
        kw.update(compression='gzip', compression_opts=1, shuffle=True)
    elif spec['comp'] == 'lz4':
        kw.update(hdf5plugin.LZ4())
    elif spec['comp'] == 'blosc':
        kw.update(hdf5plugin.Blosc(cname='lz4', clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE))
    return kw


class Cell:
    """One data cell: its files, the path of its array in the mount, and an h5py oracle."""

    def __init__(self, name):
        self.name = name
        self.spec = spec_of(name)
        self.dir = osp.join(work, name)
        self.files = []
        n = self.spec['frames']
        self.n = n
        os.makedirs(self.dir, exist_ok=True)
        kind = self.spec['kind']
        kw = h5_kw(self.spec)
        if kind == 'plain':
            path = osp.join(self.dir, 'frames.h5')
            with h5py.File(path, 'w') as f:
                d = f.create_dataset('data', shape=(n,) + FRAME, dtype=self.spec['dtype'], **kw)
                for a, b in split(n, max(1, n // 800)):
                    d[a:b] = frames_data(self.spec, b - a, a + 1)
            self.files = [path]
            self.rel = 'frames.h5/data'
        elif kind == 'vds':
            layout = h5py.VirtualLayout(shape=(n,) + FRAME, dtype=self.spec['dtype'])
            for i, (a, b) in enumerate(split(n, 4)):
                sp = osp.join(self.dir, f'part{i}.h5')
                with h5py.File(sp, 'w') as f:
                    f.create_dataset('data', data=frames_data(self.spec, b - a, a + 1), **kw)
                layout[a:b] = h5py.VirtualSource(sp, 'data', shape=(b - a,) + FRAME)
                self.files.append(sp)
            path = osp.join(self.dir, 'vds.h5')
            with h5py.File(path, 'w') as f:
                f.create_virtual_dataset('data', layout)
            self.files.append(path)
            self.rel = 'vds.h5/data'
        else:
            # run: one AGIPD module over 3 sequence files; stack: a JUNGFRAU of 4 modules (one
            # memory cell: entries (1, 512, 128)), 2 sequence files each, frames first
            run_dir = osp.join(self.dir, 'r0001')
            self.files, self.rel = benchlib.write_detector_run(
                run_dir, kind, n, self.spec['dtype'], kw, lambda k, seed: frames_data(self.spec, k, seed))
            self.dir = run_dir
        self.h5 = None
        self.open_oracle()
        self.shape = self.oracle.shape
        self.dtype = np.dtype(self.spec['dtype'])
        self.nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
        self.reference = self.oracle_full()
        self.src = self.dir if kind in ('run', 'stack') else self.dir

    def open_oracle(self):
        self.close_oracle()
        kind = self.spec['kind']
        if kind in ('plain', 'vds'):
            self.h5 = [h5py.File(self.files[-1], 'r')]
            self.oracle = self.h5[0]['data']
            return
        self.h5 = [h5py.File(p, 'r') for p in self.files]
        mods = [RowBlocks(b) for b in benchlib.detector_blocks(self.h5, kind)]
        self.oracle = mods[0] if kind == 'run' else Stack(mods)

    def close_oracle(self):
        for f in self.h5 or []:
            f.close()
        self.h5 = None

    def oracle_full(self):
        o = self.oracle
        if isinstance(o, h5py.Dataset):
            out = np.empty(o.shape, o.dtype)
            o.read_direct(out)
            return out
        return o.rows(0, self.shape[0])

    def oracle_read(self, pattern, idx=None):
        o, n = self.oracle, self.shape[0]
        tail_region = (slice(None),) * (len(self.shape) - 3) + (slice(100, 164), slice(None))
        if isinstance(o, h5py.Dataset):
            if pattern in ('mmap', 'read', 'warm', 'cold_mmap', 'cold_read'):
                out = np.empty(o.shape, o.dtype)
                o.read_direct(out)
                return out
            if pattern == 'slice10':
                return o[n // 2: n // 2 + n // 10]
            if pattern == 'every4':
                return o[::4]
            if pattern == 'region':
                return o[(slice(None),) + tail_region]
            if pattern == 'random':
                return [o[int(i)] for i in idx]
        else:
            if pattern in ('mmap', 'read', 'warm', 'cold_mmap', 'cold_read'):
                return o.rows(0, n)
            if pattern == 'slice10':
                return o.rows(n // 2, n // 2 + n // 10)
            if pattern == 'every4':
                return o.rows(0, n, 4)
            if pattern == 'region':
                return o.rows(0, n, 1, tail_region)
            if pattern == 'random':
                return [o.row(int(i)) for i in idx]
        raise ValueError(pattern)


# ---- readers ----------------------------------------------------------------------------------

def mapped_read(a, pattern, idx, n):
    """The same access patterns on a numpy array-like that reads through pages (a memmap)."""
    tail_region = (slice(None),) * (a.ndim - 3) + (slice(100, 164), slice(None))
    if pattern in ('mmap', 'warm', 'cold_mmap'):
        out = np.empty(a.shape, a.dtype)
        out[...] = a
        return out
    if pattern == 'slice10':
        return np.array(a[n // 2: n // 2 + n // 10])
    if pattern == 'every4':
        return np.array(a[::4])
    if pattern == 'region':
        return np.array(a[(slice(None),) + tail_region])
    if pattern == 'random':
        out = np.empty(a.shape[1:], a.dtype)
        for i in idx:
            out[...] = a[int(i)]
        return out
    if pattern == 'threads2':
        out = np.empty(a.shape, a.dtype)
        def half(lo, hi):
            out[lo:hi] = a[lo:hi]
        return in_halves(half, n, out)
    raise ValueError(pattern)


def in_halves(fn, n, out):
    """fn(lo, hi) for the two halves of [0, n), on two threads at once; returns out."""
    benchlib.in_threads(fn, split(n, 2))
    return out


def h5direct_pass(cell, pattern, idx):
    mnt = osp.join(work, 'mnt')
    os.makedirs(mnt, exist_ok=True)
    with benchlib.mount_h5direct(BIN, cell.src, args.opts or None, mnt=mnt):
        npy = osp.join(mnt, cell.rel + '.npy')
        raw = osp.join(mnt, cell.rel + '.raw')
        if pattern == 'warm':
            a = np.load(npy, mmap_mode='r')
            mapped_read(a, 'mmap', idx, cell.shape[0])
            del a
        if pattern.startswith('cold'):
            drop_caches()
        if pattern in ('read', 'cold_read'):
            buf = bytearray(cell.nbytes)
            secs, _ = timed(lambda: benchlib.read_all(raw, buf))
            result = np.frombuffer(buf, cell.dtype).reshape(cell.shape)
        else:
            def run():
                a = np.load(npy, mmap_mode='r')
                try:
                    return mapped_read(a, pattern, idx, cell.shape[0])
                finally:
                    del a
            secs, result = timed(run)
        st = benchlib.mount_stats(mnt)
    return secs, result, st


def h5py_pass(cell, pattern, idx):
    """Times h5py getting the same data from the files, opening them included (as np.load's
    open and header read are included on the mount's side); warm: a second read, file open."""
    cell.close_oracle()
    if pattern.startswith('cold'):
        drop_caches()
    if pattern == 'warm':
        cell.open_oracle()
        cell.oracle_read('mmap')
        return timed(lambda: cell.oracle_read(pattern, idx))
    n = cell.shape[0]

    def run():
        cell.open_oracle()
        if pattern != 'threads2':
            return cell.oracle_read(pattern, idx)
        out = np.empty(cell.shape, cell.dtype)
        o = cell.oracle

        def half(lo, hi):
            if isinstance(o, h5py.Dataset):
                o.read_direct(out, np.s_[lo:hi], np.s_[lo:hi])
            else:
                out[lo:hi] = o.rows(lo, hi)
        return in_halves(half, n, out)
    return timed(run)


def ceiling_pass(cell, pattern, idx):
    mnt = osp.join(work, 'mnt')
    os.makedirs(mnt, exist_ok=True)
    ra = ['1024'] if ROOT else []
    with benchlib.Mount([CEIL, mnt, str(cell.nbytes)] + ra, mnt):
        path = osp.join(mnt, 'data')
        if pattern in ('read', 'cold_read'):
            buf = bytearray(cell.nbytes)
            return timed(lambda: benchlib.read_all(path, buf))[0]
        def run():
            a = np.memmap(path, mode='r', dtype=cell.dtype, shape=cell.shape)
            if pattern == 'warm':
                mapped_read(a, 'mmap', idx, cell.shape[0])
            return mapped_read(a, pattern, idx, cell.shape[0])
        return timed(run)[0]


def same(a, b):
    if isinstance(b, list):  # random frames: the h5py side returns each frame; mmap keeps the last
        b = b[-1]
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


def cell_patterns(cell):
    return [p for p in patterns if cell.n < 16000 or p in BIG_PATTERNS]


# ---- run --------------------------------------------------------------------------------------

results = {}  # (cell, pattern, who) -> [seconds]; who: h5direct, h5py, bare, decode, limit


def record(key, v):
    results.setdefault(key, []).append(v)


def med(key):
    v = sorted(results.get(key, []))
    return v[len(v) // 2] if v else None


cells = []
for name in [c for c in args.cells.split(',') if c]:
    t0 = time.monotonic()
    cells.append(Cell(name))
    print(f'[matrix] generated {name} ({cells[-1].nbytes / 1e6:.0f} MB) in {time.monotonic() - t0:.1f} s', flush=True)

def warm_files(cell):
    """Reads the cell's files into the page cache: a cold pattern of the cell before dropped it."""
    for path in cell.files:
        with open(path, 'rb') as f:
            while f.read(16 << 20):
                pass


for rnd in range(args.rounds):
    for cell in cells:
        warm_files(cell)
        idx = np.random.default_rng(rnd).integers(0, cell.shape[0], args.random)
        for pat in cell_patterns(cell):
            if not pat.startswith('cold'):
                warm_files(cell)  # after a cold pattern, the warm ones find the files cached again
            h, hres = h5py_pass(cell, pat, idx)
            record((cell.name, pat, 'h5py'), h)
            secs, res, st = h5direct_pass(cell, pat, idx)
            record((cell.name, pat, 'h5direct'), secs)
            record((cell.name, pat, 'decode'), st.get('decode_seconds', 0.0))
            record((cell.name, pat, 'reads'), st.get('reads', 0))
            record((cell.name, pat, 'pushed'), st.get('bytes_pushed', 0))
            if not same(res, hres):
                sys.exit(f'[matrix] {cell.name} {pat}: the mount gave other values than h5py')
            if cell.spec['comp'] == 'none' or pat == 'random':
                record((cell.name, pat, 'bare'), ceiling_pass(cell, pat, idx))
        print(f'[matrix] round {rnd + 1}: {cell.name} done', flush=True)

for cell in cells:
    cell.close_oracle()


# ---- report -----------------------------------------------------------------------------------

def goals(cell, pat):
    """[(what, ratio, goal, met)] for one cell and pattern (what: the ratio the goal is on)."""
    out = []
    h, d = med((cell.name, pat, 'h5py')), med((cell.name, pat, 'h5direct'))
    comp = cell.spec['comp'] != 'none'
    vs = h / d
    if pat == 'random':
        bound = med((cell.name, pat, 'bare')) + med((cell.name, pat, 'decode'))
        out.append(('bound / h5direct', bound / d, 0.9, bound / d >= 0.9))
    elif pat in ('mmap', 'read') and cell.spec['comp'] == 'deflate' and cell.n >= 1600:
        # 2.5x h5py, or 90% of the CPU limit: the daemon's decode time spread over the cores
        limit = med((cell.name, pat, 'decode')) / NCPU / d
        out.append((f'x h5py (CPU limit share {limit:.2f})', vs, 2.5, vs >= 2.5 or limit >= 0.9))
    elif pat.startswith('cold') and not comp:
        # The ceiling of any FUSE reader here: the bare FUSE file from memory (no I/O at all).
        ceiling = h / med((cell.name, pat, 'bare'))
        out.append((f'x h5py (bare FUSE file from memory: {ceiling:.2f}x)', vs, 1.0, vs >= 1.0))
    elif pat.startswith('cold'):
        g = 2.5 if cell.spec['comp'] == 'deflate' else 1.0
        out.append(('x h5py', vs, g, vs >= g))
    elif pat == 'warm':
        out.append(('x h5py', vs, 5.0, vs >= 5.0))
    elif pat == 'threads2':
        out.append(('x h5py', vs, 1.8, vs >= 1.8))
    if comp and not any(w.startswith('x h5py') for w, *_ in out):
        out.append(('x h5py', vs, 1.0, vs >= 1.0))
    if not comp and pat != 'random' and not pat.startswith('cold'):
        r = med((cell.name, pat, 'bare')) / d
        out.append(('bare FUSE / h5direct', r, 0.8, r >= 0.8))
    return out


def describe(cell):
    s = cell.spec
    chunk = {'1': '1 frame', '8': '8 frames', 'half': 'half a frame'}[s['chunk']]
    return f"{s['kind']}, {s['frames']} x 512x128 {s['dtype']}, {chunk}/chunk, {s['comp']}, {s['data']}"


lines = [f'{args.rounds} interleaved rounds, medians; {NCPU} cores; libhdf5 {h5py.version.hdf5_version}; '
         f'mount options: {args.opts or "(defaults)"}; {benchlib.reporting_state()}.', '',
         '| cell | pattern | h5py s | h5direct s | x h5py | other ratio | goal | met | reads | MB pushed |',
         '|---|---|---|---|---|---|---|---|---|---|']
table = []
for cell in cells:
    for pat in cell_patterns(cell):
        h, d = med((cell.name, pat, 'h5py')), med((cell.name, pat, 'h5direct'))
        for what, ratio, goal, met in goals(cell, pat):
            table.append(dict(cell=cell.name, pattern=pat, what=what, ratio=ratio, goal=goal, met=met))
            other = '' if what == 'x h5py' else f'{what}: {ratio:.2f}'
            lines.append(f'| {cell.name}: {describe(cell)} | {pat} | {h:.3f} | {d:.3f} | {h / d:.2f} | '
                         f'{other} | {goal:.1f} | {"yes" if met else "**no**"} | '
                         f'{med((cell.name, pat, "reads")):.0f} | {med((cell.name, pat, "pushed")) / 1e6:.0f} |')
benchlib.write_report('\n'.join(lines), args.md, args.json,
                      dict(table=table, raw={'|'.join(map(str, k)): v for k, v in results.items()}))
if args.plot:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(10, max(4, 0.16 * len(table))))
    ys = range(len(table))
    ax.barh(ys, [t['ratio'] / t['goal'] for t in table],
            color=['tab:green' if t['met'] else 'tab:red' for t in table])
    ax.set_yticks(list(ys))
    ax.set_yticklabels([f"{t['cell']} {t['pattern']} ({t['what']})" for t in table], fontsize=5)
    ax.invert_yaxis()
    ax.axvline(1.0, color='k', lw=1)
    ax.set_xlabel('measured ratio / goal (>= 1: goal met)')
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
if not args.workdir:
    shutil.rmtree(work, ignore_errors=True)
