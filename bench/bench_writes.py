#!/usr/bin/env python3
"""Parallel writes: N processes writing one HDF5 dataset through an h5direct rw mount, against
one h5py writer and against N h5py writers taking turns through a file lock (fcntl.flock, the
status quo), uncompressed (contiguous) and compressed (gzip, 1-row chunks).

usage: bench_writes.py --bin build/daemon/mount.h5direct [--gib 1] [--procs 4] [--tmp DIR]

Each writer owns a contiguous block of rows (1 MiB each: 1024 x 512 uint16) and writes it in
8-row (8 MiB) pieces; the data are detector-like (a smooth pattern plus noise, compresses ~2x).
Times: creating the dataset, plus from the first writer's first write to the last writer's
close (process start-up and imports not counted), plus, for the mount, the unmount (everything
flushed, H5Fclose, fdatasync). The writers' data land in the page cache (no fsync) in every
case; only the mount's unmount also syncs the file to disk.
"""
import argparse
import fcntl
import json
import os
import os.path as osp
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROW = (1024, 512)
DT = '<u2'
BLOCK = 8  # rows per write


def rows_data(seed):
    rng = np.random.default_rng(seed)
    base = (np.arange(ROW[0] * ROW[1]) % 977).astype(DT).reshape(ROW)
    noise = rng.integers(0, 16, size=(BLOCK,) + ROW, dtype=np.uint16)
    return base[None] + noise


def stamp(out, t0):
    """Writers report when they started writing and finished (wall clock), so that process
    start-up (interpreter, numpy, h5py imports) is not counted."""
    with open(out, 'w') as f:
        json.dump([t0, time.time()], f)


def writer_mount(raw, lo, hi, out):
    data = rows_data(lo).tobytes()
    t0 = time.time()
    row_bytes = ROW[0] * ROW[1] * 2
    fd = os.open(raw, os.O_WRONLY)
    for r in range(lo, hi, BLOCK):
        n = min(BLOCK, hi - r)
        os.pwrite(fd, data[:n * row_bytes], r * row_bytes)
    os.close(fd)
    stamp(out, t0)


def writer_memmap(npy, lo, hi, out):
    data = rows_data(lo)
    a = np.lib.format.open_memmap(npy, mode='r+')
    t0 = time.time()
    for r in range(lo, hi, BLOCK):
        n = min(BLOCK, hi - r)
        a[r:r + n] = data[:n]
    a.flush()
    del a  # munmap: the kernel writes the dirty pages back (FUSE writes) before this returns
    stamp(out, t0)


def writer_h5py(path, lo, hi, lock=None, out=None):
    import h5py
    data = rows_data(lo)
    t0 = time.time()
    if lock is None:
        with h5py.File(path, 'r+') as f:
            d = f['x']
            for r in range(lo, hi, BLOCK):
                n = min(BLOCK, hi - r)
                d[r:r + n] = data[:n]
        stamp(out, t0)
        return
    # the status quo: take the lock, open, write a block of rows, close, release
    turn = 64
    for t in range(lo, hi, turn):
        with open(lock, 'w') as lf:
            fcntl.flock(lf, fcntl.LOCK_EX)
            with h5py.File(path, 'r+') as f:
                d = f['x']
                for r in range(t, min(t + turn, hi), BLOCK):
                    n = min(BLOCK, min(t + turn, hi) - r)
                    d[r:r + n] = data[:n]
            fcntl.flock(lf, fcntl.LOCK_UN)
    stamp(out, t0)


def spawn(fn, args):
    code = (f'import sys; sys.path.insert(0, {osp.dirname(osp.abspath(__file__))!r}); '
            f'import bench_writes as b; b.{fn}(*{args!r})')
    return subprocess.Popen([sys.executable, '-c', code])


def wait_all(procs, outs):
    """Waits for the writers; returns (first start, last end) of their writing."""
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError('a writer failed')
    spans = []
    for o in outs:
        with open(o) as f:
            spans.append(json.load(f))
        os.unlink(o)
    return min(s[0] for s in spans), max(s[1] for s in spans)


def splits(rows, n):
    per = (rows + n - 1) // n
    per = (per + BLOCK - 1) // BLOCK * BLOCK
    return [(i * per, min(rows, (i + 1) * per)) for i in range(n) if i * per < rows]


def make_h5py(path, rows, compressed):
    import h5py
    with h5py.File(path, 'w') as f:
        if compressed:
            f.create_dataset('x', shape=(rows,) + ROW, dtype=DT, chunks=(1,) + ROW,
                             compression='gzip', shuffle=True)
        else:
            f.create_dataset('x', shape=(rows,) + ROW, dtype=DT)  # contiguous, late allocation


