"""A Python version of EXtra-data's direct reader (its pull request "Implement a direct reader for
HDF5 files"; /work/shared/reference/cold-storage.md): chunk locations from libhdf5 (h5py), then
the chunk bytes read with os.preadv straight into the output array from a pool of threads
(16 by default), and shuffle + deflate chunks decompressed (zlib, numpy unshuffle) on the same
threads. Uncompressed data (contiguous, or chunks that follow each other in the file) is read in
bands split at SPLIT_BYTES = 32 MiB, as EXtra-data does for GPFS.

Chunk locations: h5py's `get_chunk_info` is quadratic over many chunks with HDF5 1.10, so each
chunk is looked up by its coordinates (`get_chunk_info_by_coord`, a B-tree lookup), once, on the
planning thread (libhdf5 calls are serialised by h5py anyway). Chunks must hold whole rows
(chunk shape (k,) + the row shape), as detector frames are stored.

    r = DirectReader([(h5py_dataset, first_row, rows), ...])   # one dataset, or row blocks
    r.run(r.plan(out, lo, hi))                                 # rows [lo, hi) into out
"""
import os
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

SPLIT_BYTES = 32 << 20
IOV_MAX = 1024


def pread_into(fd, bufs, off):
    """Fills the buffers (in order) from the file at `off`, in preadv calls of IOV_MAX buffers."""
    for i in range(0, len(bufs), IOV_MAX):
        group = bufs[i:i + IOV_MAX]
        want = sum(len(b) for b in group)
        done = os.preadv(fd, group, off)
        while done < want:  # a short read: the rest
            rest, skip = [], done
            for b in group:
                if skip >= len(b):
                    skip -= len(b)
                    continue
                rest.append(b[skip:])
                skip = 0
            n = os.preadv(fd, rest, off + done)
            if n <= 0:
                raise EOFError(f'short read at {off + done}')
            done += n
        off += want


def row_buffers(dest):
    """Byte buffers covering `dest` (rows of an array): one when it is contiguous, else a row each."""
    if dest.flags.c_contiguous:
        return [memoryview(dest).cast('B')]
    return [memoryview(r).cast('B') for r in dest]  # rows must be contiguous


class DirectDataset:
    def __init__(self, ds):
        if ds.compression not in (None, 'gzip') or ds.fletcher32 or ds.scaleoffset is not None:
            raise ValueError(f'{ds.name}: filters other than shuffle + deflate')
        if ds.chunks and tuple(ds.chunks[1:]) != tuple(ds.shape[1:]):
            raise ValueError(f'{ds.name}: chunks must hold whole rows')
        self.dsid, self.dtype, self.shape = ds.id, ds.dtype, ds.shape
        self.row_bytes = int(np.prod(ds.shape[1:], dtype=np.int64)) * ds.dtype.itemsize
        self.crows = ds.chunks[0] if ds.chunks else None
        self.deflate, self.shuffle = ds.compression == 'gzip', ds.shuffle
        self.offset = None if ds.chunks else ds.id.get_offset()
        self.locs = {}
        self.fd = os.open(ds.file.filename, os.O_RDONLY)

    def close(self):
        os.close(self.fd)

    def chunk(self, k):
        """(file offset or None when not allocated, stored size, filter mask) of chunk k."""
        if k not in self.locs:
            i = self.dsid.get_chunk_info_by_coord((k * self.crows,) + (0,) * (len(self.shape) - 1))
            self.locs[k] = (i.byte_offset, i.size, i.filter_mask)
        return self.locs[k]

    def plan(self, out, lo, hi):
        """Tasks (callables) that read rows [lo, hi) of the dataset into out[0:hi - lo]."""
        rb, band_rows = self.row_bytes, max(1, SPLIT_BYTES // self.row_bytes)
        if self.offset is not None:  # contiguous
            return [self._band(out, a - lo, b - lo, self.offset + a * rb)
                    for a in range(lo, hi, band_rows) for b in [min(hi, a + band_rows)]]
        tasks, band = [], None  # band: [first out row, end out row, file offset] of raw rows
        for k in range(lo // self.crows, (hi - 1) // self.crows + 1 if hi > lo else 0):
            a, b = max(lo, k * self.crows), min(hi, (k + 1) * self.crows)
            off, size, mask = self.chunk(k)
            if off is None:  # never written: the fill value (0 here)
                tasks.append(lambda a=a, b=b: out[a - lo:b - lo].fill(0))
            elif self.deflate or self.shuffle:
                tasks.append(self._decode(out, a - lo, b - lo, off, size, mask, a - k * self.crows))
            elif band and band[2] + (band[1] - band[0]) * rb == off + (a - k * self.crows) * rb \
                    and band[1] - band[0] + b - a <= band_rows:
                band[1] += b - a
            else:
                band = [a - lo, b - lo, off + (a - k * self.crows) * rb]
                tasks.append(band)
        return [self._band(out, *t) if isinstance(t, list) else t for t in tasks]

    def _band(self, out, a, b, off):
        return lambda: pread_into(self.fd, row_buffers(out[a:b]), off)

    def _decode(self, out, a, b, off, size, mask, skip):
        if mask:
            raise ValueError('chunks with skipped filters are not handled')

        def task():
            data = os.pread(self.fd, size, off)
            if self.deflate:
                data = zlib.decompress(data)
            raw = np.frombuffer(data, np.uint8)
            if self.shuffle:  # byte planes -> elements
                raw = raw.reshape(self.dtype.itemsize, -1).T
            rows = raw.reshape(-1, self.row_bytes)[skip:skip + b - a]
            out[a:b] = rows.view(self.dtype).reshape((b - a,) + self.shape[1:])
        return task


def run_tasks(tasks, pool):
    """Runs the tasks on the pool (None: here), and raises the first error."""
    if pool is None:
        for t in tasks:
            t()
    else:
        for f in [pool.submit(t) for t in tasks]:
            f.result()


class DirectReader:
    """Rows of one array made of row blocks [(h5py dataset, first row, rows)], read by a pool of
    `threads` threads (0: on the calling thread)."""

    def __init__(self, blocks, threads=16):
        self.blocks = [(DirectDataset(ds), first, n) for ds, first, n in blocks]
        self.starts = np.cumsum([0] + [n for _, _, n in blocks])
        self.pool = ThreadPoolExecutor(threads) if threads else None

    def plan(self, out, lo, hi):
        tasks = []
        for (dd, first, n), s0 in zip(self.blocks, self.starts[:-1]):
            a, b = max(lo, s0), min(hi, s0 + n)
            if a < b:
                tasks += dd.plan(out[a - lo:b - lo], first + a - s0, first + b - s0)
        return tasks

    def run(self, tasks):
        run_tasks(tasks, self.pool)

    def read(self, out, lo, hi):
        self.run(self.plan(out, lo, hi))
        return out

    def close(self):
        if self.pool:
            self.pool.shutdown()
        for dd, _, _ in self.blocks:
            dd.close()
