"""Damaged files through a mount: a corrupt chunk of every filter h5py can write here, chunk
indexes pointing outside the file or looping, damaged object headers, truncated files. A read
touching damage fails with EIO and one log line (per failed request) naming the file, the
dataset and the chunk; everything else stays readable and equal to h5py; the daemon stays up.
No read returns bytes that differ from what libhdf5 returns."""
import errno
import os
import os.path as osp
import struct

import h5py
import hdf5plugin
import numpy as np
import pytest

import h5d_testlib as tl

NCHUNKS = 48
CHUNK = 2048            # elements of <i4: 8 KiB per chunk
BAD = 5                 # the chunk we damage

FILTERS = {
    'gzip': dict(compression='gzip'),
    'shuffle_gzip': dict(compression='gzip', shuffle=True),
    'fletcher32': dict(fletcher32=True),
    'gzip_fletcher32': dict(compression='gzip', fletcher32=True),
    'lzf': dict(compression='lzf'),
    'blosc': dict(**hdf5plugin.Blosc(cname='lz4', clevel=5)),
    'blosc_zstd_bitshuffle': dict(**hdf5plugin.Blosc(cname='zstd', clevel=3,
                                                     shuffle=hdf5plugin.Blosc.BITSHUFFLE)),
    'lz4': dict(**hdf5plugin.LZ4()),
    'bitshuffle_lz4': dict(**hdf5plugin.Bitshuffle()),
    'zstd': dict(**hdf5plugin.Zstd()),
}


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return (np.arange(NCHUNKS * CHUNK) % 1000 + rng.integers(0, 50, NCHUNKS * CHUNK)).astype('<i4')


def _write(path, **filt):
    with h5py.File(path, 'w') as f:
        f['good'] = np.arange(5000, dtype='<u2')
        f.create_dataset('other', data=_data(1), chunks=(CHUNK,), compression='gzip')
        f.create_dataset('data', data=_data(), chunks=(CHUNK,), **filt)
        return {i: f['data'].id.get_chunk_info(i) for i in range(NCHUNKS)}


def _patch(path, off, data):
    with open(path, 'r+b') as fh:
        fh.seek(off)
        fh.write(data)


def _h5py_chunk(path, k):
    """What libhdf5 returns for chunk k of /data: the array, or the exception."""
    try:
        with h5py.File(path, 'r') as f:
            return f['data'][k * CHUNK:(k + 1) * CHUNK]
    except Exception as e:  # noqa: BLE001 - any libhdf5 failure
        return e


def _error_lines(m):
    return [ln for ln in m.log().splitlines() if 'error' in ln.lower()]


def _check_eio_logged(m, fname, dset, chunk_word='chunk'):
    """Every failure so far has exactly one log line (the kernel's repeats of a failed read are
    EIO replies without one), and each names file, dataset, chunk."""
    s = m.stats()
    n_eio = s['error_replies'].get('EIO', 0)
    lines = _error_lines(m)
    assert n_eio >= 1, m.log()
    assert len(lines) == s['errors_reported'] <= n_eio, (s['errors_reported'], n_eio, lines)
    for ln in lines:
        assert fname in ln and dset in ln and chunk_word in ln, ln


def _check_rest_readable(m, src, dset_dir=()):
    with h5py.File(src, 'r') as f:
        good, other = f['good'][()], f['other'][()]
    np.testing.assert_array_equal(np.load(m.path(*dset_dir, 'good.npy')), good)
    np.testing.assert_array_equal(np.load(m.path(*dset_dir, 'other.npy')), other)
    assert m.proc.poll() is None, 'the daemon died'


def _pread_chunk(path, k, itemsize=4):
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, CHUNK * itemsize, k * CHUNK * itemsize)
    finally:
        os.close(fd)


def _filter_ids(kw):
    if 'compression' in kw and isinstance(kw['compression'], int):
        return [kw['compression']]
    return []


