#!/usr/bin/env python3
"""What the helpers' sandbox costs: two mount.h5direct binaries (and the new one with
-o sandbox=off) side by side on the work that runs libhdf5 the most.

    bench_sandbox.py OLD NEW [--rounds N] [--work DIR] [--mutants N]

Cases, each on a fresh mount, passes alternating between the binaries:
  run      `ls -lR` of a 340-file EuXFEL mock run (16 modules x 20 sequence files + 20 slow-data
           files; bench_listing.py's run): every file's metadata, every sidecar rendered
  corpus   every HDF5 file of ../shared/corpus (symlinked into one directory), walked: every
           directory listed, every file stat'd and read whole
  mutants  --mutants damaged copies of test_mutation.py's two base files (its mutate(): random
           bytes, zeroed ranges, cut ends; fixed seed), walked the same way
Prints, per case and binary, the medians of the wall time, the helpers' CPU time (utime + stime
of the daemon's children, read before unmount) and the daemon's, and the ratios NEW/OLD.
"""
import argparse
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
p.add_argument('--work', default='/tmp/h5d-bench-sandbox')
p.add_argument('--mutants', type=int, default=150)
p.add_argument('--cases', default='run,corpus,mutants')
args = p.parse_args()
TICK = os.sysconf('SC_CLK_TCK')

os.makedirs(args.work, exist_ok=True)
run = osp.join(args.work, 'data', 'raw', 'r0338')
if not osp.isdir(run):
    import euxfel_mock
    euxfel_mock.build(osp.join(args.work, 'data'), scenario='bench', modules=16, seq_files=20,
                      image_dims=(2, 16, 8))
corpus = osp.join(args.work, 'corpus')
if not osp.isdir(corpus):
    import test_corpus
    os.makedirs(corpus)
    for i, f in enumerate(test_corpus.corpus_files()):
        os.symlink(f, osp.join(corpus, f'{i:04d}_{osp.basename(f)}'))
mutants = osp.join(args.work, 'mutants')
if not osp.isdir(mutants):
    import numpy as np
    import test_mutation
    os.makedirs(mutants)
    bases = test_mutation.write_bases(tempfile.mkdtemp(dir=args.work))
    rng = np.random.default_rng(test_mutation.SEED)
    for i in range(args.mutants):
        base = bases[i % len(bases)]
        with open(base, 'rb') as f:
            data, _ = test_mutation.mutate(f.read(), rng)
        with open(osp.join(mutants, f'm{i:04d}.h5'), 'wb') as f:
            f.write(data)


def ticks(pid):
    with open(f'/proc/{pid}/stat') as f:
        x = f.read().rsplit(')', 1)[1].split()
    return int(x[11]) + int(x[12]), int(x[13]) + int(x[14]), int(x[1])  # own, reaped children, ppid


def helper_seconds(daemon):
    own, reaped, _ = ticks(daemon)
    live = 0
    for e in os.listdir('/proc'):
        if e.isdigit():
            try:
                t, _, ppid = ticks(e)
            except OSError:
                continue
            if ppid == daemon:
                live += t
    return own / TICK, (live + reaped) / TICK


def walk(root):
    for dirpath, dirnames, filenames in os.walk(root):
        for n in filenames:
            path = osp.join(dirpath, n)
            try:
                os.stat(path)
                with open(path, 'rb') as f:
                    while f.read(1 << 20):
                        pass
            except OSError:
                pass  # damaged: EIO, as it should


CASES = {'run': (run, lambda mnt: subprocess.run(['ls', '-lR', mnt], stdout=subprocess.DEVNULL, check=True)),
         'corpus': (corpus, walk),
         'mutants': (mutants, walk)}
BINARIES = [('old', args.old, None), ('new', args.new, None), ('new, sandbox=off', args.new, 'sandbox=off')]


def one(binary, opts, src, work):
    mnt = tempfile.mkdtemp(prefix='mnt-', dir=args.work)
    cmd = [binary, src, mnt, '-f'] + (['-o', opts] if opts else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not osp.ismount(mnt):
            time.sleep(0.01)
        t0 = time.perf_counter()
        work(mnt)
        wall = time.perf_counter() - t0
        daemon, helpers = helper_seconds(proc.pid)
        return wall, helpers, daemon
    finally:
        subprocess.run(['fusermount3', '-u', '-z', mnt])
        proc.wait(20)
        os.rmdir(mnt)


cases = args.cases.split(',')
res = {}
for r in range(args.rounds):
    order = BINARIES if r % 2 == 0 else list(reversed(BINARIES))
    for name, binary, opts in order:
        for case in cases:
            src, work = CASES[case]
            res.setdefault((case, name), []).append(one(binary, opts, src, work))
print(f'{"case":9} {"binary":18} {"wall s":>8} {"helpers CPU s":>14} {"daemon CPU s":>13} {"wall/old":>9} {"helpers/old":>12}')
for case in cases:
    old = [statistics.median(x) for x in zip(*res[(case, 'old')])]
    for name, _, _ in BINARIES:
        m = [statistics.median(x) for x in zip(*res[(case, name)])]
        print(f'{case:9} {name:18} {m[0]:8.3f} {m[1]:14.3f} {m[2]:13.3f} {m[0] / old[0]:9.3f} {m[1] / old[1]:12.3f}')
