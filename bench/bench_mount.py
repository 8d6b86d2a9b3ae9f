#!/usr/bin/python3
"""h5direct through the mount, side by side with h5py and the FUSE ceiling, in one run.

Cases (the performance issue's table):
  compressed   shuffle+deflate(1) frames, first sequential read after mount
  uncompressed frames, first sequential read after mount (vs a bare FUSE file from memory)
  random       1000 random whole frames of the compressed data (vs h5py per-frame reads)
  chunkmap     chunk map of 100,000 chunks (bench_chunkmap)
  stream       a 10 GB virtual file streamed with cache_size=256M: the daemon's peak RSS
plus scaling of the compressed read over 1..N decode threads and the CPU limit (one core's
decode rate on the same data, times the cores).

Data: detector-like uint16 frames (512x128, pedestal + noise), one frame per chunk, generated
here and kept warm in the page cache (this measures CPU and FUSE, not disks). Every timed pass
through the mount mounts afresh. Rounds are interleaved; medians are reported.

Usage: bench/bench_mount.py [--build build] [--frames 4000] [--rounds 3] [--out docs/images/bench_mount.png]
"""
import argparse
import json
import os
import os.path as osp
import shutil
import subprocess
import tempfile
import time

import h5py
import numpy as np

import benchlib

p = argparse.ArgumentParser()
p.add_argument('--build', default='build')
p.add_argument('--frames', type=int, default=4000)
p.add_argument('--rounds', type=int, default=3)
p.add_argument('--random', type=int, default=1000)
p.add_argument('--stream-gb', type=float, default=10.0)
p.add_argument('--workdir', default=None)
p.add_argument('--out', default='docs/images/bench_mount.png')
p.add_argument('--skip', default='', help='comma-separated cases to skip')
args = p.parse_args()
skip = set(filter(None, args.skip.split(',')))

BIN = osp.abspath(osp.join(args.build, 'daemon', 'mount.h5direct'))
CEIL = osp.abspath(osp.join(args.build, 'bench', 'fuse_ceiling'))
CORE = osp.abspath(osp.join(args.build, 'bench', 'bench_core_file'))
CHUNKMAP = osp.abspath(osp.join(args.build, 'bench', 'bench_chunkmap'))
NCPU = os.cpu_count()
work = args.workdir or tempfile.mkdtemp(prefix='h5d-bench-')
src = osp.join(work, 'src')
mnt = osp.join(work, 'mnt')
os.makedirs(src, exist_ok=True)
os.makedirs(mnt, exist_ok=True)
FRAME = (512, 128)


def frames_data(n, seed):
    rng = np.random.default_rng(seed)
    ped = rng.normal(1000, 50, size=FRAME).astype(np.float32)
    out = np.empty((n,) + FRAME, '<u2')
    for i in range(0, n, 256):
        k = min(256, n - i)
        out[i:i + k] = np.clip(ped + rng.normal(0, 8, size=(k,) + FRAME), 0, 65535).astype('<u2')
    return out


def make_files():
    path = osp.join(src, 'frames.h5')
    if not osp.exists(path):
        data = frames_data(args.frames, 1)
        with h5py.File(path + '.tmp', 'w') as f:
            f.create_dataset('compressed', data=data, chunks=(1,) + FRAME, shuffle=True,
                             compression='gzip', compression_opts=1)
            f.create_dataset('uncompressed', data=data, chunks=(1,) + FRAME)
        os.rename(path + '.tmp', path)
    return path


def warm(path):
    with open(path, 'rb') as f:
        while f.read(1 << 24):
            pass


def Mounted(opts=''):
    return benchlib.mount_h5direct(BIN, src, opts or None, mnt=mnt)


def Ceiling(size, readahead_kb=0):
    # readahead_kb: the mount's read-ahead (root only), set while INIT is answered the way
    # h5direct sets its own; 0 keeps the kernel's default (128 KiB).
    ra = [str(readahead_kb)] if readahead_kb and os.geteuid() == 0 else []
    return benchlib.Mount([CEIL, mnt, str(size)] + ra, mnt)


def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


results = {}   # name -> list of seconds


def record(name, seconds):
    results.setdefault(name, []).append(seconds)


