"""Uncompressed data is replied by splicing it from the source file (`-o splice`, default on):
the bytes must be h5py's for every read (header boundary, odd offsets and sizes, mmap), only data
stored verbatim may take that path (not fill values, not chunks narrower than a row, not
compressed chunks), run-view keys splice through their concatenation and detector stacks through
their modules' files, and a source shorter than its metadata says gives EIO, never the zeros a
short splice would leave."""
import os
import os.path as osp
import sys

import h5py
import numpy as np
import pytest

import h5d_testlib as tl

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))

N = 300
FRAME = (64, 128)


@pytest.fixture(scope='module')
def src():
    d = tl.make_tmpdir('splice-src-')
    rng = np.random.default_rng(11)
    data = rng.integers(0, 60000, size=(N,) + FRAME, dtype='<u2')
    with h5py.File(osp.join(d, 'u.h5'), 'w') as f:
        f.create_dataset('contig', data=data)
        f.create_dataset('rows', data=data, chunks=(7,) + FRAME)           # whole rows per chunk
        f.create_dataset('narrow', data=data, chunks=(7, 32, 128))         # half rows: no splice
        f.create_dataset('be', data=data.astype('>f4'))                    # stored big-endian
        f.create_dataset('gz', data=data, chunks=(1,) + FRAME, compression='gzip')
        p = f.create_dataset('holes', shape=data.shape, dtype='<u2', chunks=(10,) + FRAME, fillvalue=7)
        p[0:50] = data[0:50]
        p[120:N] = data[120:N]
    return d


NAMES = ['contig', 'rows', 'narrow', 'be', 'gz', 'holes']
PIECE = 256 << 10  # below libfuse's pipe limit (fs.pipe-max-size, 1 MiB by default)


