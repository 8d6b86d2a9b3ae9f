"""Truncated files are served beyond h5py: where the superblock and the metadata a dataset needs
lie before the cut, its chunks before the cut read as h5py reads them in the untruncated file,
and only the chunks past the cut give EIO (with a log line naming file, dataset and chunk).
libhdf5 (and so h5py) refuses such a file as a whole.

The oracle is h5py on the original file: its bytes, and where each chunk lies (get_chunk_info,
get_offset). A cut after every byte of metadata must serve exactly the pieces whose chunks all
end before it; any other cut (random ones, through metadata) must give h5py's bytes or EIO.
"""
import errno
import os
import os.path as osp

import h5py
import numpy as np
import pytest

from h5d_testlib import Mount, make_tmpdir

SEED = 20261202
SHAPE = (48, 32, 64)  # u2: one row of axis 0 is 4096 bytes, so pieces are whole pages
ROW = 32 * 64 * 2


def _implicit(f, name, data, chunks):
    """A chunked dataset with early allocation (libver latest, fixed shape, no filter): the
    implicit chunk index."""
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk(chunks)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    sid = h5py.h5s.create_simple(data.shape)
    dsid = h5py.h5d.create(f.id, name.encode(), h5py.h5t.STD_U16LE, sid, dcpl=dcpl)
    dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, data)


# name: (libver, create(f, data)); the dataset under test, 'target', is written last.
LAYOUTS = {
    'contiguous': ('earliest', lambda f, d: f.create_dataset('target', data=d)),
    'btree1': ('earliest', lambda f, d: f.create_dataset('target', data=d, chunks=(4, 32, 64))),
    'btree1_gzip': ('earliest', lambda f, d: f.create_dataset('target', data=d, chunks=(4, 32, 64),
                                                              compression='gzip', shuffle=True)),
    'btree1_lzf_half_rows': ('earliest', lambda f, d: f.create_dataset('target', data=d, chunks=(8, 16, 64),
                                                                       compression='lzf')),
    'fixed_array': ('latest', lambda f, d: f.create_dataset('target', data=d, chunks=(4, 32, 64))),
    'fixed_array_gzip': ('latest', lambda f, d: f.create_dataset('target', data=d, chunks=(4, 32, 64),
                                                                 compression='gzip', fletcher32=True)),
    'extensible_array': ('latest', lambda f, d: f.create_dataset('target', data=d, chunks=(4, 32, 64),
                                                                 maxshape=(None, 32, 64))),
    'btree2_gzip': ('latest', lambda f, d: f.create_dataset('target', data=d, chunks=(4, 32, 64),
                                                            maxshape=(None, None, 64), compression='gzip')),
    'single_chunk_gzip': ('latest', lambda f, d: f.create_dataset('target', data=d, chunks=SHAPE,
                                                                  compression='gzip')),
    'implicit': ('latest', lambda f, d: _implicit(f, 'target', d, (4, 32, 64))),
}


def write_original(path, libver, create, rng):
    data = rng.integers(0, 4000, SHAPE).astype('<u2')
    with h5py.File(path, 'w', libver=libver) as f:
        f['first'] = rng.random((8, 512))  # 32 KiB of contiguous data before the target
        f.create_dataset('first_gzip', data=rng.integers(0, 9, (16, 32, 64)).astype('<u2'),
                         chunks=(4, 32, 64), compression='gzip')
        create(f, data)