def run_mount(binary, tmp, rows, procs, compressed, how='writer_mount'):
    src = tempfile.mkdtemp(dir=tmp, prefix='src-')
    mnt = tempfile.mkdtemp(dir=tmp, prefix='mnt-')
    d = subprocess.Popen([binary, src, mnt, '-f', '-o', 'writable'], stdout=subprocess.DEVNULL,
                         stderr=subprocess.STDOUT)
    try:
        while not osp.ismount(mnt):
            if d.poll() is not None:
                raise RuntimeError('mount failed')
            time.sleep(0.02)
        os.mkdir(osp.join(mnt, 'out.h5'))
        spec = {'shape': [rows, *ROW], 'dtype': DT}
        if compressed:
            spec.update(chunks=[1, *ROW], compression='gzip')
        c0 = time.time()
        with open(osp.join(mnt, 'out.h5', 'x.json'), 'w') as f:
            json.dump(spec, f)
        create = time.time() - c0
        raw = osp.join(mnt, 'out.h5', 'x.raw' if how == 'writer_mount' else 'x.npy')
        outs = [osp.join(tmp, f'w{i}.json') for i in range(procs)]
        t0, t1 = wait_all([spawn(how, (raw, lo, hi, outs[i]))
                           for i, (lo, hi) in enumerate(splits(rows, procs))], outs)
        u0 = time.time()
        subprocess.run(['fusermount3', '-u', mnt], check=True)
        d.wait(120)
        t2 = time.time() - u0 + t1 + create
    finally:
        subprocess.run(['fusermount3', '-u', '-z', mnt], capture_output=True)
        if d.poll() is None:
            d.terminate()
            d.wait(30)
    verify(osp.join(src, 'out.h5'), rows, procs)
    shutil.rmtree(src)
    os.rmdir(mnt)
    return t2 - t0, t1 - t0


def run_h5py(tmp, rows, procs, compressed, locked):
    path = osp.join(tmp, 'h5py.h5')
    lock = osp.join(tmp, 'h5py.lock')
    c0 = time.time()
    make_h5py(path, rows, compressed)
    create = time.time() - c0
    outs = [osp.join(tmp, f'w{i}.json') for i in range(procs)]
    if locked:
        t0, t1 = wait_all([spawn('writer_h5py', (path, lo, hi, lock, outs[i]))
                           for i, (lo, hi) in enumerate(splits(rows, procs))], outs)
    else:
        for i, (lo, hi) in enumerate(splits(rows, procs)):  # the same rows and data, one process
            writer_h5py(path, lo, hi, None, outs[i])
        t0, t1 = wait_all([], outs)
    t = t1 - t0 + create
    verify(path, rows, procs)
    os.unlink(path)
    return t


def verify(path, rows, procs):
    import h5py
    with h5py.File(path, 'r') as f:
        d = f['x']
        for lo, hi in splits(rows, procs):
            exp = rows_data(lo)
            got = d[hi - 1]
            assert (got == exp[(hi - 1 - lo) % BLOCK]).all(), path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--bin', required=True)
    ap.add_argument('--gib', type=float, default=1.0)
    ap.add_argument('--procs', type=int, default=4)
    ap.add_argument('--tmp', default=None)
    ap.add_argument('--rounds', type=int, default=1)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(dir=a.tmp, prefix='bench-writes-')
    rows = int(a.gib * 1024)
    gb = rows * ROW[0] * ROW[1] * 2 / 1e9
    print(f'dataset: ({rows}, {ROW[0]}, {ROW[1]}) {DT} = {gb:.2f} GB; {a.procs} writer processes; '
          f'{os.cpu_count()} cores')
    print('| case | uncompressed s (GB/s) | gzip s (GB/s) |')
    print('|---|---|---|')
    res = {}
    for r in range(a.rounds):
        for comp in (False, True):
            total, writers = run_mount(a.bin, tmp, rows, a.procs, comp)
            res.setdefault(('mount', comp), []).append(total)
            res.setdefault(('mount-writers', comp), []).append(writers)
            total, writers = run_mount(a.bin, tmp, rows, a.procs, comp, 'writer_memmap')
            res.setdefault(('memmap', comp), []).append(total)
            res.setdefault(('h5py', comp), []).append(run_h5py(tmp, rows, a.procs, comp, False))
            res.setdefault(('flock', comp), []).append(run_h5py(tmp, rows, a.procs, comp, True))
    names = {
        'mount': f'h5direct mount, {a.procs} processes (os.pwrite on NAME.raw), incl. unmount',
        'mount-writers': f'  of which the {a.procs} writers',
        'memmap': f'h5direct mount, {a.procs} processes (np.memmap r+ on NAME.npy), incl. unmount',
        'h5py': 'one h5py writer',
        'flock': f'{a.procs} h5py writers taking turns (fcntl.flock, 64 MiB per turn)',
    }
    for key, label in names.items():
        cells = []
        for comp in (False, True):
            t = sorted(res[(key, comp)])[len(res[(key, comp)]) // 2]
            cells.append(f'{t:.2f} ({gb / t:.2f})')
        print(f'| {label} | {cells[0]} | {cells[1]} |')
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
    main()