def med(name):
    v = sorted(results[name])
    return v[len(v) // 2]


path = make_files()
warm(path)
nbytes = args.frames * FRAME[0] * FRAME[1] * 2
dest = np.empty((args.frames,) + FRAME, '<u2')
rawbuf = bytearray(nbytes)
with h5py.File(path, 'r') as f:
    reference = f['uncompressed'][()]

for rnd in range(args.rounds):
    for kind in ('compressed', 'uncompressed'):
        if kind in skip:
            continue
        with h5py.File(path, 'r') as f:
            record(f'{kind}/h5py read_direct', timed(lambda: f[kind].read_direct(dest)))
        with Mounted() as m:
            fn = osp.join(mnt, 'frames.h5', kind + '.npy')
            def load():
                a = np.load(fn, mmap_mode='r')
                dest[...] = a
            record(f'{kind}/h5direct np.load(mmap)', timed(load))
        assert np.array_equal(dest, reference), 'mount returned different bytes'
        with Mounted() as m:
            record(f'{kind}/h5direct read()', timed(lambda: benchlib.read_all(osp.join(mnt, 'frames.h5', kind + '.raw'), rawbuf)))
        assert bytes(rawbuf[:4096]) == reference.tobytes()[:4096]
        if kind == 'uncompressed':
            for ra, tag in ((0, ''), (1024, ', 1 MiB read-ahead')):
                with Ceiling(nbytes, ra):
                    record(f'{kind}/FUSE ceiling{tag} read()', timed(lambda: benchlib.read_all(osp.join(mnt, 'data'), rawbuf)))
                with Ceiling(nbytes, ra):
                    def ceil_mm():
                        a = np.memmap(osp.join(mnt, 'data'), mode='r', dtype='<u2', shape=dest.shape)
                        dest[...] = a
                    record(f'{kind}/FUSE ceiling{tag} np.memmap', timed(ceil_mm))
    if 'random' not in skip:
        idx = np.random.default_rng(rnd).integers(0, args.frames, args.random)
        with h5py.File(path, 'r') as f:
            d = f['compressed']
            record('random/h5py dset[i]', timed(lambda: [d[int(i)] for i in idx]))
        fsz = FRAME[0] * FRAME[1] * 2
        out = np.empty(FRAME, '<u2')

        def rnd_mmap(a):
            for i in idx:
                out[...] = a[int(i)]

        def rnd_pread(fn):
            fd = os.open(fn, os.O_RDONLY)
            try:
                for i in idx:
                    out.view(np.uint8).reshape(-1)[:] = np.frombuffer(os.pread(fd, fsz, int(i) * fsz), np.uint8)
            finally:
                os.close(fd)
        with Mounted() as m:
            a = np.load(osp.join(mnt, 'frames.h5', 'compressed.npy'), mmap_mode='r')
            record('random/h5direct np.load(mmap)[i]', timed(lambda: rnd_mmap(a)))
            del a  # a live mapping keeps a lazy unmount (and the daemon) waiting
        with Mounted() as m:
            record('random/h5direct pread(.raw)', timed(lambda: rnd_pread(osp.join(mnt, 'frames.h5', 'compressed.raw'))))
            with open(osp.join(mnt, '.h5direct', 'stats.json')) as f:
                st = json.load(f)
            record('random/h5direct pread(.raw) decoding', st['decode_seconds'])
            record('random/h5direct pread(.raw) chunks decoded', st['chunks_decoded'])
        # The floor under any FUSE reader of these frames: the same loops over a bare FUSE file
        # served from memory (no decode), at the kernel's default read-ahead.
        with Ceiling(nbytes):
            a = np.memmap(osp.join(mnt, 'data'), mode='r', dtype='<u2', shape=(args.frames,) + FRAME)
            record('random/FUSE ceiling np.memmap[i]', timed(lambda: rnd_mmap(a)))
            del a
        with Ceiling(nbytes):
            record('random/FUSE ceiling pread', timed(lambda: rnd_pread(osp.join(mnt, 'data'))))
    if 'scaling' not in skip:
        for t in range(1, NCPU + 1):
            with Mounted(f'threads={t}'):
                record(f'scaling/threads={t}', timed(lambda: benchlib.read_all(osp.join(mnt, 'frames.h5', 'compressed.raw'), rawbuf)))

# CPU limit: one core's rate through core (pread + decode + copy, no FUSE) on the same data.
# Pinned to one CPU: the reading thread helps the pool, so an unpinned "1 thread" run uses two.
core1 = subprocess.run(['taskset', '-c', '0', CORE, path, '/compressed', '1', str(args.rounds)], capture_output=True, text=True, check=True)
core_1_gbs = float(core1.stdout.split()[1])
coreN = subprocess.run([CORE, path, '/compressed', str(NCPU), str(args.rounds)], capture_output=True, text=True, check=True)
core_n_gbs = float(coreN.stdout.split()[1])

gb = nbytes / 1e9
rows = []
def row(case, reader, name, goal=''):
    s = med(name)
    rows.append((case, reader, s, gb / s, goal))

ratio = {}
if 'compressed' not in skip:
    base = med('compressed/h5py read_direct')
    row('shuffle+deflate, first read', 'h5py read_direct', 'compressed/h5py read_direct')
    row('shuffle+deflate, first read', 'h5direct np.load(mmap) copy', 'compressed/h5direct np.load(mmap)')
    row('shuffle+deflate, first read', 'h5direct read()', 'compressed/h5direct read()')
    ratio['compressed mmap vs h5py'] = base / med('compressed/h5direct np.load(mmap)')
    ratio['compressed read() vs h5py'] = base / med('compressed/h5direct read()')
if 'uncompressed' not in skip:
    row('uncompressed, first read', 'h5py read_direct', 'uncompressed/h5py read_direct')
    row('uncompressed, first read', 'h5direct np.load(mmap) copy', 'uncompressed/h5direct np.load(mmap)')
    row('uncompressed, first read', 'h5direct read()', 'uncompressed/h5direct read()')
    for tag in ('', ', 1 MiB read-ahead'):
        row('uncompressed, first read', f'FUSE ceiling{tag} read()', f'uncompressed/FUSE ceiling{tag} read()')
        row('uncompressed, first read', f'FUSE ceiling{tag} np.memmap copy', f'uncompressed/FUSE ceiling{tag} np.memmap')
    for tag, what in (('', 'kernel read-ahead'), (', 1 MiB read-ahead', '1 MiB read-ahead')):
        ratio[f'uncompressed read() vs ceiling read() ({what})'] = med(f'uncompressed/FUSE ceiling{tag} read()') / med('uncompressed/h5direct read()')
        ratio[f'uncompressed mmap vs ceiling memmap ({what})'] = med(f'uncompressed/FUSE ceiling{tag} np.memmap') / med('uncompressed/h5direct np.load(mmap)')
if 'random' not in skip:
    ratio['random frames, np.load(mmap)[i] vs h5py dset[i]'] = med('random/h5py dset[i]') / med('random/h5direct np.load(mmap)[i]')
    ratio['random frames, pread(.raw) vs h5py dset[i]'] = med('random/h5py dset[i]') / med('random/h5direct pread(.raw)')
    # Best h5direct could do here: the same loop over the bare FUSE file (no decode) plus the time
    # the daemon spent reading and decoding the frames in that run (stats.json decode_seconds).
    floor = med('random/FUSE ceiling pread') + med('random/h5direct pread(.raw) decoding')
    ratio['random frames, bound: h5py / (bare FUSE file pread + decoding)'] = med('random/h5py dset[i]') / floor

chunkmap = None
if 'chunkmap' not in skip and osp.exists(CHUNKMAP):
    cm = subprocess.run([CHUNKMAP], capture_output=True, text=True, timeout=1800)
    chunkmap = cm.stdout

stream = None
if 'stream' not in skip:
    spath = osp.join(src, 'stream.h5')
    n_chunks = int(args.stream_gb * 1e9 / (FRAME[0] * FRAME[1] * 2))
    if not osp.exists(spath):
        import zlib
        # A smooth frame: every chunk is the same small deflate stream, so the 10 GB virtual
        # file costs little disk while every chunk still goes through decode and the cache.
        frame = ((np.arange(FRAME[0] * FRAME[1]) % 97) + 1000).astype('<u2').reshape(FRAME)
        shuf = np.frombuffer(frame.tobytes(), np.uint8).reshape(-1, 2).T.tobytes()
        blob = zlib.compress(shuf, 1)
        with h5py.File(spath + '.tmp', 'w') as f:
            d = f.create_dataset('frames', shape=(n_chunks,) + FRAME, dtype='<u2', chunks=(1,) + FRAME,
                                 shuffle=True, compression='gzip', compression_opts=1)
            for i in range(n_chunks):
                d.id.write_direct_chunk((i, 0, 0), blob)
        os.rename(spath + '.tmp', spath)
    with Mounted('cache_size=256M') as m:
        buf = bytearray(8 << 20)
        t = time.perf_counter()
        total = 0
        with open(osp.join(mnt, 'stream.h5', 'frames.raw'), 'rb', buffering=0) as f:
            while True:
                k = f.readinto(buf)
                if not k:
                    break
                total += k
        secs = time.perf_counter() - t
        stream = (total / 1e9, secs, m.peak_rss_mb())

lines = []
lines.append(f'Data: {args.frames} frames of 512x128 uint16 ({gb:.2f} GB decoded), one frame per chunk; '
             f'{args.rounds} interleaved rounds, medians; {NCPU} cores; libhdf5 {h5py.version.hdf5_version}.')
lines.append('')
lines.append('| case | reader | seconds | GB/s |')
lines.append('|---|---|---|---|')
for case, reader, s, r, goal in rows:
    lines.append(f'| {case} | {reader} | {s:.3f} | {r:.2f} |')
lines.append('')
lines.append(f'CPU limit (one core\'s pread+decode+copy rate through core on this data, pinned to one CPU, x {NCPU} cores): '
             f'{core_1_gbs:.2f} x {NCPU} = {core_1_gbs * NCPU:.2f} GB/s; core with {NCPU} threads measured {core_n_gbs:.2f} GB/s.')
lines.append('')
lines.append('| ratio (same run) | value |')
lines.append('|---|---|')
for k, v in ratio.items():
    lines.append(f'| {k} | {v:.2f}x |')
if 'random' not in skip:
    lines.append(f'| random: h5py {med("random/h5py dset[i]"):.3f} s, h5direct mmap {med("random/h5direct np.load(mmap)[i]"):.3f} s, '
                 f'pread {med("random/h5direct pread(.raw)"):.3f} s for {args.random} frames; '
                 f'bare FUSE file memmap {med("random/FUSE ceiling np.memmap[i]"):.3f} s, pread {med("random/FUSE ceiling pread"):.3f} s; '
                 f'h5direct pread run decoded {med("random/h5direct pread(.raw) chunks decoded"):.0f} chunks in '
                 f'{med("random/h5direct pread(.raw) decoding"):.3f} s | |')
if stream:
    lines.append('')
    lines.append(f'Streaming {stream[0]:.1f} GB through `frames.raw` with `-o cache_size=256M`: {stream[1]:.1f} s, '
                 f'daemon peak RSS {stream[2]:.0f} MB.')
if 'scaling' not in skip:
    lines.append('')
    lines.append('| pool threads (-o threads=N; the FUSE thread serving a read decodes too) | compressed read() GB/s |')
    lines.append('|---|---|')
    for t in range(1, NCPU + 1):
        lines.append(f'| {t} | {gb / med(f"scaling/threads={t}"):.2f} |')
if chunkmap:
    lines.append('')
    lines.append('Chunk map (bench_chunkmap):')
    lines.append('')
    lines.append(chunkmap.strip())
report = '\n'.join(lines)
print(report)

try:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = [f'{c.split(",")[0]}\n{r}' for c, r, _, _, _ in rows]
    axes[0].barh(range(len(rows)), [r for _, _, _, r, _ in rows], color='tab:blue')
    axes[0].set_yticks(range(len(rows)))
    axes[0].set_yticklabels(labels, fontsize=7)
    axes[0].invert_yaxis()
    axes[0].axvline(core_1_gbs * NCPU, color='tab:red', ls='--', label='CPU limit')
    axes[0].set_xlabel('GB/s (first read after mount)')
    axes[0].legend()
    if 'scaling' not in skip:
        ts = list(range(1, NCPU + 1))
        axes[1].plot(ts, [gb / med(f'scaling/threads={t}') for t in ts], 'o-', label='h5direct read()')
        axes[1].plot(ts, [core_1_gbs * t for t in ts], 'k--', label='one core x threads')
        axes[1].set_xlabel('decode threads')
        axes[1].set_ylabel('GB/s')
        axes[1].set_xticks(ts)
        axes[1].legend()
    fig.tight_layout()
    os.makedirs(osp.dirname(args.out), exist_ok=True)
    fig.savefig(args.out, dpi=100)
    print(f'\nplot: {args.out}')
except ImportError:
    pass
if not args.workdir:
    shutil.rmtree(work, ignore_errors=True)
