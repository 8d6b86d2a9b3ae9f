#!/usr/bin/python3
"""AGIPD dark characterisation on Dask, reading raw runs through an h5direct mount.

Input: three dark runs (high, medium, low gain) of raw AGIPD data, each a run directory as
h5direct shows it (`RUN/<source>/<key>.npy`: one array over the whole run, sequence files
concatenated as EXtra-data does). Only two keys of each module are read, with
`np.load(path, mmap_mode='r')`:
    RUN/SPB_DET_AGIPD1M-1/DET/{m}CH0:xtdf/image.data.npy    (frames, 2, 512, 128) uint16
    RUN/SPB_DET_AGIPD1M-1/DET/{m}CH0:xtdf/image.cellId.npy  (frames, 1) uint16
No HDF5 library call is made by the workers: the mount does the reading (parallel pread, no
global lock), the page cache holds what is read, and each task touches only the frames of its
memory cells, data plane only.

Work is split by gain (run), module and a range of memory cells; each task computes offset,
noise and bad-pixel mask per cell and pixel (dark_common.py, identical to dark_reference.py).
The client gathers results and writes one HDF5 file (layout: docs/examples/README.md).

One machine (a LocalCluster, by default 2 worker processes x 1 thread):
    h5direct /gpfs/exfel/exp/SPB/202130/p900188/raw /mnt/raw
    dark_characterisation.py /mnt/raw/r0010 /mnt/raw/r0011 /mnt/raw/r0012 -o dark.h5
    fusermount3 -u /mnt/raw

A cluster (Slurm: every node mounts the same runs at the same path; see README.md for a job
script): attach to a running scheduler with
    dark_characterisation.py ... --scheduler tcp://node001:8786      (or --scheduler-file F)
or, with dask-jobqueue (not packaged in Debian 12; pip install dask-jobqueue elsewhere):
    from dask_jobqueue import SLURMCluster
    cluster = SLURMCluster(queue='exfel', cores=32, processes=16, memory='500GB',
                           walltime='01:00:00', job_extra_directives=['--exclusive'],
                           job_script_prologue=[
                               'mkdir -p /tmp/raw',
                               'h5direct /gpfs/.../raw /tmp/raw -o auto_unmount',
                               "trap 'fusermount3 -u -z /tmp/raw' EXIT"])
    cluster.scale(jobs=4)
    # then: dark_characterisation.py /tmp/raw/r0010 /tmp/raw/r0011 /tmp/raw/r0012 -o dark.h5 \
    #           --scheduler <cluster.scheduler_address>
(job_script_prologue is called env_extra in dask-jobqueue < 0.8. The mount point must be the
same path on every node: the client sends run paths.)
"""
import argparse
import os
import os.path as osp
import re
import sys
import time

import numpy as np

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import dark_common  # noqa: E402
from dark_common import GAINS, DETECTOR, source_name  # noqa: E402


def module_dir(run, module):
    return osp.join(run, *source_name(module).split('/'))


def find_modules(run):
    """Module numbers of the AGIPD sources present in a mounted run."""
    d = osp.join(run, *DETECTOR.split('/'), 'DET')
    mods = []
    for name in os.listdir(d):
        m = re.fullmatch(r'(\d+)CH0:xtdf', name)
        if m:
            mods.append(int(m.group(1)))
    return sorted(mods)


def characterise_task(run, module, gain, cells, thresholds, advise=True):
    """One unit of work: one run (gain), one module, a range of memory cells."""
    t0 = time.monotonic()
    d = module_dir(run, module)
    path = osp.join(d, 'image.data.npy')
    data = np.load(path, mmap_mode='r')          # (frames, 2, py, px): nothing read yet
    cid = np.array(np.load(osp.join(d, 'image.cellId.npy'), mmap_mode='r')[:, 0])
    rows = {c: np.flatnonzero(cid == c) for c in cells}
    plane = data[0, 0].nbytes if len(data) else 0
    if advise and plane:
        # Ask for exactly the data planes this task needs, in file order, before touching
        # them: the kernel sends the reads to the mount at once, which serves them in parallel.
        fd = os.open(path, os.O_RDONLY)
        try:
            for r in np.sort(np.concatenate(list(rows.values()))):
                os.posix_fadvise(fd, data.offset + int(r) * data[0].nbytes, plane,
                                 os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)
    # Each cell's frames are views into the memory map (data plane only), copied once, a few
    # frames at a time, into the kernel's int64 accumulator.
    res = dark_common.characterise_cells(lambda c: [data[r, 0] for r in rows[c]], cells, gain,
                                         thresholds, shape=data.shape[2:])
    res['seconds'] = time.monotonic() - t0
    res['bytes'] = int(sum(len(r) for r in rows.values()) * plane)
    return res


