"""Datasets of every kind, mounted and read back through .npy (np.load, mmap), .raw (np.memmap)
and plain reads at random offsets, compared with h5py's dset[()]."""
import json
import os
import os.path as osp

import h5py
import hdf5plugin
import numpy as np
import pytest

import h5d_testlib as tl

RNG = np.random.default_rng(12345)


def _ints(dt, shape):
    info = np.iinfo(dt)
    return RNG.integers(info.min, info.max, size=shape, dtype=np.dtype(dt).newbyteorder('='),
                        endpoint=True).astype(dt)


def _compact(f, name, data):
    space = h5py.h5s.create_simple(data.shape)
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_layout(h5py.h5d.COMPACT)
    tid = h5py.h5t.py_create(data.dtype, logical=True)
    d = h5py.h5d.create(f.id, name.encode(), tid, space, dcpl=dcpl)
    d.write(h5py.h5s.ALL, h5py.h5s.ALL, data)


def write_main(path, libver):
    """Returns the names (dataset paths) written."""
    names = []
    with h5py.File(path, 'w', libver=libver) as f:
        def put(name, data=None, **kw):
            f.create_dataset(name, data=data, **kw)
            names.append(name)

        # dtypes
        for order, tag in (('<', 'le'), ('>', 'be')):
            for w in (1, 2, 4, 8):
                for k in 'iu':
                    dt = (order if w > 1 else '|') + k + str(w)
                    if w == 1 and order == '>':
                        continue
                    put(f'dtypes/{k}{w}_{tag}', _ints(dt, (5, 7)))
            for w in (2, 4, 8):
                put(f'dtypes/f{w}_{tag}', RNG.normal(size=(6, 5)).astype(order + f'f{w}'))
            for w in (8, 16):
                c = (RNG.normal(size=9) + 1j * RNG.normal(size=9)).astype(order + f'c{w}')
                put(f'dtypes/c{w}_{tag}', c)
        put('dtypes/bool', RNG.integers(0, 2, 17).astype(bool))
        put('dtypes/S5', np.array([b'abc', b'de', b'', b'fghij'], dtype='S5'))
        put('dtypes/enum', np.array([0, 1, 1, 0, 2], dtype='i1'),
            dtype=h5py.enum_dtype({'RED': 0, 'GREEN': 1, 'BLUE': 2}, basetype='i1'))
        simple = np.dtype([('a', '<i4'), ('b', '<f8')])
        put('dtypes/compound', np.array([(i, i / 3) for i in range(11)], dtype=simple))
        nested = np.dtype([('p', [('x', '<f4'), ('y', '>f4')]), ('id', '<u8')])
        put('dtypes/compound_nested', np.array([((i, -i), 100 + i) for i in range(6)], dtype=nested))
        arrm = np.dtype([('v', '<f4', (3,)), ('n', '<i2'), ('m', '<u1', (2, 2))])
        a = np.zeros(4, arrm)
        a['v'] = RNG.normal(size=(4, 3))
        a['n'] = [1, -2, 3, -4]
        a['m'] = np.arange(16).reshape(4, 2, 2)
        put('dtypes/compound_array_members', a)
        padded = np.dtype({'names': ['a', 'b'], 'formats': ['<i1', '<i8'], 'offsets': [0, 8],
                           'itemsize': 24})
        p = np.zeros(5, padded)
        p['a'] = [1, 2, 3, 4, 5]
        p['b'] = [10, 20, 30, 40, 50]
        put('dtypes/compound_padded', p)
        d = f.create_dataset('dtypes/array_type', shape=(4,), dtype=np.dtype(('<i4', (2, 3))))
        d[...] = np.arange(24, dtype='<i4').reshape(4, 2, 3)
        names.append('dtypes/array_type')
        # shapes
        put('shapes/scalar', np.float64(2.5))
        put('shapes/scalar_i2', np.int16(-7))
        put('shapes/d1', np.arange(10, dtype='<i8'))
        put('shapes/d2', np.arange(12, dtype='<f4').reshape(3, 4))
        put('shapes/d3', np.arange(60, dtype='>u2').reshape(3, 4, 5))
        put('shapes/d4', np.arange(240, dtype='<i4').reshape(2, 3, 4, 10))
        put('shapes/empty1', np.zeros((0,), '<f8'))
        put('shapes/empty3', np.zeros((3, 0, 2), '<u2'))
        put('shapes/empty_chunked', shape=(0, 4), maxshape=(None, 4), dtype='<i4', chunks=(8, 4))
        # layouts
        big = RNG.integers(0, 1000, size=(100, 37)).astype('<u2')
        put('layouts/contiguous', big)
        put('layouts/chunked_edges', big, chunks=(16, 10))
        _compact(f, 'layouts/compact', np.arange(20, dtype='<i2'))
        names.append('layouts/compact')
        put('layouts/never_written', shape=(30, 20), dtype='<i4', chunks=(8, 8), fillvalue=7)
        put('layouts/never_written_nofill', shape=(9,), dtype='<f4', chunks=(4,))
        d = f.create_dataset('layouts/partial', shape=(40, 30), dtype='<f8', chunks=(8, 8),
                             fillvalue=-1.5)
        d[5:13, 3:9] = np.arange(48).reshape(8, 6)
        d[39, 29] = 42
        names.append('layouts/partial')
        put('layouts/unlimited', np.arange(50, dtype='<i4').reshape(5, 10), maxshape=(None, 10),
            chunks=(2, 4))
        f['layouts/unlimited'].resize((7, 10))
        f['layouts/unlimited'][5:] = 99
        # filters
        data = (np.arange(64 * 333, dtype='<u2') % 4096).reshape(64, 333)
        put('filters/gzip', data, chunks=(16, 50), compression='gzip', compression_opts=4)
        put('filters/shuffle_gzip', data, chunks=(16, 50), compression='gzip', shuffle=True)
        put('filters/fletcher32', data, chunks=(16, 50), fletcher32=True)
        put('filters/shuffle_gzip_fletcher', data.astype('<f4'), chunks=(10, 64),
            compression='gzip', shuffle=True, fletcher32=True)
        put('filters/lzf', data, chunks=(16, 50), compression='lzf')
        put('filters/blosc', data, chunks=(16, 50), **hdf5plugin.Blosc(cname='lz4', clevel=5))
        put('filters/blosc_zstd_bitshuffle', data, chunks=(16, 50),
            **hdf5plugin.Blosc(cname='zstd', clevel=3, shuffle=hdf5plugin.Blosc.BITSHUFFLE))
        put('filters/lz4', data, chunks=(16, 50), **hdf5plugin.LZ4())
        # bzip2 (307) has no direct decoder: read through the library (plugin path set below)
        put('filters/bzip2', data, chunks=(16, 50), **hdf5plugin.BZip2())
        put('filters/scaleoffset', data.astype('<i4'), chunks=(16, 50), scaleoffset=0)
        put('filters/gzip_big_endian', data.astype('>i8'), chunks=(7, 100), compression='gzip')
        # a larger one, for sequential reads and prefetch
        put('big/frames', (np.arange(600 * 256 * 64, dtype='<u2') % 1000).reshape(600, 256, 64),
            chunks=(8, 256, 64), compression='gzip', compression_opts=1, shuffle=True)
        # nested groups and links
        put('a/b/c/d/deep', np.arange(3, dtype='<i2'))
        f['links/soft_dset'] = h5py.SoftLink('/shapes/d2')
        f['links/soft_group'] = h5py.SoftLink('/a/b')
        f['links/dangling'] = h5py.SoftLink('/nowhere')
        f['links/external'] = h5py.ExternalLink('ext.h5', '/e')
        f['links/external_dangling'] = h5py.ExternalLink('missing.h5', '/e')
        # not arrays
        f.create_dataset('strings/vlen', data=['alpha', 'beta', 'γάμμα'], dtype=h5py.string_dtype())
        f.create_dataset('strings/vlen_scalar', data='hello', dtype=h5py.string_dtype())
        f['shapes/d1'].attrs['units'] = 'mm'
        f['shapes/d1'].attrs['scale'] = 0.5
        f['shapes/d1'].attrs['vec'] = np.arange(3)
    return names


