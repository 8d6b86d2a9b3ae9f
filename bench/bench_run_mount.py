#!/usr/bin/python3
"""Benchmark (not a test): mount a 16-module EuXFEL run with N sequence files per module plus
slow data, then time (1) mount until the mountpoint appears, (2) listing the run and every source
directory with stat of every entry (`ls -lR`-like), (3) the first byte of a few keys.
Goal: (1)+(2) < 1 s, (3) < 100 ms each.

Usage: H5DIRECT_BIN=build/daemon/mount.h5direct bench_run_mount.py [--seq-files 20] [--keep DIR]
"""
import argparse
import json
import os
import os.path as osp
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, osp.join(osp.dirname(osp.abspath(__file__)), '..', 'tests', 'python'))
import euxfel_mock  # noqa: E402
import benchlib  # noqa: E402


def walk_stat(root):
    n = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lstat(osp.join(dirpath, name))
            n += 1
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--seq-files', type=int, default=20)
    ap.add_argument('--modules', type=int, default=16)
    ap.add_argument('--workdir')
    ap.add_argument('--opts', help='mount options (-o) for h5direct')
    a = ap.parse_args()
    binary = os.environ.get('H5DIRECT_BIN')
    if not binary:
        sys.exit('set H5DIRECT_BIN to the built mount.h5direct')
    work = a.workdir or tempfile.mkdtemp(prefix='bench-run-')
    run_dir = osp.join(work, 'raw', 'r0338')
    if not osp.isdir(run_dir):
        t0 = time.monotonic()
        euxfel_mock.build(work, scenario='bench', modules=a.modules, image_dims=(2, 512, 128),
                          seq_files=a.seq_files, trains_per_file=2)
        print(f'generated {len(os.listdir(run_dir))} files in {time.monotonic() - t0:.1f} s')
    subprocess.run(['sync'])
    m = benchlib.mount_h5direct(binary, run_dir, opts=a.opts, workdir=work)
    mnt = m.mnt
    t_mount = m.t_mounted
    try:
        c0 = m.cpu_seconds()
        t1 = time.monotonic()
        n = walk_stat(mnt)
        t_list = time.monotonic() - t1
        c1 = m.cpu_seconds()
        print(f'mount {t_mount * 1e3:.0f} ms, list+stat {n} entries {t_list * 1e3:.0f} ms, '
              f'total {(t_mount + t_list) * 1e3:.0f} ms (goal < 1000); '
              f'mount.h5direct CPU during the walk {(c1 - c0) * 1e3:.0f} ms, '
              f'load average {os.getloadavg()[0]:.1f}')
        with open(osp.join(mnt, '.h5direct', 'stats.json')) as f:
            helper = json.load(f).get('hdf5_helper')
        if helper:
            print(f'HDF5 helper requests so far: {helper["requests"]} ({helper["failures"]} failed)')
        for rel in ['SPB_DET_AGIPD1M-1/DET/7CH0:xtdf/image.data.npy',
                    'SPB_DET_AGIPD1M-1/DET/15CH0:xtdf/image.cellId.npy',
                    'SPB_DET_AGIPD1M-1/image.data.npy',
                    'SPB_DET_AGIPD1M-1/frames_first/image.data.npy',
                    'SA1_XTD2_XGM/DOOCS/MAIN/pulseEnergy.photonFlux.value.npy']:
            t2 = time.monotonic()
            with open(osp.join(mnt, rel), 'rb') as f:
                f.seek(128)
                f.read(1)
            print(f'first byte of {rel}: {(time.monotonic() - t2) * 1e3:.1f} ms (goal < 100)')
    finally:
        m.close()
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