@pytest.mark.parametrize('filt', sorted(FILTERS))
def test_corrupt_chunk_of_every_filter(filt, mount):
    for fid in _filter_ids(FILTERS[filt]):
        if not h5py.h5z.filter_avail(fid):
            pytest.skip(f'HDF5 filter {fid} is not available to h5py here (hdf5plugin build)')
    d = tl.make_tmpdir('rel-filt-')
    p = osp.join(d, f'{filt}.h5')
    chunks = _write(p, **FILTERS[filt])
    expected = _data()
    info = chunks[BAD]
    # Garbage over the start of the stored chunk: headers, sizes, checksummed bytes.
    _patch(p, info.byte_offset, bytes([0xA5]) * min(16, info.size))
    lib = _h5py_chunk(p, BAD)
    m = mount(p)
    raw = m.path('data.raw')
    if isinstance(lib, Exception):
        with pytest.raises(OSError) as e:
            _pread_chunk(raw, BAD)
        assert e.value.errno == errno.EIO
        _check_eio_logged(m, f'{filt}.h5', '/data', f'chunk ({BAD})')
    else:  # no integrity check in this pipeline: we must return what the library returns
        try:
            got = np.frombuffer(_pread_chunk(raw, BAD), '<i4')
            np.testing.assert_array_equal(got, lib)
        except OSError as e:
            assert e.errno == errno.EIO
    # Every other chunk of the damaged dataset reads like h5py's, through read() and mmap.
    for k in [0, BAD - 1, BAD + 1, NCHUNKS - 1]:
        got = np.frombuffer(_pread_chunk(raw, k), '<i4')
        np.testing.assert_array_equal(got, expected[k * CHUNK:(k + 1) * CHUNK])
    mm = np.load(m.path('data.npy'), mmap_mode='r')
    np.testing.assert_array_equal(mm[(BAD + 2) * CHUNK:], expected[(BAD + 2) * CHUNK:])
    del mm
    _check_rest_readable(m, p)
    # A later read of the bad chunk fails again (errors are not cached as data, nor as success).
    if isinstance(lib, Exception):
        with pytest.raises(OSError):
            _pread_chunk(raw, BAD)
        _check_eio_logged(m, f'{filt}.h5', '/data', f'chunk ({BAD})')


def _replace_address(path, old, new):
    """Replaces every 8-byte little-endian occurrence of address `old` in the file (the chunk
    index records that point at a chunk). Returns how many were replaced."""
    with open(path, 'rb') as fh:
        b = bytearray(fh.read())
    pat = struct.pack('<Q', old)
    n = 0
    i = b.find(pat)
    while i >= 0:
        b[i:i + 8] = struct.pack('<Q', new)
        n += 1
        i = b.find(pat, i + 8)
    with open(path, 'wb') as fh:
        fh.write(b)
    return n


@pytest.mark.parametrize('libver', ['earliest', 'latest'])
def test_chunk_index_pointing_outside_the_file(libver, mount):
    d = tl.make_tmpdir('rel-idx-')
    p = osp.join(d, 'idx.h5')
    with h5py.File(p, 'w', libver=libver) as f:
        f['good'] = np.arange(5000, dtype='<u2')
        f.create_dataset('other', data=_data(1), chunks=(CHUNK,), compression='gzip')
        # unfiltered chunks: the index is the only thing that says where the bytes are
        f.create_dataset('data', data=_data(), chunks=(CHUNK,), maxshape=(None,))
        info = f['data'].id.get_chunk_info(BAD)
    size = os.path.getsize(p)
    assert _replace_address(p, info.byte_offset, size + (1 << 30)) >= 1
    assert isinstance(_h5py_chunk(p, BAD), Exception)
    m = mount(p)
    # The index is read (and checked: bounds, loops, checksums) as a whole when the dataset is
    # first read: a damaged index makes its dataset fail with EIO, every read of it alike.
    for k in (BAD, 0):
        with pytest.raises(OSError) as e:
            _pread_chunk(m.path('data.raw'), k)
        assert e.value.errno == errno.EIO
    _check_eio_logged(m, 'idx.h5', '/data', 'chunk index')
    _check_rest_readable(m, p)


def test_chunk_btree_looping_on_itself(mount):
    """A v1 B-tree internal node whose child pointer points back at itself: the chunk index
    parser must fail (EIO), not loop; the rest of the file stays readable."""
    d = tl.make_tmpdir('rel-loop-')
    p = osp.join(d, 'loop.h5')
    n = 600  # > 2*K(32) chunks: a two-level v1 B-tree
    data = np.arange(n * 64, dtype='<i4')
    with h5py.File(p, 'w', libver='earliest') as f:
        f['good'] = np.arange(5000, dtype='<u2')
        f.create_dataset('other', data=_data(1), chunks=(CHUNK,), compression='gzip')
        f.create_dataset('data', data=data, chunks=(64,))
    with open(p, 'rb') as fh:
        b = bytearray(fh.read())
    # Find a level-1 "TREE" node of type 1 (chunks): signature, type, level, entries, siblings.
    pos = b.find(b'TREE')
    root = None
    while pos >= 0:
        if b[pos + 4] == 1 and b[pos + 5] >= 1:
            root = pos
            break
        pos = b.find(b'TREE', pos + 4)
    assert root is not None
    # keys of a rank-1 chunk B-tree: chunk size (4) + filter mask (4) + 2 offsets (8 each) = 24
    first_child = root + 4 + 1 + 1 + 2 + 8 + 8 + 24
    b[first_child:first_child + 8] = struct.pack('<Q', root)
    with open(p, 'wb') as fh:
        fh.write(b)
    m = mount(p)
    with pytest.raises(OSError) as e:
        _pread_chunk(m.path('data.raw'), 0, itemsize=4)
    assert e.value.errno == errno.EIO
    _check_eio_logged(m, 'loop.h5', '/data', 'chunk index')
    _check_rest_readable(m, p)


