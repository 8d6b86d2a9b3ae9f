"""Writes through a rw mount (-o rw): new HDF5 files (mkdir NAME.h5), groups, datasets created
from a .npy header (numpy's open_memmap) or a JSON spec (NAME.json, then NAME.raw), many
processes writing disjoint parts at once, compression, durability when a writer or the daemon is
killed, and what stays refused (ro mounts, existing datasets without write_existing)."""
import errno
import json
import os
import os.path as osp
import signal
import struct
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest

import h5d_testlib as tl

PY = sys.executable


def run_procs(scripts, timeout=120):
    procs = [subprocess.Popen([PY, '-c', textwrap.dedent(s)]) for s in scripts]
    for p in procs:
        assert p.wait(timeout) == 0


def reference(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 1000, size=shape)).astype(dtype)


@pytest.fixture
def srcdir():
    return tl.make_tmpdir('wr-src-')


def test_ro_mount_refuses_writes(srcdir, mount):
    m = mount(srcdir)
    with pytest.raises(OSError) as e:
        os.mkdir(m.path('out.h5'))
    assert e.value.errno == errno.EROFS
    assert not os.listdir(srcdir)


def test_parallel_writers_memmap_and_pwrite(srcdir, mount):
    m = mount(srcdir, 'writable')
    os.mkdir(m.path('out.h5'))
    os.mkdir(m.path('out.h5', 'results'))
    shape = (48, 256, 128)
    ref = reference(shape, '<u2')
    npy = m.path('out.h5', 'results', 'img.npy')
    a = np.lib.format.open_memmap(npy, mode='w+', dtype='<u2', shape=shape)
    assert a.offset == 128
    del a
    assert sorted(os.listdir(m.path('out.h5', 'results'))) == ['img.json', 'img.npy', 'img.raw']
    np.save(osp.join(srcdir, '..', osp.basename(srcdir) + '-ref.npy'), ref)
    refp = osp.join(srcdir, '..', osp.basename(srcdir) + '-ref.npy')
    scripts = []
    # 4 processes through numpy's memmap (r+), 2 through os.pwrite on the .raw
    for k in range(4):
        scripts.append(f'''
            import numpy as np
            ref = np.load({refp!r})
            a = np.lib.format.open_memmap({npy!r}, mode='r+')
            a[{k * 8}:{k * 8 + 8}] = ref[{k * 8}:{k * 8 + 8}]
            a.flush()
            del a
        ''')
    # os.pwrite: one through the .npy (after its header), one through the .raw. Writers whose
    # slices share a page must go through the same name (one page cache), see docs/semantics.md.
    raw = m.path('out.h5', 'results', 'img.raw')
    hl = 128
    for k, path, base in [(4, npy, hl), (5, raw, 0)]:
        scripts.append(f'''
            import os, numpy as np
            ref = np.load({refp!r})
            fd = os.open({path!r}, os.O_WRONLY)
            part = ref[{k * 8}:{k * 8 + 8}]
            os.pwrite(fd, part.tobytes(), {base} + part.nbytes * {k})
            os.close(fd)
        ''')
    run_procs(scripts)
    np.testing.assert_array_equal(np.load(npy), ref)
    np.testing.assert_array_equal(np.memmap(raw, mode='r', dtype='<u2', shape=shape), ref)
    with open(m.path('out.h5', 'results', 'img.json')) as f:
        side = json.load(f)
    assert side['shape'] == list(shape) and side['layout'] == 'contiguous'
    m.close()
    with h5py.File(osp.join(srcdir, 'out.h5'), 'r') as f:
        d = f['results/img']
        assert d.chunks is None
        np.testing.assert_array_equal(d[()], ref)
    # and through a fresh (read-only) mount
    m2 = mount(srcdir)
    np.testing.assert_array_equal(np.load(m2.path('out.h5', 'results', 'img.npy')), ref)


