#!/usr/bin/env python3
"""Two mount.h5direct binaries side by side on one dataset: a change measured against the binary
before it, in one run, passes alternating between them (this machine is shared and noisy).

    bench_ab.py OLD NEW SRC DATASET [--rounds N] [--opts O] [--hold-freed-pages]
                [--patterns slice10,mmap,read] [--cold LATENCY_MS,MBS [--slowfs BIN]]

OLD and NEW are mount.h5direct binaries (each with its h5direct-helper beside it, as a build
puts them), SRC the source file or directory, DATASET the path of the virtual file without
suffix (e.g. frames.h5/data). Every pass is a fresh mount of the binary; patterns: `slice10`
(np.array of the middle 10% of the rows through mmap, np.load's open included), `mmap` (a full
copy through mmap), `read` (read() of the .raw in 1 MiB calls); also `slice_into` (the same
rows copied into an array allocated before the pass, as bench_cold.py's slice10 does: glibc's
memmove then walks them backwards) and `halves` (two threads copying a half each).
With --cold, SRC is read through bench/slowfs (LATENCY_MS a request, MBS per request: the
emulated slow storage of bench_cold.py, mounted over SRC's directory) and the page cache is
dropped before every pass (root). Prints the medians of each binary, the ratio old/new (> 1:
NEW is faster), and the requests of each pass (stats.json).
"""
import argparse
import json
import os
import os.path as osp
import statistics
import sys
import subprocess
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import benchlib  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument('old')
p.add_argument('new')
p.add_argument('src')
p.add_argument('dataset')
p.add_argument('--rounds', type=int, default=5)
p.add_argument('--opts', default=None, help='mount options for both binaries')
p.add_argument('--patterns', default='slice10,mmap,read', help='of slice10, slice_into, mmap, read, halves')
p.add_argument('--cold', default=None, help='LATENCY_MS,MBS: read SRC through bench/slowfs, caches dropped')
p.add_argument('--slowfs', default=None, help='the emulator (default: bench/slowfs of the build NEW is in)')
p.add_argument('--hold-freed-pages', action='store_true',
               help='keep freed pages in the guest for the run (benchlib.hold_freed_pages)')
args = p.parse_args()
if args.hold_freed_pages:
    benchlib.hold_freed_pages()

PATTERNS = tuple(args.patterns.split(','))
if set(PATTERNS) - {'slice10', 'slice_into', 'mmap', 'read', 'halves'}:
    sys.exit('--patterns: of slice10, slice_into, mmap, read, halves')
mnt = tempfile.mkdtemp(prefix='ab-mnt-')
slow = None
shown_src = args.src
if args.cold:
    lat, mbs = (float(x) for x in args.cold.split(','))
    emu = args.slowfs or osp.join(osp.dirname(osp.abspath(args.new)), '..', 'bench', 'slowfs')
    src_dir = osp.abspath(args.src if osp.isdir(args.src) else osp.dirname(args.src))
    smnt = tempfile.mkdtemp(prefix='ab-slow-')
    slow = benchlib.Mount([emu, src_dir, smnt, '-f', '--latency-ms', f'{lat:g}', '--bandwidth-mbs', f'{mbs:g}'],
                          smnt, stderr=subprocess.PIPE, remove_mnt=True)
    args.src = osp.join(smnt, osp.relpath(osp.abspath(args.src), src_dir))
times = {(b, pat): [] for b in ('old', 'new') for pat in PATTERNS}
reads = {(b, pat): [] for b in ('old', 'new') for pat in PATTERNS}


def buffers():
    """The reader's buffers, allocated and touched once before any timed pass (a mount of OLD,
    untimed): no pass pays the first touch of its pages, which costs ~11 us a page here."""
    with benchlib.mount_h5direct(args.old, args.src, args.opts, mnt=mnt):
        a = np.load(osp.join(mnt, args.dataset + '.npy'), mmap_mode='r')
        shape, dtype = a.shape, a.dtype
        del a
    o = np.empty(shape, dtype)
    o.fill(0)
    b = bytearray(o.nbytes)
    b[::4096] = b'\1' * len(range(0, len(b), 4096))
    n = shape[0]
    sl = np.zeros((max(1, n // 10),) + shape[1:], dtype)
    return o, b, sl


def one_pass(binary, pat):
    with benchlib.mount_h5direct(binary, args.src, args.opts, mnt=mnt):
        npy = osp.join(mnt, args.dataset + '.npy')
        raw = osp.join(mnt, args.dataset + '.raw')
        if args.cold:
            benchlib.drop_caches()
        t = time.perf_counter()
        if pat == 'read':
            benchlib.read_all(raw, buf)
        else:
            a = np.load(npy, mmap_mode='r')
            n = a.shape[0]
            if pat == 'slice10':
                np.array(a[n // 2: n // 2 + max(1, n // 10)])
            elif pat == 'slice_into':
                sl[...] = a[n // 2: n // 2 + max(1, n // 10)]
            elif pat == 'halves':
                def half(lo, hi):
                    out[lo:hi] = a[lo:hi]
                ts = [threading.Thread(target=half, args=h) for h in ((0, n // 2), (n // 2, n))]
                for x in ts:
                    x.start()
                for x in ts:
                    x.join()
            else:
                out[...] = a
            del a
        secs = time.perf_counter() - t
        with open(osp.join(mnt, '.h5direct', 'stats.json')) as f:
            st = json.load(f)
    return secs, st.get('reads', -1)


try:
    out, buf, sl = buffers()
    for r in range(args.rounds):
        for pat in PATTERNS:
            for b in (('old', 'new') if r % 2 == 0 else ('new', 'old')):
                s, n = one_pass(getattr(args, b), pat)
                times[(b, pat)].append(s)
                reads[(b, pat)].append(n)
finally:
    os.rmdir(mnt)
    if slow:
        slow.close()

cold = f'cold: bench/slowfs {args.cold} (ms, MB/s), caches dropped before every pass' if args.cold else 'warm'
print(f'# {shown_src} {args.dataset}, {args.rounds} rounds, opts={args.opts}; {cold}; {benchlib.reporting_state()}')
print('| pattern | old s | new s | old / new | requests old | requests new |')
print('|---|---|---|---|---|---|')
for pat in PATTERNS:
    o = statistics.median(times[('old', pat)])
    n = statistics.median(times[('new', pat)])
    print(f'| {pat} | {o:.4f} | {n:.4f} | {o / n:.2f} | {statistics.median(reads[("old", pat)]):.0f} '
          f'| {statistics.median(reads[("new", pat)]):.0f} |')
