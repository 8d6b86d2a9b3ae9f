#!/usr/bin/python3
"""Thread scaling of the read path (issue 27). Benchmark only: never run by ctest.

One dataset (shuffle+deflate(1) or uncompressed, one 512x128 uint16 frame a chunk) read whole
(1) by h5direct's engine alone (build/bench/bench_core_file FILE /data THREADS 1: no FUSE) and
(2) through a fresh mount with -o threads=T (and io_depth=D when the mount knows that option,
from its --help), for T = 1, 2, 4, ... up to --max-threads (default: the cores), on a cold pass
(page cache dropped first, root) and a warm one (the source file in the page cache; the mount
fresh). Optionally the file lies on emulated slow storage (--slowfs with one --latency and
--bandwidth). Prints seconds, GB/s, speedup over one thread and efficiency (speedup / threads).

Usage: bench/bench_scaling.py [--build build] [--frames 2000] [--comp deflate|none]
       [--max-threads N] [--io-depth D] [--rounds 3] [--slowfs PATH --latency MS --bandwidth MBS]
       [--md F] [--json F] [--hold-freed-pages]
"""
import argparse
import os
import os.path as osp
import shlex
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import benchlib  # noqa: E402

p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
p.add_argument('--build', default='build')
p.add_argument('--frames', type=int, default=2000)
p.add_argument('--comp', default='deflate', choices=['deflate', 'none'])
p.add_argument('--max-threads', type=int, default=os.cpu_count())
p.add_argument('--io-depth', type=int, default=None, help='-o io_depth=D for every mount (if supported)')
p.add_argument('--rounds', type=int, default=3)
p.add_argument('--slowfs', default=None, help='put the file on this emulator (bench/slowfs)')
p.add_argument('--latency', type=float, default=2.0)
p.add_argument('--bandwidth', type=float, default=400.0)
p.add_argument('--workdir', default=None)
p.add_argument('--md', default=None)
p.add_argument('--json', default=None)
p.add_argument('--hold-freed-pages', action='store_true')
args = p.parse_args()
if os.geteuid() != 0:
    sys.exit('bench_scaling.py drops the page cache for its cold passes: run it as root')
if args.hold_freed_pages and not benchlib.hold_freed_pages():
    sys.exit('--hold-freed-pages: cannot set ' + benchlib.MIN_FREE_MS)
BIN = osp.abspath(osp.join(args.build, 'daemon', 'mount.h5direct'))
CORE = osp.abspath(osp.join(args.build, 'bench', 'bench_core_file'))
for b in (BIN, CORE):
    if not os.access(b, os.X_OK):
        sys.exit(f'no {b}: build the project (--build DIR)')
threads = []
t = 1
while t < args.max_threads:
    threads.append(t)
    t *= 2
threads.append(args.max_threads)

work = osp.abspath(args.workdir or tempfile.mkdtemp(prefix='h5d-scaling-'))
D, S, M = (osp.join(work, x) for x in ('D', 'S', 'M'))
for d in (D, S, M):
    os.makedirs(d, exist_ok=True)
path = osp.join(D, 'frames.h5')
if not osp.exists(path):
    kw = dict(chunks=(1,) + benchlib.FRAME)
    if args.comp == 'deflate':
        kw.update(compression='gzip', compression_opts=1, shuffle=True)
    with h5py.File(path, 'w') as f:
        ds = f.create_dataset('data', shape=(args.frames,) + benchlib.FRAME, dtype='u2', **kw)
        for a, b in benchlib.split(args.frames, max(1, args.frames // 800)):
            ds[a:b] = benchlib.frames_data(b - a, a + 1, spread=20, sigma=3)
with h5py.File(path, 'r') as f:
    shape = f['data'].shape
nbytes = int(np.prod(shape)) * 2
gb = nbytes / 1e9

help_text = subprocess.run([BIN, '--help'], capture_output=True, text=True).stdout
io_depth = None
if args.io_depth is not None:
    if 'io_depth' in help_text:
        io_depth = args.io_depth
    else:
        print(f'[scaling] {BIN} has no io_depth option: measured without it', flush=True)

slow = None
src_dir = D
if args.slowfs:
    slow = benchlib.Mount([osp.abspath(args.slowfs), D, S, '-f', '--latency-ms', f'{args.latency:g}',
                           '--bandwidth-mbs', f'{args.bandwidth:g}'], S)
    src_dir = S
src = osp.join(src_dir, 'frames.h5')
out = np.zeros(shape, np.uint16)
results = {}  # (who, state, threads) -> [seconds]


def warm():
    with open(src, 'rb') as f:
        while f.read(16 << 20):
            pass


def core_pass(t, cold):
    if cold:
        benchlib.drop_caches()
    else:
        warm()
    r = subprocess.run([CORE, src, '/data', str(t), '1'], capture_output=True, text=True, check=True)
    return float(r.stdout.split()[0])  # the chunk map is loaded before its timing


def mount_pass(t, cold):
    opts = f'threads={t}' + (f',io_depth={io_depth}' if io_depth is not None else '')
    if not cold:
        warm()
    with benchlib.mount_h5direct(BIN, src_dir, opts, mnt=M):
        if cold:
            benchlib.drop_caches()
        secs, _ = benchlib.timed(lambda: out.__setitem__(Ellipsis, np.load(osp.join(M, 'frames.h5', 'data.npy'),
                                                                            mmap_mode='r')))
    return secs


try:
    for rnd in range(args.rounds):
        for state in ('cold', 'warm'):
            for t in threads:
                for who, fn in (('engine', core_pass), ('mount', mount_pass)):
                    results.setdefault((who, state, t), []).append(fn(t, state == 'cold'))
        print(f'[scaling] round {rnd + 1} done', flush=True)
finally:
    if slow:
        slow.close()
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


def med(v):
    v = sorted(v)
    return v[len(v) // 2]


storage = (f'slowfs {args.latency:g} ms, {args.bandwidth:g} MB/s' if args.slowfs else 'local disk')
lines = [f'Command: `{" ".join(shlex.quote(x) for x in [sys.executable] + sys.argv)}`', '',
         f'{shape[0]} frames of 512x128 uint16 ({gb:.2f} GB), {args.comp}, one frame a chunk, on {storage}; '
         f'{args.rounds} rounds, medians; {os.cpu_count()} cores; io_depth: {io_depth if io_depth is not None else "not set"}; '
         f'{benchlib.reporting_state()}.', '',
         '| reader | pass | threads | seconds | GB/s | speedup | efficiency |', '|---|---|---|---|---|---|---|']
table = []
for who in ('engine', 'mount'):
    for state in ('cold', 'warm'):
        base = med(results[(who, state, 1)])
        for t in threads:
            s = med(results[(who, state, t)])
            row = dict(reader=who, state=state, threads=t, seconds=s, gbs=gb / s, speedup=base / s,
                       efficiency=base / s / t)
            table.append(row)
            lines.append(f'| {who} | {state} | {t} | {s:.3f} | {gb / s:.2f} | {base / s:.2f} | {base / s / t:.2f} |')
benchlib.write_report('\n'.join(lines), args.md, args.json,
                      dict(table=table, raw={'|'.join(map(str, k)): v for k, v in results.items()}))
