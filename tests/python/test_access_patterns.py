"""How numpy and plain programs really read: random frames through mmap, sequential copies,
reads at odd offsets, on compressed frames whose chunks hold one or several frames. With push
(the rest of a decoded chunk goes into the page cache) and per-file read-ahead, every byte must
still be h5py's, and a random frame read through mmap must decode about one chunk."""
import mmap
import os
import os.path as osp
import threading

import h5py
import numpy as np
import pytest

import h5d_testlib as tl

FRAME = (64, 256)  # 32 KiB of uint16
N = 240


@pytest.fixture(scope='module')
def src():
    d = tl.make_tmpdir('access-src-')
    rng = np.random.default_rng(7)
    data = (1000 + rng.normal(0, 8, size=(N,) + FRAME)).astype('<u2')
    with h5py.File(osp.join(d, 'frames.h5'), 'w') as f:
        f.create_dataset('one', data=data, chunks=(1,) + FRAME, shuffle=True, compression='gzip',
                         compression_opts=1)
        f.create_dataset('three', data=data, chunks=(3, 32, 256), shuffle=True, compression='gzip')
        f.create_dataset('odd', data=data[:, :, :255].copy(), chunks=(7, 64, 255), compression='gzip')
        f.create_dataset('plain', data=data, chunks=(1,) + FRAME)
    return {'dir': d, 'data': data}


def expected(src, name):
    with h5py.File(osp.join(src['dir'], 'frames.h5'), 'r') as f:
        return f[name][()]


@pytest.mark.parametrize('name', ['one', 'three', 'odd', 'plain'])
def test_random_frames_sequential_copies_and_odd_reads(src, name):
    exp = expected(src, name)
    rng = np.random.default_rng(3)
    m = tl.Mount(src['dir'])
    try:
        npy = m.path('frames.h5', name + '.npy')
        a = np.load(npy, mmap_mode='r')
        for i in rng.integers(0, N, 60):
            assert np.array_equal(a[int(i)], exp[int(i)]), i
        # partial frames and rows, then everything (pages pushed earlier are read back here)
        for i in rng.integers(0, N, 20):
            assert np.array_equal(a[int(i), 10:40, 3:200], exp[int(i), 10:40, 3:200])
        out = np.empty_like(exp)
        out[...] = a
        assert np.array_equal(out, exp)
        del a
        raw = m.path('frames.h5', name + '.raw')
        whole = exp.tobytes()
        fd = os.open(raw, os.O_RDONLY)
        try:
            for _ in range(60):
                off = int(rng.integers(0, len(whole)))
                ln = int(rng.choice([1, 7, 4096, 5000, 32768, 100000]))
                assert os.pread(fd, ln, off) == whole[off:off + ln]
        finally:
            os.close(fd)
        assert m.stats()['error_replies'] == {}
    finally:
        m.close()


@pytest.mark.skipif(os.geteuid() != 0, reason='per-file read-ahead needs root (sysfs)')
def test_random_mmap_frame_decodes_about_one_chunk(src):
    exp = expected(src, 'one')
    m = tl.Mount(src['dir'])
    try:
        a = np.load(m.path('frames.h5', 'one.npy'), mmap_mode='r')
        idx = np.random.default_rng(11).permutation(N)[:50]
        out = np.empty(FRAME, '<u2')
        for i in idx:
            out[...] = a[int(i)]
            assert np.array_equal(out, exp[int(i)])
        del a
        s = m.stats()
        # The kernel's read-around alone would ask for a window of neighbours around every fault
        # (3 to 9 chunks per frame); with push and a minimal read-ahead it is one.
        assert s['chunks_decoded'] <= len(idx) + 3, s
        assert s['chunks_prefetched'] == 0, s
        # the rest of each frame reached the kernel by push, not by a request per page
        assert s['bytes_pushed'] >= len(idx) * (np.prod(FRAME) * 2 - 4096), s
        assert s['reads'] <= 2 * len(idx) + 5, s
    finally:
        m.close()