@pytest.mark.parametrize('compression', ['gzip', 'blosc', 'lz4', 'zstd'])
def test_json_spec_compressed_parallel(srcdir, mount, compression):
    m = mount(srcdir, 'writable')
    os.mkdir(m.path('c.h5'))
    shape = (40, 100, 64)
    ref = reference(shape, '<i4', seed=3)
    spec = {'shape': list(shape), 'dtype': '<i4', 'chunks': [4, 50, 64], 'compression': compression}
    with open(m.path('c.h5', 'd.json'), 'w') as f:
        json.dump(spec, f)
    assert sorted(os.listdir(m.path('c.h5'))) == ['d.json', 'd.npy', 'd.raw']
    refp = srcdir + '-ref.npy'
    np.save(refp, ref)
    raw = m.path('c.h5', 'd.raw')
    # 3 writers; the slices (13 rows) do not fall on chunk boundaries: chunks shared by two
    # writers are assembled in the daemon from both.
    scripts = [f'''
        import os, numpy as np
        ref = np.load({refp!r})
        fd = os.open({raw!r}, os.O_WRONLY)
        lo, hi = {lo}, {hi}
        for r in range(lo, hi):   # row by row, like a processing loop
            os.pwrite(fd, ref[r].tobytes(), ref[r].nbytes * r)
        os.close(fd)
    ''' for lo, hi in [(0, 13), (13, 26), (26, 40)]]
    run_procs(scripts)
    np.testing.assert_array_equal(np.load(m.path('c.h5', 'd.npy')), ref)
    m.close()
    try:
        import hdf5plugin  # noqa: F401  (Blosc, LZ4 and, in recent versions, zstd for h5py)
    except ImportError:
        pass
    fid = {'gzip': 1, 'blosc': 32001, 'lz4': 32004, 'zstd': 32015}[compression]
    with h5py.File(osp.join(srcdir, 'c.h5'), 'r') as f:
        assert f['d'].chunks == (4, 50, 64)
        f['d'].id.get_create_plist().get_filter_by_id(fid)  # in the pipeline (else raises)
        if h5py.h5z.filter_avail(fid):  # h5py can decode it here: compare
            np.testing.assert_array_equal(f['d'][()], ref)
    m2 = mount(srcdir)  # h5direct's own decoders
    np.testing.assert_array_equal(np.load(m2.path('c.h5', 'd.npy')), ref)


@pytest.mark.parametrize('shape,chunks,dtype', [
    ((1000,), (64,), '<f8'),            # 1-D, a partial edge chunk
    ((7, 9, 11), (3, 4, 5), '>i2'),     # edge chunks on every axis, big-endian
    ((3, 5, 4, 6), (2, 5, 3, 4), '<c8'),  # 4-D, complex
    ((50, 33), (50, 33), '|u1'),        # one chunk
])
def test_chunk_assembly_any_order_and_alignment(srcdir, mount, shape, chunks, dtype):
    """Writes of random sizes (not element-aligned), in random order, overlapping and rewritten,
    some after a flush: the chunk assembly (C-order bytes -> chunks, edge chunks, read-modify-write
    of chunks already in the file) gives exactly the final bytes."""
    m = mount(srcdir, 'writable')
    os.mkdir(m.path('a.h5'))
    rng = np.random.default_rng(11)
    ref = rng.integers(0, 255, size=int(np.prod(shape)) * np.dtype(dtype).itemsize,
                       dtype=np.uint8).tobytes()
    with open(m.path('a.h5', 'x.json'), 'w') as f:
        json.dump({'shape': list(shape), 'dtype': dtype, 'chunks': list(chunks),
                   'compression': 'gzip'}, f)
    n = len(ref)
    cuts = sorted(set([0, n] + [int(x) for x in rng.integers(0, n, size=25)]))
    pieces = list(zip(cuts[:-1], cuts[1:]))
    rng.shuffle(pieces)
    fd = os.open(m.path('a.h5', 'x.raw'), os.O_RDWR)
    junk = bytes(255 - b for b in ref)
    for i, (lo, hi) in enumerate(pieces):
        if i % 3 == 0:  # first garbage, rewritten below
            os.pwrite(fd, junk[lo:hi], lo)
        if i == len(pieces) // 2:
            os.fsync(fd)  # incomplete chunks go to the file; later writes must merge with them
    for lo, hi in pieces:
        os.pwrite(fd, ref[lo:hi], lo)
    assert os.pread(fd, n, 0) == ref
    os.close(fd)
    assert tl.pread_all(m.path('a.h5', 'x.raw')) == ref
    m.close()
    with h5py.File(osp.join(srcdir, 'a.h5'), 'r') as f:
        d = f['x']
        assert d.chunks == chunks
        assert d[()].tobytes() == np.frombuffer(ref, dtype=dtype).reshape(shape).tobytes()


def test_default_compression_option_and_partial_chunks(srcdir, mount):
    m = mount(srcdir, 'writable,write_compression=gzip')
    os.mkdir(m.path('p.h5'))
    a = np.lib.format.open_memmap(m.path('p.h5', 'x.npy'), mode='w+', dtype='<f8', shape=(1000, 300))
    a[:333] = 1.5   # a third: the last chunk touched is incomplete, flushed padded with fill
    a.flush()
    del a
    got = np.load(m.path('p.h5', 'x.npy'))
    assert (got[:333] == 1.5).all() and (got[333:] == 0).all()
    m.close()
    with h5py.File(osp.join(srcdir, 'p.h5'), 'r') as f:
        d = f['x']
        assert d.compression == 'gzip'
        v = d[()]
        assert (v[:333] == 1.5).all() and (v[333:] == 0).all()