@pytest.fixture(scope='module')
def src():
    d = tl.make_tmpdir('basic-src-')
    latest = write_main(osp.join(d, 'latest.h5'), 'latest')
    earliest = write_main(osp.join(d, 'earliest.h5'), 'earliest')
    with h5py.File(osp.join(d, 'ext.h5'), 'w') as f:
        f['e'] = np.arange(6, dtype='<f4')
    with h5py.File(osp.join(d, 'userblock.data'), 'w', userblock_size=512) as f:
        f['x'] = np.arange(10, dtype='<i4')
        f.create_dataset('c', data=np.arange(1000, dtype='<f8'), chunks=(100,), compression='gzip')
    with open(osp.join(d, 'notes.txt'), 'w') as f:
        f.write('not hdf5')
    return {'dir': d, 'names': {'latest': latest, 'earliest': earliest}}


@pytest.fixture(scope='module')
def mnt(src):
    # bzip2 is read through libhdf5, which finds Debian's plugins in its default plugin path.
    m = tl.Mount(src['dir'])
    yield m
    m.close()


def _expected(path, name):
    with h5py.File(path, 'r') as f:
        d = f[name]
        if d.shape is None:
            return None
        return d[()]


def _all_names(libver):
    # names are the same for both files; computed without writing
    return NAMES