@pytest.mark.skipif(os.geteuid() != 0, reason='per-file read-ahead needs root (sysfs)')
def test_read_ahead_of_concurrent_opens_is_their_own():
    """Files of compressed data get a minimal read-ahead, the others readahead_kb: the kernel
    copies the mount's value into each file when its open is answered, so opens racing each other
    must not hand one file the other's value (measured before the fix: 14-20 of 60 opens)."""
    d = tl.make_tmpdir('access-ra-')
    stride = 2 << 20  # regions further apart than the read-around window (1 MiB)
    with h5py.File(osp.join(d, 'ra.h5'), 'w') as f:
        f.create_dataset('plain', data=np.arange(32 * stride // 2, dtype='<u2'))
        f.create_dataset('packed', data=np.zeros(4096, '<u2'), chunks=(1024,), compression='gzip')
    m = tl.Mount(d)
    stop = threading.Event()

    def opener():  # opens of a compressed file, all the time
        while not stop.is_set():
            os.close(os.open(m.path('ra.h5', 'packed.npy'), os.O_RDONLY))
    t = threading.Thread(target=opener)
    t.start()
    small = 0
    try:
        for i in range(30):
            fd = os.open(m.path('ra.h5', 'plain.raw'), os.O_RDONLY)
            mm = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
            r0 = m.stats()['reads']
            for p in range(16):  # 64 KiB touched: one read-around request at 1 MiB read-ahead
                mm[i * stride + p * 4096]
            if m.stats()['reads'] - r0 > 4:  # a request per page or so: 4 KiB read-ahead
                small += 1
            mm.close()
            os.close(fd)
    finally:
        stop.set()
        t.join()
        m.close()
    assert small <= 3, f'{small} of 30 opens of an uncompressed file got the minimal read-ahead'


@pytest.fixture(scope='module')
def composites(src):
    """The frames of `src` as a VDS over 3 files and as a run-view key over 3 sequence files."""
    import sys
    sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
    import euxfel_mock
    d = tl.make_tmpdir('access-comp-')
    data = src['data']
    bounds = [0, 70, 160, N]
    layout = h5py.VirtualLayout(shape=data.shape, dtype=data.dtype)
    for i in range(3):
        a, b = bounds[i], bounds[i + 1]
        p = osp.join(d, f'part{i}.h5')
        with h5py.File(p, 'w') as f:
            f.create_dataset('data', data=data[a:b], chunks=(1,) + FRAME, shuffle=True,
                             compression='gzip', compression_opts=1)
        layout[a:b] = h5py.VirtualSource(p, 'data', shape=(b - a,) + FRAME)
    with h5py.File(osp.join(d, 'vds.h5'), 'w') as f:
        f.create_virtual_dataset('data', layout)
    w = euxfel_mock.RunWriter(osp.join(d, 'r0001'), run_number=1, keep_data=False)
    key = euxfel_mock.Key('image.data', '<u2', FRAME, chunks='frame', compression='gzip1',
                          make=lambda tids, js: data[np.asarray(tids, np.int64) - 10000])
    source = euxfel_mock.Source('SPB_DET_AGIPD1M-1/DET/0CH0:xtdf', 'INSTRUMENT',
                                [euxfel_mock.Group('image', [key], lambda t: 1, pad_to=4)])
    for s in range(3):
        w.write_file('AGIPD00', s, [source], list(range(10000 + bounds[s], 10000 + bounds[s + 1])))
    return {'vds': (d, ('vds.h5', 'data.npy')),
            'run': (w.run_dir, ('SPB_DET_AGIPD1M-1', 'DET', '0CH0:xtdf', 'image.data.npy'))}


@pytest.mark.skipif(os.geteuid() != 0, reason='per-file read-ahead needs root (sysfs)')
@pytest.mark.parametrize('kind', ['vds', 'run'])
def test_random_mmap_frames_of_composites_decode_about_one_chunk(src, composites, kind):
    """A VDS and a run-view key forward their sources' decode units: a random frame through
    mmap costs one decode and about one request, as on a plain dataset."""
    root, rel = composites[kind]
    m = tl.Mount(root)
    try:
        a = np.load(m.path(*rel), mmap_mode='r')
        idx = np.random.default_rng(12).permutation(N)[:50]
        out = np.empty(FRAME, '<u2')
        for i in idx:
            out[...] = a[int(i)]
            assert np.array_equal(out, src['data'][int(i)]), i
        del a
        s = m.stats()
        assert s['chunks_decoded'] <= len(idx) + 3, s
        assert s['reads'] <= 2 * len(idx) + 5, s
    finally:
        m.close()


@pytest.mark.skipif(os.geteuid() != 0, reason='per-file read-ahead needs root (sysfs)')
@pytest.mark.parametrize('name', ['one', 'three'])
def test_backward_page_walk_costs_a_request_per_chunk(src, name):
    """glibc's memmove copies large buffers from their end when the destination lies above the
    source, so `out[...] = np.load(path, mmap_mode='r')` may walk the mapping backwards, page by
    page. Each chunk must still cost about one request (it cost one per page, 8 to 32 here, and
    pushed each chunk's rest again at every page)."""
    exp = expected(src, name)
    m = tl.Mount(src['dir'])
    try:
        fd = os.open(m.path('frames.h5', name + '.npy'), os.O_RDONLY)
        mm = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        header = 4096
        size = len(mm)
        pages = bytearray()
        for off in range(size - 4096, header - 1, -4096):  # one page at a time, from the end
            pages[0:0] = mm[off:off + 4096]
        mm.close()
        os.close(fd)
        assert bytes(pages) == exp.tobytes()
        s = m.stats()
        chunk_rows = {'one': 1, 'three': 3}[name]
        chunks = N // chunk_rows * (1 if name == 'one' else 2)  # 'three': two chunks per 3 frames
        assert s['reads'] <= chunks + 10, s
        # Each chunk is pushed about once (before: 8 to 32 times). A reader that overtakes the
        # push after a reply asks for a page of a chunk being pushed, which is pushed again.
        assert s['bytes_pushed'] <= exp.nbytes * 2, s
    finally:
        m.close()


@pytest.fixture(scope='module')
def auto_src():
    """h5py's own chunk shape (chunks=True), as a writer that asks for compression and nothing
    else gets it: (75, 32, 16) for these frames, each chunk part of 75 frames (runs of 32 bytes)."""
    d = tl.make_tmpdir('access-auto-')
    rng = np.random.default_rng(11)
    data = (1000 + rng.normal(0, 8, size=(300, 512, 128))).astype('<u2')
    with h5py.File(osp.join(d, 'auto.h5'), 'w') as f:
        f.create_dataset('deflate', data=data, chunks=True, shuffle=True, compression='gzip', compression_opts=1)
        f.create_dataset('plain', data=data, chunks=True)
        f.create_dataset('resizable', data=data, maxshape=(None,) + data.shape[1:])  # chunked by h5py too
    return {'dir': d, 'data': data}


@pytest.mark.parametrize('name', ['deflate', 'plain', 'resizable'])
def test_h5py_chunk_shape_reads_each_chunk_once(auto_src, name):
    """Chunks narrower than a page's worth of a row: every read of a few frames needs a whole
    block of chunks. A full copy through mmap and a read() of the .raw must give h5py's bytes
    and read each chunk from the file about once (they read 8 KiB of each of 128 chunks per
    request, or the whole block in every concurrent request, before)."""
    path = osp.join(auto_src['dir'], 'auto.h5')
    with h5py.File(path, 'r') as f:
        ds = f[name]
        exp = ds[()]
        assert ds.chunks[2] < exp.shape[2]  # narrower than a row
        nchunks = int(np.prod([-(-n // c) for n, c in zip(exp.shape, ds.chunks)]))
        stored = sum(ds.id.get_chunk_info(i).size for i in range(ds.id.get_num_chunks()))
    for access in ('mmap', 'read'):
        m = tl.Mount(auto_src['dir'])
        try:
            if access == 'mmap':
                a = np.load(m.path('auto.h5', name + '.npy'), mmap_mode='r')
                out = np.empty_like(exp)
                out[...] = a
                del a
            else:
                with open(m.path('auto.h5', name + '.raw'), 'rb') as f:
                    out = np.frombuffer(f.read(), exp.dtype).reshape(exp.shape)
            assert np.array_equal(out, exp), access
            s = m.stats()
            assert s['chunks_decoded'] <= nchunks + 8, (access, s)  # each chunk about once
            assert s['bytes_pread'] <= stored * 1.1 + (1 << 20), (access, stored, s)
            assert s['source_requests'] <= nchunks + 8, (access, s)  # never a request per run
            # A page holds the runs of several chunks: no unit's rest to push (walking 32-byte
            # units 1 MiB ahead at every read cost 8x the CPU of frame chunks before).
            assert s['bytes_pushed'] == 0, (access, s)
            assert s['error_replies'] == {}, s
        finally:
            m.close()


@pytest.mark.parametrize('access', ['mmap', 'read', 'backward'])
def test_decode_ahead_fits_a_small_chunk_cache(src, access):
    """A chunk cache smaller than the decode-ahead window (cache_size=2M, 7.5 MiB of frames):
    chunks decoded ahead and evicted before the reader got there were decoded again (264 to 428
    decodes of these 240 chunks; 1.5x at cache_size=32M under 64 MiB windows). The window asks
    for what the cache has room for, and each chunk is decoded about once (240 to 248); stats.json
    shows the cut."""
    exp = expected(src, 'one')
    m = tl.Mount(src['dir'], opts='cache_size=2M')
    try:
        path = m.path('frames.h5', 'one.npy')
        if access == 'read':
            with open(path[:-4] + '.raw', 'rb') as f:
                got = np.frombuffer(f.read(), exp.dtype).reshape(exp.shape)
        elif access == 'mmap':
            got = np.empty_like(exp)
            got[...] = np.load(path, mmap_mode='r')
        else:  # page by page from the end, one request per chunk (pushes)
            fd = os.open(path, os.O_RDONLY)
            mm = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
            buf = bytearray(len(mm) - 4096)
            for off in range(len(mm) - 4096, 4095, -4096):
                buf[off - 4096:off] = mm[off:off + 4096]
            mm.close()
            os.close(fd)
            got = np.frombuffer(bytes(buf), exp.dtype).reshape(exp.shape)
        assert np.array_equal(got, exp)
        s = m.stats()
        assert s['chunks_decoded'] <= N * 1.05 + 2, s
        if access != 'read':  # read() of 1 MiB calls: its windows may stay within the room
            assert s['prefetch_capped_bytes'] > 0, s
    finally:
        m.close()
