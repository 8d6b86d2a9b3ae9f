#!/usr/bin/python3
"""Benchmark (not a test): the first byte of many run-view keys, builds side by side.

For each round and each build (interleaved, so that machine noise hits all builds alike): mount
the run in the foreground, walk it once (`ls -lR`-like, as a user's first look does), then time
`open`, `seek(128)`, `read(1)`, `close` of each key: the image.cellId, image.pulseId,
image.length and image.status of every detector module and the XGM's keys (one small dataset per
sequence file, so the read ahead of the first byte touches every file of the key). Prints per
build the median and quartiles over all keys and rounds, and the HDF5 helper requests the first
bytes needed (stats.json).

Usage: first_byte.py --run DIR [--rounds 5] BUILD_DIR_OR_BINARY...
  DIR: a run directory (bench_run_mount.py --workdir W generates W/raw/r0338).
  Each build: a directory holding mount.h5direct (and h5direct-helper), or the binary itself.
"""
import argparse
import json
import os
import os.path as osp
import statistics
import sys
import time

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import benchlib  # noqa: E402


def binary_of(b):
    for cand in (b, osp.join(b, 'mount.h5direct'), osp.join(b, 'daemon', 'mount.h5direct')):
        if osp.isfile(cand):
            return cand
    sys.exit(f'no mount.h5direct in {b}')


def keys_of(mnt):
    out = []
    det = osp.join(mnt, 'SPB_DET_AGIPD1M-1', 'DET')
    if osp.isdir(det):
        for mod in sorted(os.listdir(det)):
            for k in ('image.cellId', 'image.pulseId', 'image.length', 'image.status'):
                p = osp.join(det, mod, k + '.npy')
                if osp.exists(p):
                    out.append(p)
    xgm = osp.join(mnt, 'SA1_XTD2_XGM', 'DOOCS', 'MAIN')
    if osp.isdir(xgm):
        out += sorted(osp.join(xgm, n) for n in os.listdir(xgm) if n.endswith('.npy'))
    return out


def helper_requests(mnt):
    with open(osp.join(mnt, '.h5direct', 'stats.json')) as f:
        return (json.load(f).get('hdf5_helper') or {}).get('requests', 0)


def one_pass(binary, run, opts):
    m = benchlib.mount_h5direct(binary, run, opts=opts, workdir=None)
    try:
        for dirpath, dirnames, filenames in os.walk(m.mnt):
            for name in dirnames + filenames:
                os.lstat(osp.join(dirpath, name))
        keys = keys_of(m.mnt)
        r0 = helper_requests(m.mnt)
        times = []
        for p in keys:
            t = time.monotonic()
            with open(p, 'rb') as f:
                f.seek(128)
                f.read(1)
            times.append((time.monotonic() - t) * 1e3)
        return times, helper_requests(m.mnt) - r0
    finally:
        m.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--run', required=True)
    ap.add_argument('--rounds', type=int, default=5)
    ap.add_argument('--opts', help='mount options (-o) for every build')
    ap.add_argument('builds', nargs='+')
    a = ap.parse_args()
    bins = [binary_of(b) for b in a.builds]
    times = {b: [] for b in bins}
    reqs = {b: [] for b in bins}
    for r in range(a.rounds):
        for b in bins:
            t, n = one_pass(b, a.run, a.opts)
            times[b] += t
            reqs[b].append(n)
            print(f'round {r + 1} {b}: {len(t)} keys, median {statistics.median(t):.2f} ms, '
                  f'helper requests {n}', flush=True)
    print(f'\n{a.rounds} interleaved rounds; first byte per key (ms):')
    print('| build | keys x rounds | median | 25% | 75% | helper requests per pass |')
    print('|---|---|---|---|---|---|')
    for b in bins:
        q = statistics.quantiles(times[b], n=4)
        print(f'| {b} | {len(times[b])} | {statistics.median(times[b]):.2f} | {q[0]:.2f} | {q[2]:.2f} | '
              f'{statistics.median(reqs[b]):.0f} |')


if __name__ == '__main__':
    main()