NAMES = []  # filled below at collection time from a dry run


def _collect_names():
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        return write_main(osp.join(t, 'n.h5'), 'latest')


NAMES = _collect_names()


@pytest.mark.parametrize('libver', ['latest', 'earliest'])
@pytest.mark.parametrize('name', NAMES)
def test_dataset_matches_h5py(src, mnt, libver, name):
    path = osp.join(src['dir'], libver + '.h5')
    expected = _expected(path, name)
    side = tl.check_dataset_files(mnt.path(libver + '.h5', osp.dirname(name)),
                                  osp.basename(name), expected)
    assert side['file'] == path
    assert side['path'] == '/' + name
    with h5py.File(path, 'r') as f:
        d = f[name]
        assert side['layout'] in ('contiguous', 'chunked', 'compact', 'virtual')
        if d.chunks:
            assert side['layout'] == 'chunked' and side['chunks'] == list(d.chunks)
            assert side['chunk_index']
        # array element types are folded into the shape (and maxshape) as trailing dimensions
        assert list(d.maxshape) == side['maxshape'][:len(d.maxshape)]
        if d.compression == 'gzip':
            assert any(flt['id'] == 1 for flt in side['filters'])


def test_sidecar_details(src, mnt):
    side = json.load(open(mnt.path('latest.h5', 'shapes', 'd1.json')))
    assert side['dtype'] == '<i8'
    assert side['attrs']['units'] == 'mm'
    assert side['attrs']['scale'] == 0.5
    assert side['attrs']['vec'] == [0, 1, 2]
    assert side['read_path'] == 'direct'
    side = json.load(open(mnt.path('latest.h5', 'layouts', 'never_written.json')))
    assert side['fill_value'] == 7
    side = json.load(open(mnt.path('latest.h5', 'filters', 'shuffle_gzip.json')))
    assert [flt['id'] for flt in side['filters']] == [2, 1]
    for flt in side['filters']:
        assert set(flt) >= {'id', 'name', 'cd_values', 'flags'}
    side = json.load(open(mnt.path('latest.h5', 'dtypes', 'compound_padded.json')))
    assert side['dtype'] == [['a', '|i1'], ['', '|V7'], ['b', '<i8'], ['', '|V8']]
    side = json.load(open(mnt.path('latest.h5', 'filters', 'scaleoffset.json')))
    assert 'read_path' in side


