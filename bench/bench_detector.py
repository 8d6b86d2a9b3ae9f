#!/usr/bin/python3
"""Benchmark (not a test): read a whole stacked detector key through the mount (the detector
view, RUN/<detector>/image.data.npy, and its frames-first variant) versus h5py module by module
(what EXtra-data's AGIPD1M(run)['image.data'].ndarray() does: for every module, for every
sequence file, read the rows into the module's slot of one output array).

A 16-module AGIPD-1M raw run (frames (2, 512, 128) uint16, one frame per chunk, uncompressed)
is written by tests/python/detector_mock.py (scenario 'bench') unless --workdir already holds
it. Files are read from the page cache in both cases (each variant is run once untimed first).

Usage: H5DIRECT_BIN=build/daemon/mount.h5direct bench_detector.py [--workdir DIR]
          [--trains 16] [--frames 8] [--files 2] [--repeat 3]
"""
import argparse
import glob
import os
import os.path as osp
import shutil
import sys
import tempfile
import time

import h5py
import numpy as np

sys.path.insert(0, osp.join(osp.dirname(osp.abspath(__file__)), '..', 'tests', 'python'))
import detector_mock  # noqa: E402
import benchlib  # noqa: E402


def read_h5py(run_dir):
    """Module by module with h5py, aligned by train as EXtra-data's ndarray() (all modules have
    every train here, so one read_direct per file and module)."""
    files = sorted(glob.glob(osp.join(run_dir, 'RAW-R0338-AGIPD*-S*.h5')))
    by_mod = {}
    for p in files:
        by_mod.setdefault(int(osp.basename(p).split('-')[2][5:]), []).append(p)
    out = {}
    for i, m in enumerate(sorted(by_mod)):
        for p in by_mod[m]:
            with h5py.File(p, 'r') as f:
                src = f'SPB_DET_AGIPD1M-1/DET/{m}CH0:xtdf'
                ntr = int(np.count_nonzero(f['INDEX/trainId'][:]))
                count = f[f'INDEX/{src}/image/count'][:ntr]
                first = f[f'INDEX/{src}/image/first'][:ntr]
                ds = f[f'INSTRUMENT/{src}/image/data']
                n = int(count.sum())
                a = np.empty((n,) + ds.shape[1:], ds.dtype)
                ds.read_direct(a, np.s_[int(first[0]):int(first[0]) + n])
                out.setdefault(i, []).append(a)
    return np.stack([np.concatenate(out[i]) for i in sorted(out)])


def read_mount(path):
    with open(path, 'rb') as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--workdir')
    ap.add_argument('--trains', type=int, default=16)
    ap.add_argument('--frames', type=int, default=8)
    ap.add_argument('--files', type=int, default=2)
    ap.add_argument('--repeat', type=int, default=3)
    a = ap.parse_args()
    binary = os.environ.get('H5DIRECT_BIN')
    if not binary:
        sys.exit('set H5DIRECT_BIN to the built mount.h5direct')
    work = a.workdir or tempfile.mkdtemp(prefix='bench-det-')
    run_dir = osp.join(work, 'raw', 'r0338')
    if not osp.isdir(run_dir):
        t0 = time.monotonic()
        detector_mock.build(work, 'bench', bench_trains=a.trains, bench_frames=a.frames,
                            bench_files=a.files)
        print(f'generated {len(os.listdir(run_dir))} files in {time.monotonic() - t0:.1f} s')
    m = benchlib.mount_h5direct(binary, run_dir, workdir=work)
    try:
        det = osp.join(m.mnt, 'SPB_DET_AGIPD1M-1')
        ref = read_h5py(run_dir)  # warms the page cache
        nbytes = ref.nbytes
        print(f'stacked image.data: {ref.shape} {ref.dtype}, {nbytes / 2**20:.0f} MiB, '
              f'load average {os.getloadavg()[0]:.1f}')
        results = {}
        for name, fn in [
                ('h5py module by module', lambda: read_h5py(run_dir)),
                ('mount image.data.raw (modules first)',
                 lambda: read_mount(osp.join(det, 'image.data.raw'))),
                ('mount frames_first/image.data.raw',
                 lambda: read_mount(osp.join(det, 'frames_first', 'image.data.raw')))]:
            fn()  # once untimed (opens, caches)
            best = None
            for _ in range(a.repeat):
                t1 = time.monotonic()
                got = fn()
                dt = time.monotonic() - t1
                best = dt if best is None else min(best, dt)
            results[name] = best
            print(f'{name}: {best * 1e3:.0f} ms, {nbytes / best / 2**30:.2f} GiB/s (best of {a.repeat})')
        got = read_mount(osp.join(det, 'image.data.raw'))
        assert got == ref.tobytes(), 'mount bytes differ from h5py'
        print('mount bytes equal h5py bytes')
    finally:
        m.close()
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
