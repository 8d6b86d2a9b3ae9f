#!/usr/bin/python3
"""What the mount delivers against what the decoder decodes: warm full reads, side by side.

Cells: 1,600 frames of 512x128 uint16 (210 MB decoded), detector-like noise, in the page cache:
  deflate1  one frame a chunk, shuffle + deflate(1)
  deflate4  four frames a chunk, shuffle + deflate(3)
  lz4, blosc (Blosc(lz4, shuffle)), none   one frame a chunk
Per cell, rounds interleaved, medians printed:
  decode    h5direct's engine reading the dataset with no FUSE on all cores (bench_core_file:
            the chunk map loaded before the timing): decoding alone, plus the page-cache pread
  mmap      np.load(mmap_mode='r') of the .npy and a full copy, a fresh mount each pass
  read      read() of the whole .raw in 1 MiB calls, a fresh mount each pass
  h5py      read_direct of the whole dataset, the file opened in the timing
  ceiling   (lz4, blosc, none) bench/fuse_ceiling serving the same number of bytes from memory
            with read()
and the CPU seconds of each mount pass: the daemon (its helpers included) and the reader.
With --perf, `perf record -g` of the daemon during one mmap pass of each deflate cell, and the
share of its samples per library (perf: Debian's linux-perf).

Usage: bench/bench_delivery.py [--build build] [--rounds 3] [--cells deflate1,...] [--perf]
                               [--workdir DIR] [--hold-freed-pages] [--md out.md]
"""
import argparse
import os
import os.path as osp
import resource
import subprocess
import sys
import tempfile
import time

import h5py
import hdf5plugin
import numpy as np

import benchlib
from benchlib import FRAME, split

CELLS = {
    'deflate1': dict(rows=1, kw=dict(compression='gzip', compression_opts=1, shuffle=True)),
    'deflate4': dict(rows=4, kw=dict(compression='gzip', compression_opts=3, shuffle=True)),
    'lz4': dict(rows=1, kw=dict(hdf5plugin.LZ4())),
    'blosc': dict(rows=1, kw=dict(hdf5plugin.Blosc(cname='lz4', clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE))),
    'none': dict(rows=1, kw={}),
}
FRAMES = 1600

p = argparse.ArgumentParser()
p.add_argument('--build', default='build')
p.add_argument('--rounds', type=int, default=3)
p.add_argument('--cells', default=','.join(CELLS))
p.add_argument('--threads', type=int, default=os.cpu_count())
p.add_argument('--opts', default='', help='extra mount options for h5direct')
p.add_argument('--perf', action='store_true')
p.add_argument('--workdir', default=None)
p.add_argument('--md', default=None)
p.add_argument('--hold-freed-pages', action='store_true',
               help='keep freed guest pages from the host during the run (benchlib.hold_freed_pages)')
args = p.parse_args()
if args.hold_freed_pages and not benchlib.hold_freed_pages():
    sys.exit('--hold-freed-pages: cannot set ' + benchlib.MIN_FREE_MS)
BIN = osp.abspath(osp.join(args.build, 'daemon', 'mount.h5direct'))
CORE = osp.abspath(osp.join(args.build, 'bench', 'bench_core_file'))
CEIL = osp.abspath(osp.join(args.build, 'bench', 'fuse_ceiling'))
work = args.workdir or tempfile.mkdtemp(prefix='h5d-delivery-')
cells = [c for c in args.cells.split(',') if c]
NBYTES = FRAMES * FRAME[0] * FRAME[1] * 2


def make(cell):
    d = osp.join(work, cell)
    path = osp.join(d, 'frames.h5')
    if not osp.exists(path):
        os.makedirs(d, exist_ok=True)
        spec = CELLS[cell]
        with h5py.File(path + '.tmp', 'w') as f:
            ds = f.create_dataset('data', shape=(FRAMES,) + FRAME, dtype='u2',
                                  chunks=(spec['rows'],) + FRAME, **spec['kw'])
            for a, b in split(FRAMES, 4):
                ds[a:b] = benchlib.frames_data(b - a, a + 1)
        os.rename(path + '.tmp', path)
    with h5py.File(path, 'r') as f:
        ref = f['data'][()]
    with open(path, 'rb') as f:  # into the page cache
        while f.read(1 << 24):
            pass
    return d, path, ref