def test_library_fallback_is_reported(src, mnt):
    side = json.load(open(mnt.path('latest.h5', 'filters', 'bzip2.json')))
    assert side['read_path'].startswith('library')
    assert side['direct'] is False
    assert side['fallback_reason']
    np.load(mnt.path('latest.h5', 'filters', 'bzip2.npy'))
    stats = mnt.stats()
    assert sum(stats['fallbacks'].values()) >= 1 or stats['library_reads'] >= 1


def test_vlen_strings_only_json(mnt):
    d = mnt.path('latest.h5', 'strings')
    assert sorted(os.listdir(d)) == ['.attrs.json', 'vlen.json', 'vlen_scalar.json']
    side = json.load(open(osp.join(d, 'vlen.json')))
    assert side['is_array'] is False
    assert side['why_not_array']
    assert side['value'] == ['alpha', 'beta', 'γάμμα']
    assert json.load(open(osp.join(d, 'vlen_scalar.json')))['value'] == 'hello'


def test_tree_shape(src, mnt):
    assert sorted(os.listdir(mnt.mnt)) == ['.h5direct', 'earliest.h5', 'ext.h5', 'latest.h5',
                                           'userblock.data']
    assert osp.isdir(mnt.path('userblock.data'))
    top = sorted(os.listdir(mnt.path('latest.h5')))
    assert top == ['.attrs.json', 'a', 'big', 'dtypes', 'filters', 'layouts', 'links', 'shapes',
                   'strings']
    assert os.listdir(mnt.path('latest.h5', 'a', 'b', 'c', 'd')) == sorted(
        ['.attrs.json', 'deep.npy', 'deep.raw', 'deep.json'])
    links = sorted(os.listdir(mnt.path('latest.h5', 'links')))
    assert links == ['.attrs.json', 'external.json', 'external.npy', 'external.raw', 'soft_dset.json',
                     'soft_dset.npy', 'soft_dset.raw', 'soft_group']
    assert sorted(os.listdir(mnt.path('latest.h5', 'links', 'soft_group'))) == ['.attrs.json', 'c']


def test_links_are_followed(src, mnt):
    np.testing.assert_array_equal(np.load(mnt.path('latest.h5', 'links', 'soft_dset.npy')),
                                  np.arange(12, dtype='<f4').reshape(3, 4))
    np.testing.assert_array_equal(np.load(mnt.path('latest.h5', 'links', 'external.npy')),
                                  np.arange(6, dtype='<f4'))
    np.testing.assert_array_equal(
        np.load(mnt.path('latest.h5', 'links', 'soft_group', 'c', 'd', 'deep.npy')), [0, 1, 2])


def test_user_block_file(src, mnt):
    tl.check_dataset_files(mnt.path('userblock.data'), 'x', np.arange(10, dtype='<i4'))
    tl.check_dataset_files(mnt.path('userblock.data'), 'c', np.arange(1000, dtype='<f8'))


def test_big_sequential_and_mmap(src, mnt):
    path = osp.join(src['dir'], 'latest.h5')
    expected = _expected(path, 'big/frames')
    p = mnt.path('latest.h5', 'big', 'frames.npy')
    m = np.load(p, mmap_mode='r')
    assert values_equal_sum(m, expected)
    with open(p, 'rb') as f:
        chunks = []
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            chunks.append(b)
    content = b''.join(chunks)
    assert len(content) == os.stat(p).st_size
    side = json.load(open(mnt.path('latest.h5', 'big', 'frames.json')))
    assert content[side['npy_data_offset']:] == expected.tobytes()
    stats = mnt.stats()
    assert stats['bytes_served'] >= expected.nbytes
    assert stats['chunks_decoded'] >= 600 // 8
    assert stats['decode_seconds'] > 0
    # every decode wrote into one buffer, and every merged request of adjacent chunks read into
    # one, recycled or touched ahead (reused) or new (fresh)
    buffers = stats['decode_buffers']
    assert buffers['reused'] + buffers['fresh'] == stats['chunks_decoded'] + stats['merged_requests'], stats


def values_equal_sum(m, expected):
    return int(np.asarray(m, dtype=np.int64).sum()) == int(expected.astype(np.int64).sum()) and \
        np.array_equal(m[::37], expected[::37])