def test_kill_writer_midway(srcdir, mount):
    m = mount(srcdir, 'writable')
    os.mkdir(m.path('k.h5'))
    shape = (64, 1024, 256)  # 64 MiB of u4
    npy = m.path('k.h5', 'x.npy')
    np.lib.format.open_memmap(npy, mode='w+', dtype='<u4', shape=shape)
    raw = m.path('k.h5', 'x.raw')
    victim = subprocess.Popen([PY, '-c', textwrap.dedent(f'''
        import os, numpy as np
        fd = os.open({raw!r}, os.O_WRONLY)
        row = np.full((1024, 256), 7, dtype='<u4').tobytes()
        while True:
            for r in range(32, 64):
                os.pwrite(fd, row, len(row) * r)
    ''')])
    run_procs([f'''
        import numpy as np
        a = np.lib.format.open_memmap({npy!r}, mode='r+')
        a[:32] = np.arange(32, dtype='<u4')[:, None, None]
        del a
    '''])
    time.sleep(0.5)
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    got = np.load(npy, mmap_mode='r')
    assert (got[:32] == np.arange(32, dtype='<u4')[:, None, None]).all()
    del got
    m.close()
    with h5py.File(osp.join(srcdir, 'k.h5'), 'r') as f:
        v = f['x'][()]
        assert (v[:32] == np.arange(32, dtype='<u4')[:, None, None]).all()
        assert set(np.unique(v[32:])) <= {0, 7}


def test_kill_daemon_midway(srcdir, mount):
    m = mount(srcdir, 'writable')
    os.mkdir(m.path('d.h5'))
    os.mkdir(m.path('d.h5', 'g'))
    shape = (32, 512, 512)
    ref = reference(shape, '<u2', seed=5)
    with open(m.path('d.h5', 'g', 'x.json'), 'w') as f:
        json.dump({'shape': list(shape), 'dtype': '<u2'}, f)
    with open(m.path('d.h5', 'g', 'z.json'), 'w') as f:  # compressed: pending chunks are lost
        json.dump({'shape': list(shape), 'dtype': '<u2', 'compression': 'gzip'}, f)
    fd = os.open(m.path('d.h5', 'g', 'x.raw'), os.O_WRONLY)
    half = ref[:16].tobytes()
    os.pwrite(fd, half, 0)
    os.fsync(fd)
    m.proc.send_signal(signal.SIGKILL)
    m.proc.wait(10)
    try:
        os.close(fd)
    except OSError:
        pass
    tl.unmount(m.mnt)
    with h5py.File(osp.join(srcdir, 'd.h5'), 'r') as f:
        np.testing.assert_array_equal(f['g/x'][:16], ref[:16])
        assert f['g/x'].shape == shape
        assert f['g/z'].shape == shape  # created (metadata flushed at once), data never written
        assert (f['g/z'][:2] == 0).all()


def test_fsync_makes_compressed_chunks_survive_a_killed_daemon(srcdir, mount):
    m = mount(srcdir, 'writable')
    os.mkdir(m.path('f.h5'))
    shape = (30, 64, 64)
    ref = reference(shape, '<u2', seed=9)
    with open(m.path('f.h5', 'z.json'), 'w') as f:
        json.dump({'shape': list(shape), 'dtype': '<u2', 'chunks': [4, 64, 64],
                   'compression': 'gzip'}, f)
    fd = os.open(m.path('f.h5', 'z.raw'), os.O_WRONLY)
    os.pwrite(fd, ref[:10].tobytes(), 0)  # chunks 0-1 complete, chunk 2 half written
    os.fsync(fd)                            # the half chunk too (padded), and the chunk index
    os.pwrite(fd, ref[20:24].tobytes(), ref[:20].nbytes)  # a complete chunk after the fsync
    m.proc.send_signal(signal.SIGKILL)
    m.proc.wait(10)
    try:
        os.close(fd)
    except OSError:
        pass
    tl.unmount(m.mnt)
    with h5py.File(osp.join(srcdir, 'f.h5'), 'r') as f:
        v = f['z'][()]
    np.testing.assert_array_equal(v[:10], ref[:10])
    assert (v[10:12] == 0).all() and (v[12:20] == 0).all()
    assert (v[24:] == 0).all()
    # rows 20-24: written after the last flush: there or 0 (the chunk index may not be on disk)
    assert (v[20:24] == ref[20:24]).all() or (v[20:24] == 0).all()