def make_client(a):
    from distributed import Client, LocalCluster
    if a.scheduler_file:
        return Client(scheduler_file=a.scheduler_file), None
    if a.scheduler:
        return Client(a.scheduler), None
    import dask
    # Dask starts worker processes with MALLOC_TRIM_THRESHOLD_=65536, which also pins glibc's
    # mmap threshold at 128 KiB: every temporary of the kernel (512 KiB per frame-sized array)
    # is then a fresh mmap, page-faulted and unmapped again (measured: 20x the page faults and
    # twice the system time). The kernel's memory use is small and steady: leave malloc alone.
    env = {k: v for k, v in dask.config.get('distributed.nanny.pre-spawn-environ', {}).items()
           if k != 'MALLOC_TRIM_THRESHOLD_'}
    with dask.config.set({'distributed.nanny.pre-spawn-environ': env}):
        cluster = LocalCluster(n_workers=a.workers, threads_per_worker=a.threads_per_worker,
                               processes=not a.no_processes,
                               dashboard_address=a.dashboard, memory_limit=a.memory_limit)
    return Client(cluster), cluster


def run(a):
    import json
    from distributed import as_completed
    runs = dict(zip(GAINS, (a.high, a.medium, a.low)))
    thresholds = dark_common.DEFAULT_THRESHOLDS
    if a.thresholds:
        with open(a.thresholds) as f:
            thresholds = {**thresholds, **json.load(f)}
    modules = a.modules or find_modules(runs['high'])
    if not modules:
        sys.exit(f'no {DETECTOR} module sources in {runs["high"]}')
    d0 = module_dir(runs['high'], modules[0])
    shape = np.load(osp.join(d0, 'image.data.npy'), mmap_mode='r').shape
    pixels = shape[2:]
    if a.cells:
        ncells = a.cells
    else:
        ncells = int(np.load(osp.join(d0, 'image.cellId.npy')).max()) + 1
    t0 = time.monotonic()
    client, cluster = make_client(a)
    t_up = time.monotonic() - t0
    try:
        # Workers import the shared science module (needed on a remote cluster; harmless here).
        client.upload_file(osp.join(osp.dirname(osp.abspath(__file__)), 'dark_common.py'))
        out = dark_common.ConstantsFile(a.output, modules, ncells, pixels,
                                        {g: osp.abspath(r) for g, r in runs.items()},
                                        thresholds, 'h5direct docs/examples/dark_characterisation.py')
        futures = {}
        step = a.cells_per_task
        for c0 in range(0, ncells, step):          # cell ranges outermost: all modules busy
            cells = list(range(c0, min(c0 + step, ncells)))
            for gain in GAINS:
                for m in modules:
                    fut = client.submit(characterise_task, runs[gain], m, gain, cells,
                                        thresholds, pure=False)
                    futures[fut] = (gain, m, cells)
        nbytes = 0
        task_s = 0.
        for fut, res in as_completed(list(futures), with_results=True):
            gain, m, cells = futures.pop(fut)
            out.put(gain, m, cells, res)
            nbytes += res['bytes']
            task_s += res['seconds']
        out.finish()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    wall = time.monotonic() - t0
    print(f'{len(modules)} modules x {ncells} cells x 3 gains, {pixels[0]}x{pixels[1]} pixels: '
          f'read {nbytes / 1e9:.2f} GB (data planes) in {wall:.1f} s wall '
          f'({nbytes / 1e9 / wall:.2f} GB/s; cluster up in {t_up:.1f} s; {task_s:.1f} s in '
          f'tasks) -> {a.output}')
    if a.summary:
        print(dark_common.summary_table(a.output))
    return wall


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split('\n\n', 1)[1])
    ap.add_argument('high', help='mounted high-gain dark run (e.g. /mnt/raw/r0010)')
    ap.add_argument('medium', help='mounted medium-gain dark run')
    ap.add_argument('low', help='mounted low-gain dark run')
    ap.add_argument('-o', '--output', required=True, help='output HDF5 file')
    ap.add_argument('--modules', type=int, nargs='+', help='module numbers (default: all found)')
    ap.add_argument('--cells', type=int, help='memory cells (default: max cellId + 1)')
    ap.add_argument('--cells-per-task', type=int, default=8)
    ap.add_argument('--thresholds', help='JSON file overriding dark_common.DEFAULT_THRESHOLDS')
    g = ap.add_argument_group('cluster')
    g.add_argument('--scheduler', metavar='ADDRESS',
                   help='attach to a running Dask scheduler (tcp://host:8786) instead of '
                        'starting a LocalCluster; every worker must see the runs at the same paths')
    g.add_argument('--scheduler-file', help='attach via a scheduler file (dask-scheduler '
                                            '--scheduler-file, e.g. on a shared file system)')
    g.add_argument('--workers', type=int, default=2, help='LocalCluster workers (default 2)')
    g.add_argument('--threads-per-worker', type=int, default=1)
    g.add_argument('--no-processes', action='store_true',
                   help='LocalCluster workers as threads of this process')
    g.add_argument('--memory-limit', default='auto', help="LocalCluster per-worker memory limit")
    g.add_argument('--dashboard', default=None,
                   help='LocalCluster dashboard address, e.g. :8787 (default: none)')
    ap.add_argument('--summary', action='store_true', help='print the statistics table')
    a = ap.parse_args(argv)
    run(a)


if __name__ == '__main__':
    main()
