#!/usr/bin/python3
"""Benchmark (not a test): AGIPD dark characterisation, the status quo against the h5direct + Dask
example, on the same generated dark runs, side by side in one run.

- reference: docs/examples/dark_reference.py, serial h5py reads of the sequence files (one process)
- example:   docs/examples/dark_characterisation.py on a LocalCluster (--workers processes x 1
             thread), reading np.load(mmap_mode='r') through a fresh mount.h5direct mount

Each is run as its own process (wall time of the whole process: interpreter start, imports, for
the example the cluster start, reading, computing, writing the HDF5 output), twice:
- cold: this benchmark's run files evicted from the page cache first (posix_fadvise DONTNEED on
  each file, nothing else on the machine is touched), a fresh mount (empty chunk cache);
- warm: the run files in the page cache (if they fit), still a fresh mount.
Both outputs must be bit-identical (checked), and the example's output can be drawn
(--plot PNG, module 0, memory cell 0).

Usage: H5DIRECT_BIN=build/daemon/mount.h5direct bench_dark.py [--workdir DIR] [--modules 4]
       [--cells 32] [--trains 100] [--pixels 512x128] [--workers 2] [--plot PNG]
(--workdir keeps the generated runs between invocations; default: a temporary directory, removed)
"""
import argparse
import hashlib
import json
import os
import os.path as osp
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = osp.dirname(osp.abspath(__file__))
sys.path.insert(0, osp.join(HERE, '..', 'tests', 'python'))
EXAMPLES = osp.join(HERE, '..', 'docs', 'examples')
import dark_mock  # noqa: E402
import benchlib  # noqa: E402

PY = '/usr/bin/python3' if osp.exists('/usr/bin/python3') else sys.executable


def evict(paths):
    """Drops these files' pages from the page cache (only theirs)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def run_files(manifest):
    return [osp.join(r, f) for r in manifest['runs'].values() for f in sorted(os.listdir(r))
            if f.endswith('.h5')]


def timed(cmd, timeout=3600):
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f'{cmd[1]} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}')
    inner = re.search(r'in ([0-9.]+) s wall', r.stdout)
    gb = re.search(r'read ([0-9.]+) GB', r.stdout)
    up = re.search(r'cluster up in ([0-9.]+) s', r.stdout)
    return (wall, float(inner.group(1)) - (float(up.group(1)) if up else 0) if inner else None,
            float(gb.group(1)) if gb else None)


def digest(path):
    """Hash of every dataset's bytes (the outputs differ only in the 'creator' attribute)."""
    import h5py
    h = hashlib.sha256()
    with h5py.File(path, 'r') as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for n in sorted(names):
            h.update(n.encode())
            h.update(f[n][()].tobytes())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--workdir')
    ap.add_argument('--modules', type=int, default=4)
    ap.add_argument('--cells', type=int, default=32)
    ap.add_argument('--trains', type=int, default=100)
    ap.add_argument('--pixels', default='512x128')
    ap.add_argument('--trains-per-file', type=int, default=34)
    ap.add_argument('--workers', type=int, default=2)
    ap.add_argument('--cells-per-task', type=int, default=4)
    ap.add_argument('--mount-opts', help='-o options for mount.h5direct')
    ap.add_argument('--modes', default='cold,warm')
    ap.add_argument('--plot', help='PNG of module 0 (offset and noise maps)')
    a = ap.parse_args()
    binary = os.environ.get('H5DIRECT_BIN')
    if not binary or not osp.exists(binary):
        sys.exit('set H5DIRECT_BIN to the built mount.h5direct')
    py, px = (int(v) for v in a.pixels.lower().split('x'))
    work = a.workdir or tempfile.mkdtemp(prefix='bench-dark-')
    os.makedirs(work, exist_ok=True)
    params = dict(modules=a.modules, cells=a.cells, trains=a.trains, pixels=[py, px],
                  trains_per_file=a.trains_per_file)
    man_path = osp.join(work, 'dark_runs.json')
    man = None
    if osp.exists(man_path):
        man = json.load(open(man_path))
        if any(man.get(k) != (list(range(v)) if k == 'modules' else v)
               for k, v in params.items()):
            man = None
    if man is None:
        shutil.rmtree(osp.join(work, 'raw'), ignore_errors=True)
        t0 = time.monotonic()
        man = dark_mock.build(work, a.modules, a.cells, a.trains, (py, px), a.trains_per_file)
        print(f'generated in {time.monotonic() - t0:.0f} s', file=sys.stderr)
    files = run_files(man)
    size = sum(os.stat(p).st_size for p in files)
    originals = [man['runs'][g] for g in ('high', 'medium', 'low')]
    out_ref = osp.join(work, 'dark_reference.h5')
    out_ex = osp.join(work, 'dark_example.h5')
    rows = []
    try:
        for mode in a.modes.split(','):
            if mode == 'cold':
                evict(files)
            ref = timed([PY, osp.join(EXAMPLES, 'dark_reference.py'), *originals, '-o', out_ref])
            if mode == 'cold':
                evict(files)
            m = benchlib.mount_h5direct(binary, osp.join(work, 'raw'), a.mount_opts,
                                         stderr=subprocess.PIPE)
            try:
                mounted = [osp.join(m.mnt, man['run_names'][g]) for g in ('high', 'medium', 'low')]
                ex = timed([PY, osp.join(EXAMPLES, 'dark_characterisation.py'), *mounted,
                            '-o', out_ex, '--workers', str(a.workers),
                            '--cells-per-task', str(a.cells_per_task)])
            finally:
                m.close()
            same = digest(out_ref) == digest(out_ex)
            if not same:
                sys.exit('the outputs differ')
            rows.append((mode, ref, ex))
            print(f'{mode}: reference {ref[0]:.1f} s, example {ex[0]:.1f} s', file=sys.stderr)
    finally:
        if a.plot and osp.exists(out_ex):
            sys.path.insert(0, EXAMPLES)
            import plot_dark_constants
            plot_dark_constants.plot(out_ex, a.plot, module=0, cell=0)
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)
    gb = rows[0][1][2]
    print(f'\n{a.modules} modules x {a.cells} cells x {a.trains} trains x 3 gains, {py}x{px} '
          f'pixels: {len(files)} files, {size / 1e9:.1f} GB on disk, {gb:.1f} GB of data planes '
          f'read; {os.cpu_count()} cores; example: LocalCluster {a.workers} workers x 1 thread, '
          f'{a.cells_per_task} cells per task\n')
    print('| page cache | reference (h5py, serial) | example (h5direct + Dask) | speed-up | '
          'outputs |')
    print('|---|---|---|---|---|')
    for mode, ref, ex in rows:
        print(f'| {mode} | {ref[0]:.1f} s ({gb / ref[0]:.2f} GB/s) | {ex[0]:.1f} s '
              f'({gb / ex[0]:.2f} GB/s; {ex[1]:.1f} s without cluster start) | {ref[0] / ex[0]:.2f}x | '
              f'bit-identical |')


if __name__ == '__main__':
    main()
