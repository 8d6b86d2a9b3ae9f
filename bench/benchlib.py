"""Shared by the benchmark scripts: a FUSE daemon started in the foreground and always unmounted.

Mount(cmd, mnt) runs `cmd` (which mounts at `mnt` and stays in the foreground), waits until
`mnt` is a mount point, and close() unmounts it lazily and reaps the daemon, even when the
benchmark fails. mount_h5direct() builds the command line of mount.h5direct.
"""
import atexit
import json
import os
import os.path as osp
import subprocess
import sys
import tempfile
import time


def h5direct_cmd(binary, src, mnt, opts=None):
    return [binary, src, mnt, '-f'] + (['-o', opts] if opts else [])


class Mount:
    def __init__(self, cmd, mnt, timeout=30, stderr=subprocess.DEVNULL, remove_mnt=False):
        self.mnt = mnt
        self.remove_mnt = remove_mnt
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr)
        while not osp.ismount(mnt):
            if self.proc.poll() is not None or time.monotonic() - self.t_start > timeout:
                why = 'timeout'
                if self.proc.poll() is not None:
                    why = f'exit status {self.proc.returncode}'
                    if self.proc.stderr:
                        why += ': ' + self.proc.stderr.read().decode(errors='replace')
                self.close()
                sys.exit(f'{cmd[0]} did not mount {mnt} ({why})')
            time.sleep(0.005)
        self.t_mounted = time.monotonic() - self.t_start

    def peak_rss_mb(self):
        with open(f'/proc/{self.proc.pid}/status') as f:
            for line in f:
                if line.startswith('VmHWM'):
                    return int(line.split()[1]) / 1024

    def cpu_seconds(self):
        """utime + stime of the daemon (all threads) and of its HDF5 helper processes (live
        ones, and reaped ones through the daemon's cutime + cstime), from /proc: robust to
        other load."""
        def fields(pid):
            with open(f'/proc/{pid}/stat') as f:
                return f.read().rsplit(')', 1)[1].split()
        d = fields(self.proc.pid)
        ticks = sum(int(x) for x in d[11:15])
        for entry in os.listdir('/proc'):
            if not entry.isdigit() or int(entry) == self.proc.pid:
                continue
            try:
                c = fields(entry)
            except OSError:
                continue
            if int(c[1]) == self.proc.pid:  # ppid
                ticks += int(c[11]) + int(c[12])
        return ticks / os.sysconf('SC_CLK_TCK')

    def close(self):
        subprocess.run(['fusermount3', '-u', '-z', self.mnt], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.remove_mnt:
            try:
                os.rmdir(self.mnt)
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_all(path, buf):
    """Reads the file into `buf` with read() calls of 1 MiB; returns the bytes read."""
    with open(path, 'rb', buffering=0) as f:
        mv = memoryview(buf)
        pos = 0
        while pos < len(mv):
            n = f.readinto(mv[pos:pos + (1 << 20)])
            if not n:
                break
            pos += n
    return pos


def mount_h5direct(binary, src, opts=None, mnt=None, workdir=None, stderr=subprocess.DEVNULL):
    """mount.h5direct SRC at `mnt`, or at a new directory under `workdir` (removed at close)."""
    fresh = mnt is None
    if fresh:
        mnt = tempfile.mkdtemp(prefix='mnt-', dir=workdir)
    return Mount(h5direct_cmd(binary, src, mnt, opts), mnt, stderr=stderr, remove_mnt=fresh)


# Free page reporting (virtio-balloon): a VM that hands the guest's freed memory back to its host
# at once makes every page the guest touches again fault in the host (~10 us per 4 KiB page
# measured here, docs/benchmarks.md, "Freed pages and `min_free_ms`"): 210 MB of fresh memory then
# costs 0.2-0.5 s, and a pass through FUSE (the page cache of the file plus the reader's array)
# touches twice what h5py's pass does. A real node keeps its freed pages. hold_freed_pages() keeps
# them for `ms` (the guest's min_free_ms) until the program ends; reporting_state() says what the
# run measured.
PAGE_REPORTING = '/sys/module/page_reporting/parameters'
MIN_FREE_MS = osp.join(PAGE_REPORTING, 'min_free_ms')


def reporting_state():
    try:
        with open(MIN_FREE_MS) as f:
            ms = int(f.read())
    except (OSError, ValueError):
        return 'no free page reporting'
    return f'freed pages reported to the host after {ms} ms (min_free_ms)'


def hold_freed_pages(ms=60000):
    """Sets min_free_ms (root) until exit; returns False when there is nothing to set."""
    try:
        with open(MIN_FREE_MS) as f:
            old = f.read().strip()
        with open(MIN_FREE_MS, 'w') as f:
            f.write(str(ms))
    except OSError:
        return False

    def restore():
        with open(MIN_FREE_MS, 'w') as f:
            f.write(old)
    atexit.register(restore)
    return True


# ---- shared by the read benchmarks (bench_matrix.py, bench_cold.py) ----------------------------
# Data: detector-like frames and EuXFEL mock runs; readers: h5py reads of row blocks of sequence
# files as EXtra-data does them; timing helpers.
import threading  # noqa: E402

import numpy as np  # noqa: E402

FRAME = (512, 128)
RUN_DET = 'SPB_DET_AGIPD1M-1/DET'
STACK_DET = 'SPB_IRDA_JF4M/DET'


def frames_data(n, seed, dtype='u2', sparse=False, spread=150, sigma=9):
    """n frames of FRAME: an integrating detector (pedestal 3000 +- `spread`, noise `sigma`:
    shuffle + deflate(1) takes uint16 with 150 / 9 to about 1.5x, with 20 / 3 to about 2.4x), or
    photon counting (sparse: mostly zero)."""
    rng = np.random.default_rng(seed)
    if sparse:
        out = np.zeros((n,) + FRAME, np.float32)
        hits = rng.random((n,) + FRAME) < 0.01
        out[hits] = rng.integers(1, 5, int(hits.sum()))
    else:
        ped = rng.normal(3000, spread, size=FRAME).astype(np.float32)
        out = ped + rng.normal(0, sigma, size=(n,) + FRAME).astype(np.float32)
    return np.clip(out, 0, 65535).astype(dtype)


def split(n, k):
    b = [n * i // k for i in range(k + 1)]
    return list(zip(b[:-1], b[1:]))


def write_detector_run(run_dir, kind, n, dtype, kw, make):
    """An EuXFEL mock run for a read benchmark. kind 'run': one AGIPD module (key image.data,
    entries FRAME) over 3 sequence files, n frames; 'stack': a JUNGFRAU of 4 modules (key
    data.adc, entries (1,) + FRAME: one memory cell), 2 sequence files each, n // 4 frames each.
    kw: h5py dataset arguments (chunks of a frame array, filters); make(rows, seed) -> frames.
    Returns (files, the path of the key's array in the mount without suffix)."""
    sys.path.insert(0, osp.join(osp.dirname(osp.abspath(__file__)), '..', 'tests', 'python'))
    import euxfel_mock
    modules = 1 if kind == 'run' else 4
    seqs = 3 if kind == 'run' else 2
    trains = n if kind == 'run' else n // modules
    w = euxfel_mock.RunWriter(run_dir, run_number=1, keep_data=False)
    first = 10000
    entry = FRAME if kind == 'run' else (1,) + FRAME
    chunks = kw['chunks'] if kind == 'run' else kw['chunks'][:1] + (1,) + kw['chunks'][1:]
    comp = {k: v for k, v in kw.items() if k != 'chunks'} or None
    for m in range(modules):
        def rows(tids, js, m=m):
            return make(len(tids), int(tids[0]) * 7 + m).reshape((len(tids),) + entry)
        if kind == 'run':
            keys = [euxfel_mock.Key('image.trainId', 'u8', (1,)),
                    euxfel_mock.Key('image.pulseId', 'u8', (1,)),
                    euxfel_mock.Key('image.cellId', 'u2', (1,)),
                    euxfel_mock.Key('image.data', dtype, entry, chunks=chunks, compression=comp, make=rows)]
            src = euxfel_mock.Source(f'{RUN_DET}/{m}CH0:xtdf', 'INSTRUMENT',
                                     [euxfel_mock.Group('image', keys, lambda t: 1, pad_to=4)])
            agg = f'AGIPD{m:02d}'
        else:
            keys = [euxfel_mock.Key('data.adc', dtype, entry, chunks=chunks, compression=comp, make=rows),
                    euxfel_mock.Key('data.frameNumber', 'u8', (1,)),
                    euxfel_mock.Key('data.memoryCell', 'u1', (1,)),
                    euxfel_mock.Key('data.timestamp', 'f8', (1,))]
            src = euxfel_mock.Source(f'{STACK_DET}/JNGFR{m + 1:02d}:daqOutput', 'INSTRUMENT',
                                     [euxfel_mock.Group('data', keys, lambda t: 1, pad_to=4)])
            agg = f'JNGFR{m + 1:02d}'
        for s, (a, b) in enumerate(split(trains, seqs)):
            w.write_file(agg, s, [src], list(range(first + a, first + b)))
    rel = f'{RUN_DET}/0CH0:xtdf/image.data' if kind == 'run' else 'SPB_IRDA_JF4M/frames_first/data.adc'
    return list(w.files), rel


def detector_blocks(h5files, kind):
    """EXtra-data's reading of the key of write_detector_run from open sequence files: per
    module (sorted by source name), its row blocks [(dataset, first row, rows)] by INDEX."""
    det, group, key = (RUN_DET, 'image', 'image/data') if kind == 'run' else (STACK_DET, 'data', 'data/adc')
    by_module = {}
    for f in h5files:
        src = list(f[f'INSTRUMENT/{det}'])[0]
        idx = f[f'INDEX/{det}/{src}/{group}']
        ntr = int((f['INDEX/trainId'][()] != 0).sum())
        first, count = idx['first'][:ntr], idx['count'][:ntr]
        ds = f[f'INSTRUMENT/{det}/{src}/{key}']
        by_module.setdefault(src, []).append((ds, int(first[0]), int(count.sum())))
    return [b for _, b in sorted(by_module.items())]


class RowBlocks:
    """h5py reads of an array made of row blocks of datasets (EXtra-data's way for a key over
    sequence files): blocks = [(dataset, first_row, rows)]."""

    def __init__(self, blocks):
        self.blocks = blocks
        self.shape = (sum(b[2] for b in blocks),) + blocks[0][0].shape[1:]
        self.starts = np.cumsum([0] + [b[2] for b in blocks])

    def rows(self, lo, hi, step=1, tail=()):
        parts = []
        for (ds, first, n), s0 in zip(self.blocks, self.starts[:-1]):
            a, b = max(lo, s0), min(hi, s0 + n)
            if a >= b:
                continue
            a += (lo - a) % step  # the first selected row in this block
            if a < b:
                parts.append(ds[(slice(first + a - s0, first + b - s0, step),) + tail])
        return np.concatenate(parts)

    def read_into(self, out, lo, hi):
        """Rows [lo, hi) into out (hi - lo rows): read_direct per block where out is contiguous."""
        for (ds, first, n), s0 in zip(self.blocks, self.starts[:-1]):
            a, b = max(lo, s0), min(hi, s0 + n)
            if a >= b:
                continue
            dest = out[a - lo:b - lo]
            src = np.s_[first + a - s0:first + b - s0]
            if dest.flags.c_contiguous:
                ds.read_direct(dest, src)
            else:
                dest[...] = ds[src]

    def row(self, i):
        k = int(np.searchsorted(self.starts, i, side='right')) - 1
        ds, first, _ = self.blocks[k]
        return ds[first + i - self.starts[k]]


class Stack:
    """Frames-first detector stack from per-module RowBlocks (EXtra-data's stack_detector_data)."""

    def __init__(self, modules):
        self.modules = modules
        n = modules[0].shape[0]
        self.shape = (n, len(modules)) + modules[0].shape[2:]  # entries (1, y, x): one cell

    def rows(self, lo, hi, step=1, tail=()):
        return np.stack([m.rows(lo, hi, step, (0,) + tail[1:] if tail else (0,)) for m in self.modules], axis=1)

    def read_into(self, out, lo, hi):
        for k, m in enumerate(self.modules):
            m.read_into(out[:, k, None], lo, hi)  # entries (1, y, x): one memory cell

    def row(self, i):
        return np.stack([m.row(i)[0] for m in self.modules])


def in_threads(fn, ranges):
    """fn(lo, hi) for each range, each on its own thread, all at once."""
    ts = [threading.Thread(target=fn, args=ab) for ab in ranges]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def drop_caches():
    os.sync()
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('3\n')


def timed(fn):
    t = time.perf_counter()
    r = fn()
    return time.perf_counter() - t, r


def mount_stats(mnt):
    with open(osp.join(mnt, '.h5direct', 'stats.json')) as f:
        return json.load(f)


def write_report(report, md=None, json_path=None, obj=None):
    """Prints the markdown report and writes it to `md`, and `obj` as JSON to `json_path`."""
    print(report)
    if md:
        with open(md, 'w') as f:
            f.write(report + '\n')
    if json_path:
        with open(json_path, 'w') as f:
            json.dump(obj, f, indent=1)
