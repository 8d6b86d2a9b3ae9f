#!/usr/bin/env python3
"""Listing cost of two mount.h5direct binaries side by side (sidecar sizes rendered at stat):

    bench_listing.py OLD NEW [--rounds N] [--work DIR]

Builds (once, in --work) a 340-file EuXFEL mock run (euxfel_mock 'bench': 16 modules x 20
sequence files + 20 slow-data files) and a plain HDF5 file with one group of 2,000 small
datasets, each with two attributes. Each pass mounts a binary afresh and times, in this order,
`ls -R` of the run's tree, `ls -lR` of it, then `ls` and `ls -l` of the group (each on its own
fresh mount, so nothing is cached). Passes alternate between OLD and NEW; prints the medians
and the helper requests of the last pass (stats.json).
"""
import argparse
import json
import os
import os.path as osp
import statistics
import subprocess
import sys
import tempfile
import time

HERE = osp.dirname(osp.abspath(__file__))
sys.path.insert(0, osp.join(HERE, '..', 'tests', 'python'))

p = argparse.ArgumentParser()
p.add_argument('old')
p.add_argument('new')
p.add_argument('--rounds', type=int, default=5)
p.add_argument('--work', default='/tmp/h5d-bench-listing')
args = p.parse_args()

os.makedirs(args.work, exist_ok=True)
run = osp.join(args.work, 'data', 'raw', 'r0338')
plain = osp.join(args.work, 'plain.h5')
if not osp.isdir(run):
    import euxfel_mock
    euxfel_mock.build(osp.join(args.work, 'data'), scenario='bench', modules=16, seq_files=20,
                      image_dims=(2, 16, 8))
if not osp.exists(plain):
    import h5py
    import numpy as np
    with h5py.File(plain, 'w') as f:
        g = f.create_group('g')
        for i in range(2000):
            d = g.create_dataset(f'd{i:05d}', data=np.arange(i % 7 + 1, dtype='<f8'))
            d.attrs['index'] = i
            d.attrs['label'] = f'dataset {i}'


def timed(binary, src, cmd):
    mnt = tempfile.mkdtemp(prefix='mnt-', dir=args.work)
    proc = subprocess.Popen([binary, src, mnt, '-f'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not osp.ismount(mnt):
            time.sleep(0.01)
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=mnt, shell=True, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        dt = time.perf_counter() - t0
        with open(osp.join(mnt, '.h5direct', 'stats.json')) as f:
            req = json.load(f).get('hdf5_helper', {}).get('requests')
        return dt, req
    finally:
        subprocess.run(['fusermount3', '-u', '-z', mnt])
        proc.wait(10)
        os.rmdir(mnt)


CASES = [('run: ls -R', run, 'ls -R >/dev/null'),
         ('run: ls -lR', run, 'ls -lR >/dev/null'),
         ('2000 datasets: ls', plain, 'ls g >/dev/null'),
         ('2000 datasets: ls -l', plain, 'ls -l g >/dev/null')]
res = {(b, c[0]): [] for b in ('old', 'new') for c in CASES}
reqs = {}
for r in range(args.rounds):
    for b, binary in (('old', args.old), ('new', args.new)) if r % 2 == 0 else (('new', args.new), ('old', args.old)):
        for name, src, cmd in CASES:
            dt, req = timed(binary, src, cmd)
            res[(b, name)].append(dt)
            reqs[(b, name)] = req
print(f'{"case":24} {"old ms":>9} {"new ms":>9} {"new/old":>8} {"old req":>8} {"new req":>8}')
for name, _, _ in CASES:
    o = statistics.median(res[('old', name)]) * 1e3
    n = statistics.median(res[('new', name)]) * 1e3
    print(f'{name:24} {o:9.1f} {n:9.1f} {n / o:8.2f} {reqs[("old", name)]!s:>8} {reqs[("new", name)]!s:>8}')
