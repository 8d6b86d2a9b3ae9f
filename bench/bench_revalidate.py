#!/usr/bin/env python3
"""The cost of following source directories (-o revalidate) on listings: `ls -l` (a listing and
an lstat of every name, done in this process) of a directory
of many HDF5 files through two mount.h5direct binaries side by side, passes alternating between
them (this machine is shared and noisy).

    bench_revalidate.py OLD NEW [--entries 1000] [--passes 30] [--workdir DIR]

OLD and NEW are mount.h5direct binaries (each with its h5direct-helper beside it). Both mount
the same source with their defaults and stay mounted. Reported per binary: the first `ls -l`
(nothing cached), then two regimes of later passes: back to back (as a script listing in a
loop: the kernel's caches are fresh), and one pass every 1.5 s (longer than revalidate=1: the
kernel asks the daemon again where it keeps names at most that long). Also the daemon's CPU
time over each regime, from /proc.
"""
import argparse
import os
import os.path as osp
import statistics
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import benchlib  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument('old')
p.add_argument('new')
p.add_argument('--entries', type=int, default=1000)
p.add_argument('--passes', type=int, default=30)
p.add_argument('--workdir', default=None)
args = p.parse_args()

work = tempfile.mkdtemp(prefix='bench-listing-', dir=args.workdir)
src = osp.join(work, 'src')
d = osp.join(src, 'dir')
os.makedirs(d)
for i in range(args.entries):
    with h5py.File(osp.join(d, f'f{i:05d}.h5'), 'w') as f:
        f['x'] = np.arange(4, dtype='<i4')
subprocess.run(['ls', '-l', d], stdout=subprocess.DEVNULL)  # the source's own caches warm for both
time.sleep(0.2)  # the directory's times are not those of this second's listing

mounts = {}
for name, binary in (('old', args.old), ('new', args.new)):
    mnt = osp.join(work, 'mnt-' + name)
    os.makedirs(mnt)
    mounts[name] = benchlib.Mount(benchlib.h5direct_cmd(binary, src, mnt), mnt, remove_mnt=True)


def ls(name):
    """What `ls -l` asks of the file system (a listing, then lstat of every name), without the
    cost of starting a process, which swings on this machine."""
    top = osp.join(mounts[name].mnt, 'dir')
    t0 = time.perf_counter()
    names = os.listdir(top)
    for n in names:
        os.lstat(osp.join(top, n))
    dt = time.perf_counter() - t0
    assert len(names) == args.entries, len(names)
    return dt


time.sleep(2.0)  # the helper processes have started (they compete for the CPU meanwhile)
try:
    print(f'ls -l of a directory of {args.entries} HDF5 files, {args.passes} passes per regime; '
          f'load {os.getloadavg()[0]:.1f}')
    first = {n: ls(n) for n in ('old', 'new')}
    print('first pass (nothing cached): ' + ', '.join(f'{n} {first[n] * 1e3:.1f} ms' for n in first))
    for regime, gap in (('back to back', 0.0), ('one pass per 1.5 s', 1.5)):
        times = {'old': [], 'new': []}
        cpu0 = {n: mounts[n].cpu_seconds() for n in mounts}
        for i in range(args.passes):
            for n in (('old', 'new') if i % 2 == 0 else ('new', 'old')):
                times[n].append(ls(n))
            if gap:
                time.sleep(gap)
        cpu = {n: mounts[n].cpu_seconds() - cpu0[n] for n in mounts}
        parts = []
        for n in ('old', 'new'):
            t = times[n]
            parts.append(f'{n}: median {statistics.median(t) * 1e3:.1f} ms, mean '
                         f'{statistics.mean(t) * 1e3:.1f} ms, max {max(t) * 1e3:.1f} ms, daemon CPU '
                         f'{cpu[n] * 1e3:.0f} ms')
        print(f'{regime}: ' + '; '.join(parts))
finally:
    for m in mounts.values():
        m.close()
    subprocess.run(['rm', '-rf', work])