def storage(path):
    """Per dataset: its h5py bytes, the row block of a piece, and per piece the file end of the
    last byte it needs (from h5py's chunk info)."""
    out = {}
    with h5py.File(path, 'r') as f:
        for name, d in f.items():
            arr = d[()]
            row = arr[0].nbytes
            if d.chunks:
                rows = d.chunks[0]
                ends = {}
                for i in range(d.id.get_num_chunks()):
                    ci = d.id.get_chunk_info(i)
                    b = ci.chunk_offset[0] // rows
                    ends[b] = max(ends.get(b, 0), ci.byte_offset + ci.size)
                data_ranges = [(d.id.get_chunk_info(i).byte_offset, d.id.get_chunk_info(i).size)
                               for i in range(d.id.get_num_chunks())]
            else:
                rows = 4
                off = d.id.get_offset()
                ends = {b: off + min(arr.shape[0], (b + 1) * rows) * row
                        for b in range((arr.shape[0] + rows - 1) // rows)}
                data_ranges = [(off, d.id.get_storage_size())]
            out[name] = {'bytes': arr.tobytes(), 'piece': rows * row, 'ends': ends, 'ranges': data_ranges}
    return out


def metadata_end(size, st):
    """The end of the last bytes that are no dataset's data (superblock, headers, indexes, heaps)."""
    iv = sorted((a, a + n) for d in st.values() for a, n in d['ranges'])
    pos, last = 0, 0
    for a, b in iv:
        if a > pos:
            last = a
        pos = max(pos, b)
    return size if pos < size else last


def read_pieces(path, d):
    """Each piece's bytes through the mount, or (errno, the bytes read before the error): a read
    stops short at the first page that fails, and the next read of it gives the error."""
    out = []
    fd = os.open(path, os.O_RDONLY)
    try:
        for off in range(0, len(d['bytes']), d['piece']):
            n = min(d['piece'], len(d['bytes']) - off)
            got = b''
            while len(got) < n:
                try:
                    b = os.pread(fd, n - len(got), off + len(got))
                except OSError as e:
                    got = (e.errno, got)
                    break
                if not b:
                    got = (0, got)  # end of file inside the array: never right
                    break
                got += b
            out.append(got)
    finally:
        os.close(fd)
    return out


def test_truncated_files_serve_what_lies_before_the_cut():
    rng = np.random.default_rng(SEED)
    orig_dir, src = make_tmpdir('trunc-orig-'), make_tmpdir('trunc-src-')
    cases = []  # (file name, layout, cut, exact)
    originals = {}
    for layout, (libver, create) in LAYOUTS.items():
        p = osp.join(orig_dir, layout + '.h5')
        write_original(p, libver, create, rng)
        st = storage(p)
        originals[layout] = st
        data = open(p, 'rb').read()
        meta_end = metadata_end(len(data), st)
        tgt = sorted(st['target']['ranges'])
        cuts = set()
        for a, n in tgt[len(tgt) // 3:]:  # chunk middles and ends in the last two thirds
            cuts.update([a + n // 2, a + n])
        cuts.discard(len(data))
        cuts.update(int(c) for c in rng.integers(64, len(data), 6))  # anywhere, metadata too
        for cut in sorted(cuts):
            name = f'{layout}_{cut}.h5'
            with open(osp.join(src, name), 'wb') as f:
                f.write(data[:cut])
            cases.append((name, layout, cut, cut >= meta_end))
        # Not vacuous: every layout has cuts after all its metadata, inside the target's data.
        assert sum(1 for c in cases if c[1] == layout and c[3]) >= 2, (layout, meta_end, tgt)

    m = Mount(src)
    wrong, missing, served_past_cut = [], [], 0
    served = {'exact': 0, 'other': 0}
    try:
        for name, layout, cut, exact in cases:
            st = originals[layout]
            try:
                listed = set(os.listdir(m.path(name)))
            except OSError as e:
                assert not exact, f'{name}: listing failed: {os.strerror(e.errno)}'
                assert e.errno in (errno.EIO, errno.ENOENT), (name, e)
                continue
            for dset, d in st.items():
                if dset + '.raw' not in listed:
                    assert not exact, f'{name}: {dset}.raw not listed: {sorted(listed)}'
                    continue
                pieces = read_pieces(m.path(name, dset + '.raw'), d)
                for i, got in enumerate(pieces):
                    want = d['bytes'][i * d['piece']:(i + 1) * d['piece']]
                    intact = d['ends'][i] <= cut
                    if isinstance(got, tuple):
                        assert got[0] == errno.EIO, (name, dset, i, os.strerror(got[0]))
                        if not want.startswith(got[1]):
                            wrong.append(f'{name}:{dset} piece {i}: the bytes before the error differ from h5py')
                        if exact and intact:
                            missing.append(f'{name}:{dset} piece {i}: EIO, but all it needs lies before the cut')
                    elif got != want:
                        wrong.append(f'{name}:{dset} piece {i}: bytes differ from h5py')
                    else:
                        served['exact' if exact else 'other'] += 1
                        if not intact:
                            served_past_cut += 1
        log = m.log()
        assert m.proc.poll() is None, 'the daemon died\n' + log[-3000:]
    finally:
        m.close()
    assert not wrong, '\n'.join(wrong)
    assert not missing, '\n'.join(missing[:20]) + '\n' + log[-3000:]
    # A piece whose chunk lies past the cut cannot have been read from this file.
    assert served_past_cut == 0
    assert served['exact'] > 0
    # The reads past the cut were logged with the file, the dataset and the chunk.
    name = next(n for n, layout, cut, exact in cases if exact and layout == 'btree1_gzip')
    assert any(name in line and '/target' in line and 'chunk (' in line and 'past the end of the file' in line
               for line in log.splitlines()), log[-3000:]
    assert 'truncated' in log


def test_truncated_file_whose_metadata_is_cut_is_eio_not_other_bytes():
    """A cut through the object headers: nothing is served from invented metadata (libhdf5 never
    sees bytes past the cut; a read it needs there fails the whole answer)."""
    d = make_tmpdir('trunc-meta-')
    p = osp.join(d, 'orig.h5')
    rng = np.random.default_rng(SEED + 1)
    write_original(p, 'earliest', LAYOUTS['btree1_gzip'][1], rng)
    st = storage(p)
    data = open(p, 'rb').read()
    src = make_tmpdir('trunc-meta-src-')
    first_data = min(a for v in st.values() for a, n in v['ranges'])
    for cut in range(96, first_data, max(1, first_data // 12)):
        with open(osp.join(src, f'cut_{cut}.h5'), 'wb') as f:
            f.write(data[:cut])
    m = Mount(src)
    try:
        for fn in sorted(os.listdir(src)):
            try:
                names = os.listdir(m.path(fn))
            except OSError as e:
                assert e.errno in (errno.EIO, errno.ENOENT), (fn, e)
                continue
            for dset, v in st.items():
                if dset + '.raw' not in names:
                    continue
                for i, got in enumerate(read_pieces(m.path(fn, dset + '.raw'), v)):
                    want = v['bytes'][i * v['piece']:(i + 1) * v['piece']]
                    if isinstance(got, tuple):
                        assert got[0] == errno.EIO, (fn, dset, i, os.strerror(got[0]))
                        assert want.startswith(got[1]), (fn, dset, i)
                    else:
                        assert got == want, (fn, dset, i)
        assert m.proc.poll() is None, m.log()[-3000:]
    finally:
        m.close()


def test_member_whose_object_header_is_past_the_cut_is_left_out():
    """A dataset added last (a writer appending, then crashing) has its object header at the
    end: cut through it, that member is left out of the listing with a log line (libhdf5 could
    not load it), and the group's other members are served as h5py reads them in the original."""
    d, src = make_tmpdir('trunc-late-'), make_tmpdir('trunc-late-src-')
    p = osp.join(d, 'orig.h5')
    a = np.arange(20000, dtype='<i4')
    with h5py.File(p, 'w', libver='latest') as f:
        f['a'] = a
    with h5py.File(p, 'a', libver='latest') as f:
        f['late'] = np.arange(10, dtype='<i4')
    with h5py.File(p, 'r') as f:
        late_header = h5py.h5o.get_info(f['late'].id).addr
        late_data = f['late'].id.get_offset()
    assert late_header > a.nbytes and late_data > late_header  # both after a's data
    data = open(p, 'rb').read()
    with open(osp.join(src, 'cut.h5'), 'wb') as f:
        f.write(data[:late_header + 40])  # through the header of `late`
    m = Mount(src)
    try:
        names = os.listdir(m.path('cut.h5'))
        assert 'a.npy' in names and not any(n.startswith('late') for n in names), names
        np.testing.assert_array_equal(np.load(m.path('cut.h5', 'a.npy')), a)
        log = m.log()
        assert any('cut.h5:/late' in ln and 'left out' in ln and 'past the end of the truncated file' in ln
                   for ln in log.splitlines()), log
        assert m.proc.poll() is None
    finally:
        m.close()