def test_existing_datasets(srcdir, mount):
    p = osp.join(srcdir, 'old.h5')
    with h5py.File(p, 'w') as f:
        f['cont'] = np.zeros((10, 20), '<f4')
        f.create_dataset('comp', data=np.zeros((10, 20), '<f4'), compression='gzip')
    m = mount(srcdir, 'writable')
    for name in ('cont.npy', 'cont.raw', 'comp.raw'):
        with pytest.raises(OSError) as e:
            os.open(m.path('old.h5', name), os.O_RDWR)
        assert e.value.errno == errno.EPERM
    with pytest.raises(OSError) as e:
        os.mkdir(m.path('old.h5', 'newgroup'))  # only files created through the mount
    assert e.value.errno == errno.EPERM
    with pytest.raises(OSError) as e:
        open(m.path('old.h5', 'new.npy'), 'wb')
    assert e.value.errno == errno.EPERM
    m.close()
    m = mount(srcdir, 'writable,write_existing')
    a = np.lib.format.open_memmap(m.path('old.h5', 'cont.npy'), mode='r+')
    a[3] = 42
    del a
    with pytest.raises(OSError) as e:
        os.open(m.path('old.h5', 'comp.raw'), os.O_RDWR)
    assert e.value.errno == errno.EPERM
    m.close()
    with h5py.File(p, 'r') as f:
        v = f['cont'][()]
        assert (v[3] == 42).all() and (v[:3] == 0).all() and (v[4:] == 0).all()


def test_bad_headers_and_specs(srcdir, mount):
    m = mount(srcdir, 'writable')
    os.mkdir(m.path('b.h5'))
    with pytest.raises(OSError) as e:
        with open(m.path('b.h5', 'f.npy'), 'wb') as f:
            np.lib.format.write_array_header_1_0(f, {'descr': '<f4', 'fortran_order': True, 'shape': (3, 4)})
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        with open(m.path('b.h5', 's.json'), 'w') as f:
            f.write('{"shape": [3], "dtype": "<f4", "compression": "rar"}')
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        open(m.path('b.h5', 'x.txt'), 'w')
    assert e.value.errno == errno.EPERM
    # a scalar, bool and complex types through .npy
    np.save(m.path('b.h5', 'c.npy'), np.arange(6, dtype='<c8').reshape(2, 3))
    np.save(m.path('b.h5', 't.npy'), np.array([True, False, True]))
    np.save(m.path('b.h5', 'one.npy'), np.float64(2.5))
    m.close()
    with h5py.File(osp.join(srcdir, 'b.h5'), 'r') as f:
        np.testing.assert_array_equal(f['c'][()], np.arange(6, dtype='<c8').reshape(2, 3))
        np.testing.assert_array_equal(f['t'][()], [True, False, True])
        assert f['one'][()] == 2.5


def test_oversized_headers_and_shapes_are_refused(srcdir, mount):
    """A .npy header that claims to be huge is not collected without end in the daemon (EFBIG
    past 1 MiB), and shapes whose byte size would pass 2^63 (or wrap 2^64) are EFBIG, not a
    wrapped size; the daemon keeps serving."""
    m = mount(srcdir, 'writable')
    os.mkdir(m.path('big.h5'))
    rss0 = tl.process_memory(m.proc.pid)['VmRSS']
    # Version 2.0 header whose length field says 2 GiB: refused once the length is known.
    head = b'\x93NUMPY\x02\x00' + struct.pack('<I', 2 << 30)
    with pytest.raises(OSError) as e:
        with open(m.path('big.h5', 'h.npy'), 'wb', buffering=0) as f:
            f.write(head)
    assert e.value.errno == errno.EFBIG
    assert tl.process_memory(m.proc.pid)['VmRSS'] - rss0 < 64 << 20
    assert 'a .npy header is at most 1 MiB' in m.log()
    for i, shape in enumerate([(1 << 40, 1 << 40), (1 << 62,)]):
        with pytest.raises(OSError) as e:
            with open(m.path('big.h5', f'w{i}.npy'), 'wb') as f:
                np.lib.format.write_array_header_2_0(
                    f, {'descr': '<f4', 'fortran_order': False, 'shape': shape})
        assert e.value.errno == errno.EFBIG, shape
    with pytest.raises(OSError) as e:
        with open(m.path('big.h5', 's.json'), 'w') as f:
            f.write('{"shape": [%d, %d], "dtype": "<u2", "compression": "gzip"}' % (1 << 33, 1 << 33))
    assert e.value.errno == errno.EFBIG
    np.save(m.path('big.h5', 'ok.npy'), np.arange(10, dtype='<i8'))
    np.testing.assert_array_equal(np.load(m.path('big.h5', 'ok.npy')), np.arange(10))