def read_in_pieces(path):
    """The whole file by 256 KiB preads without read-ahead (each read is one request)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        out = bytearray()
        while True:
            b = os.pread(fd, PIECE, len(out))
            if not b:
                return bytes(out)
            out += b
    finally:
        os.close(fd)


@pytest.mark.parametrize('opts', [None, 'splice=0'])
def test_bytes_are_h5pys_whichever_way_they_are_replied(src, opts):
    rng = np.random.default_rng(5)
    m = tl.Mount(src, opts)
    try:
        with h5py.File(osp.join(src, 'u.h5')) as f:
            for name in NAMES:
                exp = f[name][()]
                tl.check_dataset_files(m.path('u.h5'), name, exp, rng)
                assert read_in_pieces(m.path('u.h5', name + '.raw')) == exp.tobytes(), name
        s = m.stats()
        if opts is None:
            assert s['bytes_spliced'] > 0, s
        else:
            assert s['bytes_spliced'] == 0, s
    finally:
        m.close()


@pytest.mark.parametrize('name,spliced', [('contig', True), ('rows', True), ('be', True),
                                          ('narrow', False), ('gz', False)])
def test_only_bytes_stored_verbatim_are_spliced(src, name, spliced):
    with h5py.File(osp.join(src, 'u.h5')) as f:
        exp = f[name][()].tobytes()
    # Only bytes in the source's page cache are spliced (the next test), so the source is read
    # into it first. Tried again when a piece found its bytes evicted meanwhile (splice_cold: the
    # CI's sanitizer run once lost one 256 KiB piece of them to memory pressure); a splice path
    # that never serves every piece fails each try.
    for _ in range(3):
        with open(osp.join(src, 'u.h5'), 'rb') as f:
            f.read()
        m = tl.Mount(src)
        try:
            raw = m.path('u.h5', name + '.raw')
            size = os.stat(raw).st_size
            assert read_in_pieces(raw) == exp
            s = m.stats()
        finally:
            m.close()
        if not spliced:
            assert s['bytes_spliced'] == 0, s
            return
        if s['bytes_spliced'] == size:
            return
        assert s['splice_cold'] > 0, s  # not spliced, though not for want of cached bytes
    assert s['bytes_spliced'] == size, s


def test_cold_bytes_are_read_not_spliced_then_spliced_once_cached(src):
    """A splice reads what the source's page cache lacks inside the request, one request at a
    time: cold bytes are read (in requests spread over the I/O depth), cached ones spliced."""
    m = tl.Mount(src)
    try:
        raw = m.path('u.h5', 'contig.raw')
        size = os.stat(raw).st_size
        with h5py.File(osp.join(src, 'u.h5')) as f:
            exp = f['contig'][()].tobytes()
        tl.evict_pages(osp.join(src, 'u.h5'))
        assert read_in_pieces(raw) == exp
        s = m.stats()
        assert s['splice_cold'] > 0 and s['bytes_spliced'] < size, s
        tl.evict_pages(raw)  # the mount's pages of the file go
        with open(osp.join(src, 'u.h5'), 'rb') as f:
            f.read()  # the source cached again
        before = m.stats()['bytes_spliced']
        assert read_in_pieces(raw) == exp
        assert m.stats()['bytes_spliced'] - before == size
    finally:
        m.close()


def test_chunks_with_fill_values_are_read_not_spliced(src):
    """A read touching an unwritten chunk is read whole (its fill value is not in the file);
    reads of written chunks alone are spliced."""
    m = tl.Mount(src)
    try:
        raw = m.path('u.h5', 'holes.raw')
        row = FRAME[0] * FRAME[1] * 2
        with h5py.File(osp.join(src, 'u.h5')) as f:
            exp = f['holes'][()].tobytes()
        fd = os.open(raw, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # each pread one request
        try:
            assert os.pread(fd, 20 * row, 45 * row) == exp[45 * row:65 * row]  # written + fill
            before = m.stats()['bytes_spliced']
            assert os.pread(fd, 10 * row, 200 * row) == exp[200 * row:210 * row]  # written only
            assert m.stats()['bytes_spliced'] > before
        finally:
            os.close(fd)
    finally:
        m.close()


def test_run_view_keys_splice_through_their_files():
    import euxfel_mock
    d = tl.make_tmpdir('splice-run-')
    rng = np.random.default_rng(3)
    data = rng.integers(0, 4000, size=(90,) + FRAME, dtype='<u2')
    w = euxfel_mock.RunWriter(osp.join(d, 'r0001'), run_number=1, keep_data=False)
    key = euxfel_mock.Key('image.data', '<u2', FRAME, chunks='frame',
                          make=lambda tids, js: data[np.asarray(tids, np.int64) - 10000])
    source = euxfel_mock.Source('SPB_DET_AGIPD1M-1/DET/0CH0:xtdf', 'INSTRUMENT',
                                [euxfel_mock.Group('image', [key], lambda t: 1, pad_to=4)])
    bounds = [0, 25, 60, 90]
    for s in range(3):
        w.write_file('AGIPD00', s, [source], list(range(10000 + bounds[s], 10000 + bounds[s + 1])))
    m = tl.Mount(w.run_dir)
    try:
        p = m.path('SPB_DET_AGIPD1M-1', 'DET', '0CH0:xtdf', 'image.data.npy')
        assert read_in_pieces(p)[-data.nbytes:] == data.tobytes()
        assert m.stats()['bytes_spliced'] == data.nbytes, m.stats()
        a = np.load(p, mmap_mode='r')
        assert np.array_equal(a, data)
        del a
    finally:
        m.close()


def test_a_source_shorter_than_its_metadata_gives_eio_not_zeros(src):
    """Contiguous data whose end was cut off the file: the bytes before the cut are served, the
    read across it gives EIO (a spliced reply cut short would have read as zeros)."""
    d = tl.make_tmpdir('splice-cut-')
    data = np.arange(N * 64 * 128, dtype='<u2')
    full = osp.join(d, 'full.h5')
    with h5py.File(full, 'w') as f:
        f.create_dataset('contig', data=data)
        off = f['contig'].id.get_offset()
    blob = open(full, 'rb').read()
    os.unlink(full)
    cut = off + data.nbytes // 2
    with open(osp.join(d, 'cut.h5'), 'wb') as f:
        f.write(blob[:cut])
    m = tl.Mount(d)
    try:
        names = os.listdir(m.path('cut.h5'))
        assert 'contig.raw' in names, names
        fd = os.open(m.path('cut.h5', 'contig.raw'), os.O_RDONLY)
        try:
            half = data.nbytes // 2
            want = data.tobytes()
            assert os.pread(fd, 4096, 0) == want[:4096]
            got = os.pread(fd, 8192, half - 4096)  # across the cut: what lies before it, at most
            assert got == want[half - 4096:half - 4096 + len(got)] and len(got) <= 4096
            with pytest.raises(OSError) as e:  # past the cut
                os.pread(fd, 4096, half + 8192)
            assert e.value.errno == 5
        finally:
            os.close(fd)
        assert m.proc.poll() is None
    finally:
        m.close()


def test_vds_of_whole_rows_splices_from_its_sources_and_others_are_read():
    d = tl.make_tmpdir('splice-vds-')
    rng = np.random.default_rng(8)
    data = rng.integers(0, 60000, size=(120,) + FRAME, dtype='<u2')
    bounds = [0, 30, 75, 120]
    layouts = {'cat': h5py.VirtualLayout(shape=data.shape, dtype=data.dtype),
               'gap': h5py.VirtualLayout(shape=(130,) + FRAME, dtype=data.dtype),   # rows 120+: fill
               'gz': h5py.VirtualLayout(shape=data.shape, dtype=data.dtype)}
    for i in range(3):
        a, b = bounds[i], bounds[i + 1]
        p = osp.join(d, f'part{i}.h5')
        with h5py.File(p, 'w') as f:
            f.create_dataset('data', data=data[a:b], chunks=(5,) + FRAME if i == 1 else None)
            f.create_dataset('gz', data=data[a:b], chunks=(1,) + FRAME, compression='gzip')
        vs = h5py.VirtualSource(p, 'data', shape=(b - a,) + FRAME)
        layouts['cat'][a:b] = vs
        layouts['gap'][a:b] = vs
        layouts['gz'][a:b] = h5py.VirtualSource(p, 'gz', shape=(b - a,) + FRAME)
    with h5py.File(osp.join(d, 'vds.h5'), 'w') as f:
        for name, lay in layouts.items():
            f.create_virtual_dataset(name, lay, fillvalue=3)
    m = tl.Mount(d)
    try:
        with h5py.File(osp.join(d, 'vds.h5')) as f:
            for name, spliced in [('cat', True), ('gap', None), ('gz', False)]:
                exp = f[name][()]
                before = m.stats()['bytes_spliced']
                raw = m.path('vds.h5', name + '.raw')
                assert read_in_pieces(raw) == exp.tobytes(), name
                got = m.stats()['bytes_spliced'] - before
                if spliced is True:
                    assert got == exp.nbytes, (name, got)
                elif spliced is False:
                    assert got == 0, (name, got)
                tl.check_dataset_files(m.path('vds.h5'), name, exp)
        row = FRAME[0] * FRAME[1] * 2
        fd = os.open(m.path('vds.h5', 'gap.raw'), os.O_RDONLY)
        try:  # a read across the last source and the fill rows is read, and right
            got = os.pread(fd, 20 * row, 110 * row)
            with h5py.File(osp.join(d, 'vds.h5')) as f:
                assert got == f['gap'][110:130].tobytes()
        finally:
            os.close(fd)
    finally:
        m.close()


def test_detector_stacks_splice_from_their_module_files():
    """A frames-first stack of 4 JUNGFRAU modules (2 sequence files each): a read spans the
    modules' files, one run per module and frame, and is spliced from all of them when the
    runs fit one reply; the bytes are the modules' data side by side (h5py, module files)."""
    import euxfel_mock
    d = tl.make_tmpdir('splice-stack-')
    run = osp.join(d, 'r0001')
    w = euxfel_mock.RunWriter(run, run_number=1, keep_data=False)
    frame = (1,) + FRAME
    n, bounds = 40, [0, 15, 40]
    data = np.random.default_rng(21).integers(0, 60000, size=(4, n) + frame, dtype='<u2')
    for m in range(4):
        key = euxfel_mock.Key('data.adc', '<u2', frame, chunks=(1,) + frame,
                              make=lambda tids, js, m=m: data[m][np.asarray(tids, np.int64) - 10000])
        src = euxfel_mock.Source(f'SPB_IRDA_JF4M/DET/JNGFR{m + 1:02d}:daqOutput', 'INSTRUMENT',
                                 [euxfel_mock.Group('data', [key], lambda t: 1, pad_to=4)])
        for s in range(2):
            w.write_file(f'JNGFR{m + 1:02d}', s, [src], list(range(10000 + bounds[s], 10000 + bounds[s + 1])))
    exp = np.ascontiguousarray(data[:, :, 0].transpose(1, 0, 2, 3))  # (frames, modules) + FRAME
    for _ in range(3):  # as above: bytes evicted meanwhile are read, not spliced
        for f in os.listdir(run):
            with open(osp.join(run, f), 'rb') as fh:
                fh.read()
        m = tl.Mount(run)
        try:
            raw = m.path('SPB_IRDA_JF4M', 'frames_first', 'data.adc.raw')
            assert read_in_pieces(raw) == exp.tobytes()
            assert np.array_equal(np.load(m.path('SPB_IRDA_JF4M', 'frames_first', 'data.adc.npy'),
                                          mmap_mode='r'), exp)
            s = m.stats()
        finally:
            m.close()
        if s['bytes_spliced'] >= exp.nbytes:
            break
        assert s['splice_cold'] > 0, s
    assert s['bytes_spliced'] >= exp.nbytes, s
    # A request of 1 MiB spans 60 module frames of 16 KiB: more runs than one reply's pipe holds
    # (a page each beyond the bytes): read and copied instead, the same bytes.
    m = tl.Mount(run)
    try:
        fd = os.open(m.path('SPB_IRDA_JF4M', 'frames_first', 'data.adc.raw'), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            assert os.pread(fd, 1 << 20, 0) == exp.tobytes()[:1 << 20]
        finally:
            os.close(fd)
        s = m.stats()
        assert s['splice_fragmented'] > 0, s
    finally:
        m.close()