def reader_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def mount_pass(src, ref, how, perf_out=None):
    mnt = osp.join(work, 'mnt')
    os.makedirs(mnt, exist_ok=True)
    with benchlib.mount_h5direct(BIN, src, args.opts or None, mnt=mnt) as m:
        perf = None
        if perf_out:
            perf = subprocess.Popen(['perf', 'record', '-g', '-q', '-o', perf_out, '-p', str(m.proc.pid)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        d0, r0, t0 = m.cpu_seconds(), reader_cpu(), time.perf_counter()
        if how == 'read':
            buf = bytearray(NBYTES)
            benchlib.read_all(osp.join(mnt, 'frames.h5', 'data.raw'), buf)
            secs = time.perf_counter() - t0
            got = np.frombuffer(buf, '<u2').reshape(ref.shape)
        else:
            a = np.load(osp.join(mnt, 'frames.h5', 'data.npy'), mmap_mode='r')
            got = np.empty(a.shape, a.dtype)
            got[...] = a
            secs = time.perf_counter() - t0
            del a
        cpu = (m.cpu_seconds() - d0, reader_cpu() - r0)
        if perf:
            perf.send_signal(2)
            perf.wait()
    if not np.array_equal(got, ref):
        sys.exit(f'{src}: the mount returned other bytes than h5py')
    return secs, cpu


def h5py_pass(path, ref):
    t0 = time.perf_counter()
    with h5py.File(path, 'r') as f:
        out = np.empty(ref.shape, ref.dtype)
        f['data'].read_direct(out)
    secs = time.perf_counter() - t0
    assert np.array_equal(out, ref)
    return secs


def decode_alone(path):
    out = subprocess.run([CORE, path, '/data', str(args.threads), '1'], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[0])


def ceiling_pass():
    mnt = osp.join(work, 'mnt')
    os.makedirs(mnt, exist_ok=True)
    with benchlib.Mount([CEIL, mnt, str(NBYTES)], mnt):
        buf = bytearray(NBYTES)
        t0 = time.perf_counter()
        benchlib.read_all(osp.join(mnt, 'data'), buf)
        return time.perf_counter() - t0


def perf_shares(data):
    """Share of the daemon's samples per library (perf report --sort dso)."""
    out = subprocess.run(['perf', 'report', '-i', data, '--no-children', '--sort', 'dso', '--stdio', '-q'],
                         capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].endswith('%'):
            rows.append((float(parts[0][:-1]), ' '.join(parts[1:])))
    return rows[:8]


med = lambda xs: sorted(xs)[len(xs) // 2]
print(f'# {FRAMES} frames of {FRAME[0]}x{FRAME[1]} uint16 ({NBYTES / 1e6:.0f} MB), warm, {args.threads} threads, '
      f'{args.rounds} rounds; {benchlib.reporting_state()}')
lines = ['| cell | decoding alone | mmap | read() | h5py | ceiling | mmap / decoding | read() / decoding '
         '| daemon + reader CPU (mmap) | CPU / decoding CPU |', '|' + '---|' * 10]
for cell in cells:
    src, path, ref = make(cell)
    t = {k: [] for k in ('decode', 'mmap', 'read', 'h5py', 'ceiling')}
    cpu = []
    for _ in range(args.rounds):
        t['decode'].append(decode_alone(path))
        s, c = mount_pass(src, ref, 'mmap')
        t['mmap'].append(s)
        cpu.append(c)
        t['read'].append(mount_pass(src, ref, 'read')[0])
        t['h5py'].append(h5py_pass(path, ref))
        if cell in ('lz4', 'blosc', 'none'):
            t['ceiling'].append(ceiling_pass())
    m = {k: med(v) if v else None for k, v in t.items()}
    daemon, reader = med([c[0] for c in cpu]), med([c[1] for c in cpu])
    # decoding alone keeps every thread busy: its CPU is its time x threads at most
    dec_cpu = m['decode'] * args.threads
    ceil = f"{m['ceiling']:.3f} s" if m['ceiling'] else '-'
    lines.append(f"| {cell} | {m['decode']:.3f} s | {m['mmap']:.3f} s | {m['read']:.3f} s | {m['h5py']:.3f} s | {ceil} "
                 f"| {m['mmap'] / m['decode']:.2f} | {m['read'] / m['decode']:.2f} "
                 f"| {daemon:.2f} + {reader:.2f} s | {(daemon + reader) / dec_cpu:.2f} |")
    print(lines[-1] if len(lines) > 3 else '\n'.join(lines), flush=True)
    if args.perf and cell.startswith('deflate'):
        data = osp.join(work, f'perf-{cell}.data')
        mount_pass(src, ref, 'mmap', perf_out=data)
        print(f'#   perf, daemon during an mmap pass of {cell}: ' +
              ', '.join(f'{share:.1f}% {dso}' for share, dso in perf_shares(data)), flush=True)
if args.md:
    with open(args.md, 'w') as f:
        f.write('\n'.join(lines) + '\n')