def test_damaged_object_header(mount):
    """A dataset whose object header is garbage: libhdf5 cannot open it, so it shows only its
    NAME.json with an 'error' member (or its listing fails with EIO); the other datasets of the
    file read like h5py; the daemon stays up."""
    d = tl.make_tmpdir('rel-ohdr-')
    p = osp.join(d, 'ohdr.h5')
    with h5py.File(p, 'w', libver='latest') as f:
        f['good'] = np.arange(5000, dtype='<u2')
        f.create_dataset('other', data=_data(1), chunks=(CHUNK,), compression='gzip')
        f.create_dataset('data', data=_data(), chunks=(CHUNK,), compression='gzip')
        addr = h5py.h5o.get_info(f['data'].id).addr
    with open(p, 'rb') as fh:
        head = fh.read(addr + 4)
    assert head[addr:addr + 4] == b'OHDR'
    _patch(p, addr + 6, b'\xff' * 40)  # flags, times, sizes, messages: the checksum fails
    with h5py.File(p, 'r') as f:
        with pytest.raises(Exception):
            f['data'][()]
    m = mount(p)
    names = os.listdir(m.mnt)
    assert 'good.npy' in names and 'other.npy' in names
    if 'data.raw' in names:
        with pytest.raises(OSError) as e:
            open(m.path('data.raw'), 'rb').read()
        assert e.value.errno == errno.EIO
    elif 'data.json' in names:
        import json
        assert 'error' in json.load(open(m.path('data.json')))
    _check_rest_readable(m, p)


def test_truncated_file_in_a_tree(mount):
    """A truncated file, which libhdf5 (and h5py) refuse as a whole: what lies before the cut
    reads as h5py reads the original (its other datasets, the chunks of `data` before the cut),
    each chunk past the cut gives EIO with one log line naming the file, the dataset and the
    chunk; the other files of the tree read normally. (test_truncated.py: every layout and chunk
    index, cuts anywhere.)"""
    d = tl.make_tmpdir('rel-trunc-')
    _write(osp.join(d, 'ok.h5'), compression='gzip')
    bad = osp.join(d, 'cut.h5')
    infos = _write(bad, compression='gzip')
    with h5py.File(bad, 'r') as f:
        good, other = f['good'][()], f['other'][()]
    half = NCHUNKS // 2
    assert all(infos[k].byte_offset < infos[half].byte_offset for k in range(half))
    os.truncate(bad, infos[half].byte_offset + infos[half].size // 2)  # through chunk `half`
    with pytest.raises(Exception):
        with h5py.File(bad, 'r') as f:
            f['data'][()]
    m = mount(d)
    assert sorted(os.listdir(m.mnt)) == ['.h5direct', 'cut.h5', 'ok.h5']
    assert {'data.npy', 'good.npy', 'other.npy'} <= set(os.listdir(m.path('cut.h5')))
    np.testing.assert_array_equal(np.load(m.path('cut.h5', 'good.npy')), good)
    np.testing.assert_array_equal(np.load(m.path('cut.h5', 'other.npy')), other)
    want = _data()
    for k in range(NCHUNKS):
        if k < half:
            got = np.frombuffer(_pread_chunk(m.path('cut.h5', 'data.raw'), k), '<i4')
            np.testing.assert_array_equal(got, want[k * CHUNK:(k + 1) * CHUNK])
        else:
            with pytest.raises(OSError) as e:
                _pread_chunk(m.path('cut.h5', 'data.raw'), k)
            assert e.value.errno == errno.EIO
    _check_eio_logged(m, 'cut.h5', '/data')
    assert all('past the end of the file' in ln for ln in _error_lines(m))
    _check_rest_readable(m, osp.join(d, 'ok.h5'), ('ok.h5',))
    np.testing.assert_array_equal(np.load(m.path('ok.h5', 'data.npy')), _data())
