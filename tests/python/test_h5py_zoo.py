"""Files written by h5py in ways test_mount_basic.py does not cover, read back through the mount
and compared with h5py (dtype, bytes, np.load, mmap, .raw, random boxes, sidecar): float16,
long double, bitfields, padded and terminated strings, reduced-precision integers, non-IEEE
floats, tagged opaque, big-endian and unusual compounds (huge npy headers too), every chunk index
with odd chunks (bigger than the dataset, one element, not dividing the shape, shrunk after
writing), fill values, filters (gzip 0/9, scale-offset, n-bit, szip, every Blosc compressor and
shuffle, LZ4 blocks, ZFP, skipped filters, unfiltered partial edge chunks), zstd and bitshuffle
chunks encoded here (h5py has no such filter: the oracle is the data written), non-arrays,
attributes and dimension scales, names that need care (long, '..', not UTF-8), 2000 datasets in
a group, track_order, files made differently (4-byte offsets, small B-tree K, paged file space,
SWMR, user block, edited in place, external storage and links), a 16 GB sparse dataset through
mmap, and a cache far smaller than a chunk."""
import ctypes
import ctypes.util
import io
import json
import os
import os.path as osp
import shutil
import struct
import zlib

import h5py
import hdf5plugin
import numpy as np
import pytest

import h5d_testlib as tl

LIBVERS = ('latest', 'earliest')
CASES = []            # (name, builder(f, name, libver), libvers)


def case(name, libvers=LIBVERS):
    def deco(fn):
        CASES.append((name, fn, libvers))
        return fn
    return deco


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def lowlevel(f, name, tid, shape, dcpl=None, maxshape=None):
    """A dataset of HDF5 type `tid` (h5py's high level cannot make it), as an h5py Dataset."""
    space = h5py.h5s.create_simple(shape, maxshape)
    if name.count('/') and name.rsplit('/', 1)[0] not in f:
        f.create_group(name.rsplit('/', 1)[0])
    return h5py.Dataset(h5py.h5d.create(f.id, name.encode(), tid, space, dcpl=dcpl))


def libhdf5():
    """The libhdf5 h5py uses (same process, same handles), for calls h5py does not wrap."""
    for soname in ('libhdf5_serial.so.103', 'libhdf5.so.103', ctypes.util.find_library('hdf5')):
        if soname:
            try:
                return ctypes.CDLL(soname)
            except OSError:
                pass
    return None


# ---------------------------------------------------------------------------------------------
# element types

@case('dtypes/f2_le')
@case('dtypes/f2_be')
def _f2(f, name, libver):
    special = [0, -0.0, 1, -2.5, np.inf, -np.inf, np.nan, 6.1e-5, 6e-8, 65504, -65504]
    data = np.concatenate([special, rng_for(name).normal(size=49) * 100]).astype('f2')
    order = '<' if name.endswith('le') else '>'
    f.create_dataset(name, data=data.reshape(6, 10).astype(order + 'f2'))


@case('dtypes/f2_chunked_shuffle_gzip')
def _f2c(f, name, libver):
    data = (rng_for(name).normal(size=(33, 47)) * 10).astype('<f2')
    data[3, 4] = np.nan
    f.create_dataset(name, data=data, chunks=(8, 10), compression='gzip', shuffle=True)


@case('dtypes/longdouble')
def _f16(f, name, libver):
    data = (np.arange(7, dtype=np.longdouble) / 3) * np.longdouble(1e300) ** 2
    f.create_dataset(name, data=data)


@case('dtypes/bitfield_u8')
@case('dtypes/bitfield_le16')
@case('dtypes/bitfield_be32')
@case('dtypes/bitfield_le64')
def _bitfield(f, name, libver):
    tid, dt = {'u8': (h5py.h5t.STD_B8LE, 'u1'), 'le16': (h5py.h5t.STD_B16LE, '<u2'),
               'be32': (h5py.h5t.STD_B32BE, '>u4'), 'le64': (h5py.h5t.STD_B64LE, '<u8')}[
        name.rsplit('_', 1)[1]]
    d = lowlevel(f, name, tid.copy(), (5, 3))
    d[...] = rng_for(name).integers(0, 200, size=(5, 3)).astype(dt)


@case('dtypes/strings_nullpad_embedded_nul')
def _snull(f, name, libver):
    f.create_dataset(name, data=np.array([b'a\0b', b'abcdef', b'', b'\0\0x'], dtype='S6'))


@case('dtypes/strings_spacepad')
def _sspace(f, name, libver):
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(6)
    tid.set_strpad(h5py.h5t.STR_SPACEPAD)
    d = lowlevel(f, name, tid, (4,))
    d[...] = np.array([b'ab', b'abcdef', b'', b'x y'], dtype='S6')


@case('dtypes/strings_nullterm')
def _sterm(f, name, libver):
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(6)
    tid.set_strpad(h5py.h5t.STR_NULLTERM)
    d = lowlevel(f, name, tid, (4,))
    d[...] = np.array([b'ab', b'abcdef', b'', b'abcde'], dtype='S6')


@case('dtypes/strings_nullterm_bytes_after_nul')
def _sterm_garbage(f, name, libver):
    # bytes after the terminator, as C writers leave them (written without conversion)
    tid = h5py.h5t.C_S1.copy()
    tid.set_size(6)
    tid.set_strpad(h5py.h5t.STR_NULLTERM)
    d = lowlevel(f, name, tid, (3,))
    d.id.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array([b'ab\0XYZ', b'abcdef', b'\0\0\0\0\0q'], 'S6'),
               mtype=tid)


@case('dtypes/strings_fixed_utf8')
def _sutf8(f, name, libver):
    d = f.create_dataset(name, shape=(2,), dtype=h5py.string_dtype('utf-8', 12))
    d.id.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array(['γάμμα'.encode(), b'ascii'], dtype='S12'),
               mtype=d.id.get_type())


@case('dtypes/opaque_v8')
@case('dtypes/opaque_v3')
def _opaque(f, name, libver):
    n = int(name[-1])
    raw = rng_for(name).integers(0, 256, size=7 * n, dtype='u1')
    f.create_dataset(name, data=raw.view('V%d' % n))


@case('dtypes/opaque_datetime64_tagged')
def _odt(f, name, libver):
    a = np.array(['2020-01-01T00:00:00', '2021-06-01T12:00:00', 'NaT'], dtype='<M8[ns]')
    f.create_dataset(name, data=a.view(h5py.opaque_dtype(a.dtype)))


@case('dtypes/enum_be_i2')
@case('dtypes/enum_u8')
def _enum(f, name, libver):
    base = '>i2' if 'be' in name else '<u8'
    mapping = {'LOW': 1, 'MID': 1000, 'HIGH': 30000} if 'be' in name else \
        {'A': 0, 'B': 2 ** 40, 'C': 2 ** 62 + 5}
    vals = np.array([list(mapping.values())[i % 3] for i in range(11)], dtype=base)
    f.create_dataset(name, data=vals, dtype=h5py.enum_dtype(mapping, basetype=base))


@case('dtypes/int_precision12')
@case('dtypes/uint_offset4_precision8')
@case('dtypes/int_precision12_chunked_gzip')
@case('dtypes/int16_precision10_pad_one')
def _precision(f, name, libver):
    """Integers using fewer bits than their size (precision/offset): libhdf5 converts them when
    h5py reads; the file's bytes are not the values."""
    if name.startswith('dtypes/uint'):
        tid = h5py.h5t.STD_U16LE.copy()
        tid.set_precision(8)
        tid.set_offset(4)
        data = np.arange(40, dtype='<u2').reshape(5, 8) * 6
    elif 'pad_one' in name:
        tid = h5py.h5t.STD_I16LE.copy()
        tid.set_precision(10)
        tid.set_pad(h5py.h5t.PAD_ONE, h5py.h5t.PAD_ONE)
        data = (np.arange(40, dtype='<i2').reshape(5, 8) - 20) * 25
    else:
        tid = h5py.h5t.STD_I32LE.copy()
        tid.set_precision(12)
        data = np.array([-2048, -1, 0, 1, 2047, -300, 77, -5] * 5, dtype='<i4').reshape(5, 8)
    dcpl = None
    if name.endswith('gzip'):
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((2, 3))
        dcpl.set_deflate(4)
    d = lowlevel(f, name, tid, data.shape, dcpl=dcpl)
    d[...] = data


@case('dtypes/float_exponent_bias_120')
def _ebias(f, name, libver):
    tid = h5py.h5t.IEEE_F32LE.copy()
    tid.set_ebias(120)
    d = lowlevel(f, name, tid, (2, 4))
    d[...] = np.array([[1.0, 2.5, -3, 1e-3], [0, 7, 1e5, -0.5]], 'f4')


@case('compound/member_precision12')
def _cprec(f, name, libver):
    ct = h5py.h5t.create(h5py.h5t.COMPOUND, 8)
    m = h5py.h5t.STD_I32LE.copy()
    m.set_precision(12)
    ct.insert(b'a', 0, m)
    ct.insert(b'b', 4, h5py.h5t.IEEE_F32LE)
    a = np.zeros(6, [('a', '<i4'), ('b', '<f4')])
    a['a'] = [-1, 5, -2048, 2047, 0, -7]
    a['b'] = np.arange(6) / 2
    lowlevel(f, name, ct, (6,))[...] = a


@case('dtypes/scalars_f2')
@case('dtypes/scalars_compound')
@case('dtypes/scalars_opaque')
@case('dtypes/scalars_S')
def _scalars(f, name, libver):
    v = {'f2': np.float16(-1.5), 'compound': np.array((1, 2.5), [('a', '<i2'), ('b', '>f8')])[()],
         'opaque': np.void(b'\x01\x02\x03'), 'S': np.bytes_(b'hello')}[name.split('_')[1]]
    f.create_dataset(name, data=v)


@case('dtypes/complex_be_chunked')
def _cbe(f, name, libver):
    r = rng_for(name)
    data = (r.normal(size=(20, 9)) + 1j * r.normal(size=(20, 9))).astype('>c16')
    f.create_dataset(name, data=data, chunks=(6, 4), compression='gzip', shuffle=True)


BE_COMPOUND = np.dtype([('a', '>i4'), ('b', '>f8'), ('c', '>u2'), ('d', '>c8'), ('e', '>f2')])


@case('compound/big_endian')
@case('compound/big_endian_chunked_shuffle_gzip')
def _cbe2(f, name, libver):
    r = rng_for(name)
    a = np.zeros(50, BE_COMPOUND)
    a['a'] = r.integers(-10 ** 9, 10 ** 9, 50)
    a['b'] = r.normal(size=50)
    a['c'] = np.arange(50)
    a['d'] = r.normal(size=50) + 1j
    a['e'] = r.normal(size=50)
    kw = dict(chunks=(7,), compression='gzip', shuffle=True) if 'chunked' in name else {}
    f.create_dataset(name, data=a.reshape(5, 10) if not kw else a, **kw)


@case('compound/out_of_order_offsets')
def _cooo(f, name, libver):
    dt = np.dtype({'names': ['a', 'b', 'c'], 'formats': ['<i4', '<f2', 'u1'],
                   'offsets': [8, 0, 4], 'itemsize': 12})
    a = np.zeros(9, dt)
    a['a'] = np.arange(9) * 1000
    a['b'] = np.arange(9) / 4
    a['c'] = np.arange(9) + 200
    f.create_dataset(name, data=a)


@case('compound/unicode_field_names')
def _cuni(f, name, libver):
    dt = np.dtype([('α', '<i4'), ('bé', '<f4'), ('x', 'u1')])
    a = np.zeros(6, dt)
    a['α'] = np.arange(6) - 3
    a['bé'] = np.arange(6) / 7
    a['x'] = 9
    f.create_dataset(name, data=a)


@case('compound/mixed_members')
def _cmix(f, name, libver):
    inner = np.dtype([('p', '<i2'), ('q', 'u1')])
    dt = np.dtype([('flag', '?'), ('kind', h5py.enum_dtype({'X': 0, 'Y': 7}, basetype='i1')),
                   ('s', 'S3'), ('z', '<c8'), ('arr', inner, (2,)), ('m', '<f8', (2, 2))])
    a = np.zeros(5, dt)
    a['flag'] = [True, False, True, True, False]
    a['kind'] = [0, 7, 7, 0, 7]
    a['s'] = [b'abc', b'd', b'', b'ef', b'ghi']
    a['z'] = np.arange(5) * (1 + 2j)
    a['arr']['p'] = np.arange(10).reshape(5, 2)
    a['arr']['q'] = 250
    a['m'] = np.arange(20).reshape(5, 2, 2) / 3
    f.create_dataset(name, data=a, chunks=(2,), compression='gzip', shuffle=True)


@case('compound/more_members')
def _cmore(f, name, libver):
    dt = np.dtype([('s2', 'S3', (2,)), ('o', 'V4'), ('c', '<c16', (2,)),
                   ('e', h5py.enum_dtype({'N': -1, 'P': 1}, basetype='<i8'), (3,))])
    a = np.zeros(7, dt)
    a['s2'] = [[b'ab', b'cde']] * 7
    a['o'] = np.frombuffer(bytes(range(28)), 'V4')
    a['c'] = (np.arange(14) * (1 - 1j)).reshape(7, 2)
    a['e'] = [[-1, 1, 1]] * 7
    f.create_dataset(name, data=a, chunks=(3,), **hdf5plugin.LZ4())


@case('compound/committed_type_chunked')
def _ccommit(f, name, libver):
    dt = np.dtype([('x', '<f4'), ('y', '<u2')])
    f['compound/committed_type'] = dt
    a = np.zeros(500, dt)
    a['x'] = np.arange(500) / 3
    a['y'] = np.arange(500)
    d = f.create_dataset(name, shape=(500,), dtype=f['compound/committed_type'], chunks=(64,),
                         compression='gzip')
    d[...] = a
    for i in range(40):                       # object header continuations after the layout
        d.attrs['attr%02d' % i] = np.arange(50 + i)


@case('compound/packed_odd_itemsize_shuffle')
def _codd(f, name, libver):
    dt = np.dtype([('a', '<i8'), ('b', '<i4'), ('c', 'u1')])   # 13 bytes, packed
    a = np.zeros(1000, dt)
    a['a'] = np.arange(1000) ** 3
    a['b'] = -np.arange(1000)
    a['c'] = np.arange(1000) % 251
    f.create_dataset(name, data=a, chunks=(77,), compression='gzip', shuffle=True)


def _many_fields_dtype(n, gap):
    names = ['f%x' % i for i in range(n)]
    return np.dtype({'names': names, 'formats': ['u1'] * n,
                     'offsets': [i * (1 + gap) for i in range(n)], 'itemsize': n * (1 + gap)})


BIG_HEADERS = ('compound/many_fields_npy_header_over_10000',
               'compound/many_fields_npy_header_over_65535')


MANY_FIELDS = {   # name: (fields, gap) -> numpy's own header (before padding), in bytes
    'compound/many_fields_npy_header_7990': (480, 0),    # padded to 8192: still page-aligned
    'compound/many_fields_npy_header_9334': (560, 0),    # 12288 > 10000: numpy's 64 instead
    BIG_HEADERS[0]: (700, 0),                            # 11702: np.load needs max_header_size
    BIG_HEADERS[1]: (2500, 1),                           # 74804: format 2.0
}


@case('compound/many_fields_npy_header_7990', libvers=('latest',))
@case('compound/many_fields_npy_header_9334', libvers=('latest',))
@case(BIG_HEADERS[0], libvers=('latest',))
@case(BIG_HEADERS[1], libvers=('latest',))
def _cmany(f, name, libver):
    # numpy writes a ('', '|V1') padding entry for each gap: its header grows, HDF5's does not
    dt = _many_fields_dtype(*MANY_FIELDS[name])
    a = np.zeros(3, dt)
    for i, n in enumerate(dt.names):
        a[n] = (np.arange(3) + i) % 256
    f.create_dataset(name, data=a)


@case('compound/fillvalue_never_written')
def _cfill(f, name, libver):
    dt = np.dtype([('a', '<i4'), ('b', '<f8'), ('s', 'S2')])
    fv = np.array((-7, 2.5, b'xy'), dtype=dt)[()]
    d = f.create_dataset(name, shape=(20, 6), dtype=dt, chunks=(4, 4), fillvalue=fv)
    d[5] = np.array([(1, 1.5, b'ab')] * 6, dtype=dt)


@case('compound/array_of_compound_type')
def _carr(f, name, libver):
    inner = np.dtype([('x', '<i2'), ('y', '<f4')])
    d = f.create_dataset(name, shape=(4,), dtype=np.dtype((inner, (3,))))
    a = np.zeros((4, 3), inner)
    a['x'] = np.arange(12).reshape(4, 3)
    a['y'] = np.arange(12).reshape(4, 3) / 2
    d[...] = a


# ---------------------------------------------------------------------------------------------
# chunk shapes and indexes

@case('chunks/bigger_than_dataset_fixed_max')
def _big_fixed(f, name, libver):
    f.create_dataset(name, data=np.arange(35, dtype='<i4').reshape(5, 7), maxshape=(20, 30),
                     chunks=(8, 16))


@case('chunks/bigger_than_dataset_unlimited')
def _big_unl(f, name, libver):
    f.create_dataset(name, data=np.arange(35, dtype='<f8').reshape(5, 7),
                     maxshape=(None, None), chunks=(8, 16), compression='gzip')


@case('chunks/bigger_than_dataset_1d_unlimited_lz4')
def _big_unl1(f, name, libver):
    f.create_dataset(name, data=np.arange(13, dtype='<i2'), maxshape=(None,), chunks=(64,),
                     **hdf5plugin.LZ4())


@case('chunks/single_chunk_gzip')
def _single(f, name, libver):
    f.create_dataset(name, data=np.arange(600, dtype='<u4').reshape(20, 30), chunks=(20, 30),
                     compression='gzip')


@case('chunks/one_element_fixed_3000')
def _one_fa(f, name, libver):
    f.create_dataset(name, data=np.arange(3000, dtype='<i4') * 7, chunks=(1,))


@case('chunks/one_element_fixed_3000_gzip_shuffle')
def _one_fa_gz(f, name, libver):
    f.create_dataset(name, data=np.arange(3000, dtype='<i8') - 1500, chunks=(1,),
                     compression='gzip', shuffle=True, fletcher32=True)


@case('chunks/one_element_extensible_5000_gzip')
def _one_ea(f, name, libver):
    d = f.create_dataset(name, shape=(0,), maxshape=(None,), chunks=(1,), dtype='<u2',
                         compression='gzip')
    for k in range(5):                       # appended in steps, like a run being recorded
        d.resize((1000 * (k + 1),))
        d[1000 * k:] = (np.arange(1000) * (k + 1)) % 60000


@case('chunks/one_element_extensible_40000')
@case('chunks/one_element_fixed_40000')
def _one_40k(f, name, libver):
    kw = dict(maxshape=(None,)) if 'extensible' in name else {}
    f.create_dataset(name, data=np.arange(40000, dtype='<u4') * 3, chunks=(1,), **kw)


@case('chunks/ten_dims_chunked_gzip')
def _tendims(f, name, libver):
    shape = (2, 3, 1, 2, 3, 2, 1, 3, 2, 5)
    f.create_dataset(name, data=np.arange(np.prod(shape), dtype='<i2').reshape(shape),
                     chunks=(1, 2, 1, 2, 2, 1, 1, 3, 2, 4), compression='gzip')


@case('chunks/one_element_2d_unlimited_gzip')
def _one_v2(f, name, libver):
    d = f.create_dataset(name, shape=(60, 50), maxshape=(None, None), chunks=(1, 1),
                         dtype='<f4', compression='gzip', compression_opts=1)
    d[...] = np.arange(3000, dtype='<f4').reshape(60, 50) / 9


@case('chunks/not_dividing_3d_gzip')
def _nd3(f, name, libver):
    f.create_dataset(name, data=rng_for(name).integers(0, 99, (17, 23, 11)).astype('<i2'),
                     chunks=(4, 5, 3), compression='gzip')


@case('chunks/not_dividing_4d')
def _nd4(f, name, libver):
    f.create_dataset(name, data=rng_for(name).normal(size=(7, 9, 5, 6)).astype('>f4'),
                     chunks=(3, 4, 2, 5))


@case('chunks/not_dividing_4d_unlimited_blosc')
def _nd4u(f, name, libver):
    f.create_dataset(name, data=np.arange(7 * 9 * 5 * 6, dtype='<u8').reshape(7, 9, 5, 6),
                     chunks=(3, 4, 2, 5), maxshape=(None, 9, None, 6),
                     **hdf5plugin.Blosc(cname='lz4', shuffle=hdf5plugin.Blosc.SHUFFLE))


@case('chunks/auto_chunked_gzip_default')
def _auto(f, name, libver):
    f.create_dataset(name, data=np.arange(300 * 200, dtype='<i4').reshape(300, 200) % 777,
                     chunks=True, compression='gzip')


@case('chunks/big_4MiB_default_gzip')
def _big4(f, name, libver):
    data = (np.arange(48 * 512 * 64, dtype='<f4') % 1013).reshape(48, 512, 64)
    data[::7] += 0.25
    f.create_dataset(name, data=data, chunks=(32, 512, 64), compression='gzip')


@case('chunks/implicit_index_early_alloc', libvers=('latest',))
def _implicit(f, name, libver):
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((4, 5))
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_value(np.array(-3, '<i4'))
    d = lowlevel(f, name, h5py.h5t.STD_I32LE.copy(), (10, 12), dcpl=dcpl)
    d[2:7, 3:9] = np.arange(30).reshape(5, 6)


def _shrunk(f, name, libver, maxshape, grow=False):
    d = f.create_dataset(name, data=np.arange(40 * 50, dtype='<i4').reshape(40, 50) + 1,
                         chunks=(7, 9), maxshape=maxshape, compression='gzip', fillvalue=-5)
    d.resize((13, 20))
    if grow:
        d.resize((30, 41))


@case('shrunk/two_unlimited')
def _sh_v2(f, name, libver):
    _shrunk(f, name, libver, (None, None))


@case('shrunk/one_unlimited')
def _sh_ea(f, name, libver):
    _shrunk(f, name, libver, (None, 50))


@case('shrunk/fixed_max')
def _sh_fa(f, name, libver):
    _shrunk(f, name, libver, (40, 50))


@case('shrunk/then_grown')
def _sh_grown(f, name, libver):
    _shrunk(f, name, libver, (None, None), grow=True)


@case('shrunk/to_zero_rows')
def _sh_zero(f, name, libver):
    d = f.create_dataset(name, data=np.arange(60, dtype='<f8').reshape(6, 10), chunks=(4, 4),
                         maxshape=(None, 10))
    d.resize((0, 10))


@case('unlimited/two_axes_grown')
def _unl2(f, name, libver):
    d = f.create_dataset(name, shape=(0, 0), maxshape=(None, None), chunks=(5, 6), dtype='<i8',
                         compression='gzip', shuffle=True)
    for k in range(1, 5):
        d.resize((7 * k, 4 * k + 3))
        d[7 * (k - 1):, :] = k * 100 + np.arange(4 * k + 3)
        d[:, 4 * (k - 1):] += 10000 * k


# ---------------------------------------------------------------------------------------------
# fill values and never-written storage

@case('fill/float_nan_chunked')
def _fnan(f, name, libver):
    d = f.create_dataset(name, shape=(30, 30), dtype='<f8', chunks=(8, 8), fillvalue=np.nan)
    d[9:12, 9:20] = 1.25


@case('fill/float32_nan_unwritten_gzip')
def _fnan32(f, name, libver):
    f.create_dataset(name, shape=(25,), dtype='>f4', chunks=(10,), fillvalue=np.nan,
                     compression='gzip')


@case('fill/contiguous_never_written')
def _fcontig(f, name, libver):
    f.create_dataset(name, shape=(17, 3), dtype='<i2', fillvalue=-9)


@case('fill/contiguous_early_alloc_never_written')
def _fcontig_early(f, name, libver):
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    dcpl.set_fill_value(np.array(4.5, '<f4'))
    lowlevel(f, name, h5py.h5t.IEEE_F32LE.copy(), (33,), dcpl=dcpl)


@case('fill/float16_fill_partial')
def _ff16(f, name, libver):
    d = f.create_dataset(name, shape=(19, 7), dtype='<f2', chunks=(5, 5), fillvalue=-0.5)
    d[0:3] = 2


@case('fill/u8_max_partial')
def _fu8(f, name, libver):
    d = f.create_dataset(name, shape=(30,), dtype='<u8', chunks=(7,), fillvalue=2 ** 64 - 1)
    d[3:9] = 2 ** 63 + 1


@case('fill/bool_true_partial')
def _fbool(f, name, libver):
    d = f.create_dataset(name, shape=(40,), dtype='?', chunks=(16,), fillvalue=True)
    d[20:30] = False


# ---------------------------------------------------------------------------------------------
# filters

FDATA = (np.arange(64 * 333, dtype='<i4') % 4096).reshape(64, 333)


@case('filters/gzip_level0')
@case('filters/gzip_level9')
def _gzl(f, name, libver):
    f.create_dataset(name, data=FDATA, chunks=(16, 50), compression='gzip',
                     compression_opts=int(name[-1]))


@case('filters/gzip_incompressible')
def _gzr(f, name, libver):
    f.create_dataset(name, data=rng_for(name).integers(0, 256, (100, 99), dtype='u1'),
                     chunks=(10, 99), compression='gzip', compression_opts=9)


@case('filters/shuffle_only_f8')
def _shuf(f, name, libver):
    f.create_dataset(name, data=rng_for(name).normal(size=(40, 21)), chunks=(9, 10), shuffle=True)


@case('filters/scaleoffset_float_2')
def _so_f(f, name, libver):
    f.create_dataset(name, data=rng_for(name).normal(size=(50, 40)) * 100, chunks=(16, 16),
                     scaleoffset=2)


@case('filters/scaleoffset_int_minbits4')
def _so_i(f, name, libver):
    f.create_dataset(name, data=(np.arange(2000, dtype='<i4') % 16 + 1000).reshape(40, 50),
                     chunks=(16, 16), scaleoffset=4)


@case('filters/scaleoffset_int_with_fill')
def _so_fill(f, name, libver):
    d = f.create_dataset(name, shape=(40, 50), dtype='<i2', chunks=(16, 16), scaleoffset=0,
                         fillvalue=-1)
    d[3:20, 5:30] = np.arange(17 * 25).reshape(17, 25)


@case('filters/nbit_int_precision12')
@case('filters/nbit_float')
def _nbit(f, name, libver):
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((10, 7))
    dcpl.set_filter(h5py.h5z.FILTER_NBIT, h5py.h5z.FLAG_OPTIONAL)
    if name.endswith('float'):
        tid = h5py.h5t.IEEE_F32LE.copy()
        data = rng_for(name).normal(size=(23, 19)).astype('<f4')
    else:
        tid = h5py.h5t.STD_I32LE.copy()
        tid.set_precision(12)
        data = rng_for(name).integers(-2048, 2048, (23, 19)).astype('<i4')
    d = lowlevel(f, name, tid, data.shape, dcpl=dcpl)
    d[...] = data


@case('filters/szip')
def _szip(f, name, libver):
    if not h5py.h5z.filter_avail(h5py.h5z.FILTER_SZIP):
        pytest.skip('no szip encoder')
    f.create_dataset(name, data=FDATA, chunks=(16, 64), compression='szip',
                     compression_opts=('nn', 16))


BLOSC_CNAMES = ('blosclz', 'lz4', 'lz4hc', 'snappy', 'zlib', 'zstd')
BLOSC_SHUFFLES = {'noshuffle': 0, 'shuffle': 1, 'bitshuffle': 2}
for _cn in BLOSC_CNAMES:
    for _sh in BLOSC_SHUFFLES:
        @case(f'blosc/{_cn}_{_sh}', libvers=('latest',))
        def _blosc(f, name, libver):
            cn, sh = name.split('/')[1].split('_')
            data = (np.arange(96 * 700, dtype='<f8') % 1237 / 7).reshape(96, 700)
            # chunks of 350 KiB: several Blosc blocks, and edge chunks
            f.create_dataset(name, data=data[:, :650], chunks=(64, 600),
                             **hdf5plugin.Blosc(cname=cn, clevel=5, shuffle=BLOSC_SHUFFLES[sh]))


@case('blosc/u2_odd_chunk_bitshuffle', libvers=('latest',))
def _blosc_odd(f, name, libver):
    # 999 elements per chunk: bitshuffle leaves the last elements as they are
    f.create_dataset(name, data=np.arange(9990, dtype='<u2') * 3, chunks=(999,),
                     **hdf5plugin.Blosc(cname='lz4', shuffle=hdf5plugin.Blosc.BITSHUFFLE))


@case('lz4/small_blocks')
def _lz4s(f, name, libver):
    f.create_dataset(name, data=FDATA, chunks=(16, 50), **hdf5plugin.LZ4(nbytes=256))


@case('lz4/small_blocks_incompressible')
def _lz4r(f, name, libver):
    f.create_dataset(name, data=rng_for(name).integers(0, 2 ** 31, (64, 100), dtype='<i4'),
                     chunks=(16, 50), **hdf5plugin.LZ4(nbytes=1000))


@case('filters/zfp_reversible', libvers=('latest',))
def _zfp(f, name, libver):
    if not h5py.h5z.filter_avail(hdf5plugin.ZFP_ID):
        pytest.skip('no zfp filter')
    f.create_dataset(name, data=rng_for(name).normal(size=(32, 40)).astype('<f4'),
                     chunks=(16, 20), **hdf5plugin.Zfp(reversible=True))


@case('filters/mask_gzip_skipped_in_one_chunk')
def _mask1(f, name, libver):
    d = f.create_dataset(name, data=FDATA[:32, :100], chunks=(16, 50), compression='gzip')
    raw = (np.arange(16 * 50, dtype='<i4') - 400).reshape(16, 50)
    d.id.write_direct_chunk((16, 50), raw.tobytes(), filter_mask=1)


@case('filters/mask_shuffle_gzip_partly_skipped')
def _mask2(f, name, libver):
    d = f.create_dataset(name, data=FDATA[:32, :100], chunks=(16, 50), compression='gzip',
                         shuffle=True)
    c = (np.arange(16 * 50, dtype='<i4') * 3).reshape(16, 50)
    shuffled = c.view('u1').reshape(-1, 4).T.copy().tobytes()
    d.id.write_direct_chunk((0, 50), shuffled, filter_mask=0b10)          # only shuffled
    d.id.write_direct_chunk((16, 0), zlib.compress(c.tobytes()), filter_mask=0b01)  # only gzip
    d.id.write_direct_chunk((16, 50), (c + 1).tobytes(), filter_mask=0b11)  # neither


@case('filters/partial_edge_chunks_not_filtered', libvers=('latest',))
def _dont_filter(f, name, libver):
    lib = libhdf5()
    if lib is None:
        pytest.skip('cannot reach libhdf5 for H5Pset_chunk_opts')
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((16, 50))
    dcpl.set_shuffle()
    dcpl.set_deflate(6)
    lib.H5Pset_chunk_opts.argtypes = [ctypes.c_int64, ctypes.c_uint]
    if lib.H5Pset_chunk_opts(dcpl.id, 0x2) < 0:      # H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS
        pytest.skip('H5Pset_chunk_opts failed')
    d = lowlevel(f, name, h5py.h5t.STD_I32LE.copy(), (60, 130), dcpl=dcpl)
    d[...] = FDATA[:60, :130]


# ---------------------------------------------------------------------------------------------
# the array tests

PARAMS = []
for _name, _fn, _libvers in CASES:
    for _lv in _libvers if _name not in BIG_HEADERS else ():
        PARAMS.append(pytest.param(_lv, _name, id=f'{_lv}-{_name}'))


def write_zoo(path, libver):
    skipped = {}
    with h5py.File(path, 'w', libver=libver) as f:
        for name, fn, libvers in CASES:
            if libver not in libvers:
                continue
            try:
                fn(f, name, libver)
            except pytest.skip.Exception as e:
                skipped[name] = str(e)
    return skipped


def _ctypes_zstd():
    name = ctypes.util.find_library('zstd') or 'libzstd.so.1'
    try:
        z = ctypes.CDLL(name)
    except OSError:
        return None
    z.ZSTD_compressBound.restype = ctypes.c_size_t
    z.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
    z.ZSTD_compress.restype = ctypes.c_size_t
    z.ZSTD_compress.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                ctypes.c_size_t, ctypes.c_int]
    z.ZSTD_isError.restype = ctypes.c_uint
    z.ZSTD_isError.argtypes = [ctypes.c_size_t]

    def compress(b, level=3):
        cap = z.ZSTD_compressBound(len(b))
        out = ctypes.create_string_buffer(cap)
        n = z.ZSTD_compress(out, cap, b, len(b), level)
        assert not z.ZSTD_isError(n)
        return out.raw[:n]
    return compress


ZSTD = _ctypes_zstd()


def bitshuffle_block(b, es):
    """Bitshuffle of n elements (n a multiple of 8), as bshuf_trans_bit_elem composes it (byte
    transpose, 8x8 bit transposes, bit-row transpose): row 8*j+k holds bit k of byte j of every
    element, element i at bit i%8 of byte i//8 (little bit order)."""
    a = np.frombuffer(b, 'u1').reshape(-1, es)               # n x es
    bits = np.unpackbits(a, axis=1, bitorder='little')       # n x (es*8): byte j, bit k
    return np.packbits(bits.T, axis=1, bitorder='little').tobytes()


def bitshuffle_encode(data, es, block, comp):
    """The bitshuffle filter's chunk (bshuf_h5filter.c): blocks of `block` elements, the last
    one rounded down to a multiple of 8, leftover elements copied; with lz4/zstd a 12-byte header
    and a 4-byte size before each compressed block."""
    import lz4.block
    b = data.tobytes()
    n = len(b) // es
    out = []
    pos = 0
    sizes = [block] * (n // block)
    last = n % block - (n % block) % 8
    if last:
        sizes.append(last)
    for s in sizes:
        blk = bitshuffle_block(b[pos * es:(pos + s) * es], es)
        if comp == 'lz4':
            c = lz4.block.compress(blk, store_size=False)
            out.append(struct.pack('>I', len(c)) + c)
        elif comp == 'zstd':
            c = ZSTD(blk)
            out.append(struct.pack('>I', len(c)) + c)
        else:
            out.append(blk)
        pos += s
    out.append(b[pos * es:])
    body = b''.join(out)
    if comp == 'none':
        return body
    return struct.pack('>QI', len(b), block * es) + body


BSHUF_CODES = {'none': 0, 'lz4': 2, 'zstd': 3}
HAND_CHUNKED = {   # name: (dtype, shape, chunks, filter id, cd_values, encoder)
    'zstd_i4': ('<i4', (70, 90), (16, 40), 32015, (3,), lambda c: ZSTD(c.tobytes(), 3)),
    'zstd_f8_level19': ('<f8', (33, 17), (8, 8), 32015, (19,),
                        lambda c: ZSTD(c.tobytes(), 19)),
}
for _comp in BSHUF_CODES:
    for _dt, _blk in (('<u2', 0), ('<f8', 64), ('<i4', 200)):
        _block = _blk or max(128, (8192 // np.dtype(_dt).itemsize) // 8 * 8)
        HAND_CHUNKED[f'bitshuffle_{_comp}_{np.dtype(_dt).name}_b{_blk}'] = (
            _dt, (50, 333), (13, 101), 32008,    # 1313 elements: 1 left over after the blocks
            (0, 3, np.dtype(_dt).itemsize, _blk, BSHUF_CODES[_comp]) +
            ((3,) if _comp == 'zstd' else ()),
            (lambda es, blk, comp: lambda c: bitshuffle_encode(c, es, blk, comp))(
                np.dtype(_dt).itemsize, _block, _comp))


def hand_data(name):
    dt, shape, *_ = HAND_CHUNKED[name]
    return (np.arange(np.prod(shape)) % 977 * 3 - 500).astype(dt).reshape(shape)


def write_hand_chunked(path):
    """Datasets whose chunks are encoded here (zstd, bitshuffle) and written with
    write_direct_chunk: h5py has no such filter, so the oracle is the array written."""
    with h5py.File(path, 'w', libver='latest') as f:
        for name, (dt, shape, chunks, fid, cd, enc) in HAND_CHUNKED.items():
            dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
            dcpl.set_chunk(chunks)
            dcpl.set_filter(fid, h5py.h5z.FLAG_OPTIONAL, cd)
            d = lowlevel(f, name, h5py.h5t.py_create(np.dtype(dt)), shape, dcpl=dcpl)
            data = hand_data(name)
            for i0 in range(0, shape[0], chunks[0]):
                for j0 in range(0, shape[1], chunks[1]):
                    c = np.zeros(chunks, dt)
                    part = data[i0:i0 + chunks[0], j0:j0 + chunks[1]]
                    c[:part.shape[0], :part.shape[1]] = part
                    d.id.write_direct_chunk((i0, j0), enc(c))


# ---------------------------------------------------------------------------------------------
# names, many datasets, attributes, non-arrays

ODD_NAMES = ['with space', 'ünïcödé', 'x', 'x.npy', 'y', 'y.json', 'z.raw', '.hidden', '..',
             'tab\tname', 'back\\slash', 'a~ds', 'n' * 240, 'trailing space ', '-dash', '#hash',
             'L' * 251, 'M' * 300, 'é' * 126, 'Q' * 1030,
             '\u00e9\u0301 combining', 'CamelCase', 'camelcase', 'emoji\U0001F600']
N_MANY = 2000


def write_names(path):
    with h5py.File(path, 'w', libver='latest') as f:
        for i, n in enumerate(ODD_NAMES):
            f['names/' + n] = np.arange(i + 1, dtype='<i2') * (i + 1)
        f.create_group('names/..grp')['inside'] = np.arange(3, dtype='u1')
        f['.h5direct'] = np.arange(4, dtype='<i4')       # only the mount root's is special


NON_UTF8 = b'bad\xff\xfe'


def write_non_utf8(d):
    """HDF5 names and POSIX file names are bytes: names that are not UTF-8."""
    d = os.fsencode(d)
    with h5py.File(osp.join(d, b'non_utf8_inside.h5'), 'w') as f:
        f[b'ds_' + NON_UTF8] = np.arange(4, dtype='<i2')
        f.create_group(b'grp_' + NON_UTF8)['inside'] = np.arange(5, dtype='<i2')
        a = f.create_dataset('attr_name', data=np.arange(6, dtype='<i2'))
        h5py.h5a.create(a.id, b'attr_' + NON_UTF8, h5py.h5t.STD_I32LE,
                        h5py.h5s.create(h5py.h5s.SCALAR)).write(np.array(5, '<i4'))
        a.attrs['value_not_utf8'] = np.bytes_(NON_UTF8)
        f['fine'] = np.arange(7, dtype='<i2')
    with h5py.File(osp.join(d, b'file_' + NON_UTF8 + b'.h5'), 'w') as f:
        f['x'] = np.arange(8, dtype='<i2')


def write_many(path, libver, track_order):
    with h5py.File(path, 'w', libver=libver, track_order=track_order) as f:
        g = f.create_group('many')
        for i in range(N_MANY):
            g.create_dataset('d%05d' % ((i * 7919) % N_MANY), data=np.full(3, i, '<i4'))
        f.create_group('zeta')['b'] = np.arange(2.0)
        f.create_group('alpha')['a'] = np.arange(3.0)


ATTRS = {
    'i8': np.int64(-2 ** 62), 'u8max': np.uint64(2 ** 64 - 1), 'i8min': np.int64(-2 ** 63),
    'u1': np.uint8(255), 'f8': 0.1, 'f4': np.float32(1.5), 'f2': np.float16(0.25),
    'nan': np.nan, 'inf': np.inf, 'ninf': -np.inf, 'bool_true': np.bool_(True),
    'vlen_str': 'ünïcödé', 'bytes': np.bytes_(b'fixed'), 'vec': np.arange(4, dtype='<i2'),
    'mat': np.arange(6, dtype='<f4').reshape(2, 3), 'strlist': ['a', 'bc', ''],
    'big_vec': np.arange(3000, dtype='<i4'),
}
ATTRS_NOT_JSON = {   # no JSON form promised (sidecar.md: null where not representable)
    'empty': h5py.Empty('f4'), 'complex': np.complex64(1 + 2j),
    'compound': np.array((1, 2.0), dtype=[('a', '<i4'), ('b', '<f8')]),
}


def write_misc(path, libver):
    with h5py.File(path, 'w', libver=libver) as f:
        # not arrays
        f.create_dataset('na/empty_f4', data=h5py.Empty('<f4'))
        f.create_dataset('na/empty_compound', data=h5py.Empty(np.dtype([('a', '<i4')])))
        target = f.create_dataset('na/target', data=np.arange(10, dtype='<i4'))
        refs = f.create_dataset('na/objrefs', shape=(3,), dtype=h5py.ref_dtype)
        refs[0] = target.ref
        refs[1] = f['na'].ref
        rr = f.create_dataset('na/regionrefs', shape=(2,), dtype=h5py.regionref_dtype)
        rr[0] = target.regionref[2:5]
        vl = f.create_dataset('na/vlen_i4', shape=(3,), dtype=h5py.vlen_dtype('<i4'))
        vl[0] = [1, 2, 3]
        vl[1] = []
        vl[2] = np.arange(10)
        f.create_dataset('na/vlen_bytes', data=[b'ab', b'cde'], dtype=h5py.string_dtype('ascii'))
        vs = np.dtype([('id', '<i4'), ('s', h5py.string_dtype())])
        f.create_dataset('na/compound_with_vlen', data=np.array([(1, 'x'), (2, 'yz')], dtype=vs))
        f.create_dataset('na/after', data=np.arange(5, dtype='<u4'))   # an array next to them
        f['na/after_hardlink'] = f['na/after']
        # attributes
        d = f.create_dataset('attrs/d', data=np.arange(3))
        for k, v in ATTRS.items():
            d.attrs[k] = v
        for k, v in ATTRS_NOT_JSON.items():
            d.attrs[k] = v
        d.attrs['enum2'] = np.array(3, dtype=h5py.enum_dtype({'P': 3, 'Q': 4}, basetype='i1'))
        d.attrs['ref'] = target.ref
        # dimension scales: DIMENSION_LIST (vlen of references), REFERENCE_LIST (compound with
        # a reference), CLASS, NAME, as h5py and netCDF-4 write them
        img = f.create_dataset('scales/image', data=np.arange(12, dtype='<f4').reshape(3, 4),
                               chunks=(2, 2), compression='gzip')
        for i, n in enumerate(('y', 'x')):
            sc = f.create_dataset('scales/' + n, data=np.arange(img.shape[i], dtype='<f8') / 2)
            sc.make_scale(n)
            img.dims[i].attach_scale(sc)
            img.dims[i].label = n
        g = f.create_group('attrs/only_attrs')
        g.attrs['note'] = 'a group with attributes and nothing else'
        f.attrs['root'] = 1
        # huge and sparse: 16 GB of float64, three chunks written
        h = f.create_dataset('huge/sparse', shape=(100000, 20000), dtype='<f8',
                             chunks=(500, 1000), fillvalue=np.nan, compression='gzip')
        h[0:500, 0:1000] = np.arange(500 * 1000, dtype='<f8').reshape(500, 1000)
        h[50250:50260, 7000:7003] = -1
        h[-1, -1] = 42
        f.create_dataset('huge/contiguous_unwritten', shape=(10 ** 9,), dtype='<f8', fillvalue=1.5)
    with h5py.File(path.replace('.h5', '_attrs_only.h5'), 'w', libver=libver) as f:
        f.attrs['a'] = 1
        f.create_group('g').attrs['b'] = 'two'


# ---------------------------------------------------------------------------------------------
# whole files made differently: small offsets/lengths and B-tree K, paged file space, SWMR,
# external raw storage, an external link to a group

VARIANTS = {   # kind: datasets beyond _variant_content's 35
    'sizes4_btree_k2_earliest': 0, 'sizes4_latest': 0, 'paged_fs': 0, 'swmr_appended': 1,
    'edited_earliest': 1, 'edited_latest': 1, 'userblock_latest': 0}


def _variant_content(f):
    f.create_dataset('chunked', data=np.arange(100 * 90, dtype='<i4').reshape(100, 90),
                     chunks=(7, 9), compression='gzip', shuffle=True)
    f.create_dataset('ea', data=np.arange(500, dtype='<f8'), chunks=(1,), maxshape=(None,))
    f.create_dataset('fa', data=np.arange(700, dtype='<u2'), chunks=(3,), compression='gzip')
    f.create_dataset('v2', data=np.arange(50 * 40, dtype='<i8').reshape(50, 40), chunks=(3, 4),
                     maxshape=(None, None))
    f.create_dataset('contiguous', data=np.arange(1000, dtype='>f4'))
    g = f.create_group('group_of_30')
    for i in range(30):
        g.create_dataset('s%02d' % i, data=np.full((2, i + 1), i, '<i2'))


def _edited(path, libver):
    """Written, then reopened several times: datasets deleted (space reused), compressed chunks
    rewritten with data that compresses worse (they move), datasets grown and shrunk."""
    with h5py.File(path, 'w', libver=libver) as f:
        _variant_content(f)
        f.create_dataset('grows', data=np.zeros((10, 10), '<i4'), maxshape=(None, None),
                         chunks=(4, 4), compression='gzip')
    with h5py.File(path, 'a', libver=libver) as f:
        for i in range(0, 30, 2):
            del f['group_of_30/s%02d' % i]
        rnd = np.random.default_rng(5).integers(0, 2 ** 31, (100, 90), dtype='<i4')
        f['chunked'][10:60] = rnd[10:60]                 # recompressed chunks no longer fit
        f['grows'][...] = np.arange(100, dtype='<i4').reshape(10, 10)
        f['grows'].resize((23, 17))
        f['grows'][12:, 12:] = 7
    with h5py.File(path, 'a', libver=libver) as f:
        for i in range(0, 30, 2):                         # new datasets in freed space
            f.create_dataset('group_of_30/s%02d' % i, data=np.full((3, i + 1), -i, '<i8'),
                             chunks=(1, i + 1), compression='gzip')
        f['grows'].resize((9, 30))
        f['ea'].resize((300,))
        f['fa'][::3] = 9


def write_variant(path, kind):
    if kind.startswith('edited'):
        _edited(path, kind.split('_')[1])
        return
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    if kind.startswith('sizes4'):
        fcpl.set_sizes(4, 4)
    if kind == 'sizes4_btree_k2_earliest':
        lib = libhdf5()
        if lib is not None:           # h5py does not wrap these
            lib.H5Pset_istore_k.argtypes = [ctypes.c_int64, ctypes.c_uint]
            lib.H5Pset_sym_k.argtypes = [ctypes.c_int64, ctypes.c_uint, ctypes.c_uint]
            # v1 B-tree nodes of at most 4 chunks (deep chunk trees), and deep symbol tables
            assert lib.H5Pset_istore_k(fcpl.id, 2) >= 0 and lib.H5Pset_sym_k(fcpl.id, 2, 2) >= 0
    else:
        fapl.set_libver_bounds(h5py.h5f.LIBVER_LATEST, h5py.h5f.LIBVER_LATEST)
    if kind == 'userblock_latest':
        fcpl.set_userblock(4096)
    if kind == 'paged_fs':
        fcpl.set_file_space_strategy(h5py.h5f.FSPACE_STRATEGY_PAGE, True, 1)
        fcpl.set_file_space_page_size(4096)
    fid = h5py.h5f.create(path.encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
    with h5py.File(fid) as f:
        _variant_content(f)
        if kind == 'swmr_appended':
            d = f.create_dataset('appended', shape=(0, 16), maxshape=(None, 16), chunks=(4, 16),
                                 dtype='<i4', compression='gzip')
            f.swmr_mode = True
            for k in range(10):
                d.resize((k + 1) * 3, axis=0)
                d[k * 3:] = k
                d.flush()


def write_external(d):
    seg = osp.join(d, 'external_segment.bin')     # not HDF5: hidden from the mount
    with h5py.File(osp.join(d, 'elink_target.h5'), 'w') as f:
        f.create_dataset('grp/data', data=np.arange(3000, dtype='<i4').reshape(30, 100),
                         chunks=(8, 30), compression='gzip')
    with h5py.File(osp.join(d, 'external.h5'), 'w') as f:
        e = f.create_dataset('raw_storage', shape=(20, 10), dtype='<i4',
                             external=[(seg, 100, 400), (seg, 1000, 400)])
        e[...] = np.arange(200).reshape(20, 10) * 11
        f['elinked'] = h5py.ExternalLink('elink_target.h5', '/grp')


# ---------------------------------------------------------------------------------------------
# fixtures

@pytest.fixture(scope='module')
def src():
    d = tl.make_tmpdir('zoo-src-')
    skipped = {}
    for lv in LIBVERS:
        skipped[lv] = write_zoo(osp.join(d, f'zoo_{lv}.h5'), lv)
        write_misc(osp.join(d, f'misc_{lv}.h5'), lv)
        write_many(osp.join(d, f'many_{lv}.h5'), lv, track_order=False)
    write_many(osp.join(d, 'many_track_order.h5'), 'latest', track_order=True)
    write_names(osp.join(d, 'names.h5'))
    write_non_utf8(d)
    if ZSTD is not None:
        write_hand_chunked(osp.join(d, 'hand.h5'))
    for kind in VARIANTS:
        write_variant(osp.join(d, f'variant_{kind}.h5'), kind)
    write_external(d)
    yield {'dir': d, 'skipped': skipped}
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope='module')
def mnt(src):
    m = tl.Mount(src['dir'])
    yield m
    m.close()


def _mount_alive(mnt):
    assert osp.ismount(mnt.mnt), mnt.log()
    assert mnt.proc.poll() is None, mnt.log()
    json.load(open(mnt.path('.h5direct', 'stats.json')))


def _side(mnt_dir, name):
    with open(osp.join(mnt_dir, name + '.json')) as f:
        return json.load(f)


def check_array(mnt_dir, name, expected, rng=None):
    """check_dataset_files + byte equality with h5py's array + sidecar dtype/shape + random
    boxes through mmap."""
    rng = rng or rng_for(name)
    expected = _opaque_view(expected)
    side = tl.check_dataset_files(mnt_dir, name, expected, rng)
    a = np.load(osp.join(mnt_dir, name + '.npy'))
    exp_dt = expected.dtype
    if exp_dt.subdtype is None:
        assert tl.descr_to_dtype(side['dtype']) == a.dtype
    assert side['is_array'] is True
    assert side['shape'] == list(a.shape)
    assert side['nbytes'] == a.nbytes == os.stat(osp.join(mnt_dir, name + '.raw')).st_size
    assert side['itemsize'] == a.dtype.itemsize
    if a.nbytes == expected.nbytes and not _has_longdouble(exp_dt):
        # byte for byte (NaN payloads, -0.0, padding of compounds included)
        assert pread(osp.join(mnt_dir, name + '.raw')) == expected.tobytes(), name
    if expected.ndim and expected.size:
        m = np.load(osp.join(mnt_dir, name + '.npy'), mmap_mode='r')
        for _ in range(6):
            lo = [int(rng.integers(0, n)) for n in expected.shape]
            hi = [int(rng.integers(l + 1, n + 1)) for l, n in zip(lo, expected.shape)]
            box = tuple(slice(l, h) for l, h in zip(lo, hi))
            assert tl.values_equal(np.array(m[box]), expected[box]), (name, box)
        del m
    return side


def _opaque_view(a):
    """h5py's opaque_dtype (datetime64 stored as opaque, tag 'NUMPY:<M8[ns]') reads back as
    datetime64, and the mount shows it so too (issue 14; it used to show |V8)."""
    return np.asarray(a)


def _has_longdouble(dt):
    """x87 long doubles: 10 bytes of value in 16, the padding is not part of the value."""
    if dt.fields:
        return any(_has_longdouble(v[0]) for v in dt.fields.values())
    if dt.subdtype:
        return _has_longdouble(dt.subdtype[0])
    return dt.type in (np.longdouble, np.clongdouble) and np.finfo(np.longdouble).nmant > 52


def pread(path):
    with open(path, 'rb') as f:
        return f.read()


@pytest.mark.parametrize('libver,name', PARAMS)
def test_array_matches_h5py(src, mnt, libver, name):
    if name in src['skipped'][libver]:
        pytest.skip(src['skipped'][libver][name])
    path = osp.join(src['dir'], f'zoo_{libver}.h5')
    with h5py.File(path, 'r') as f:
        d = f[name]
        expected = d[()]
        chunks, filters = d.chunks, d.id.get_create_plist().get_nfilters()
        maxshape = [None if m is None else m for m in d.maxshape]
        fill = None if d.dtype.subdtype else _opaque_view(np.asarray(d.fillvalue, d.dtype))
    mdir = mnt.path(f'zoo_{libver}.h5', osp.dirname(name))
    side = check_array(mdir, osp.basename(name), expected)
    assert side['path'] == '/' + name
    if chunks:
        assert side['layout'] == 'chunked' and side['chunks'][:len(chunks)] == list(chunks)
        assert side['chunk_index'] not in (None, 'unknown')
    assert len(side['filters']) == filters
    assert side['maxshape'][:len(maxshape)] == maxshape
    if fill is not None:      # values: padding bytes of h5py's copy are not initialised
        got = np.frombuffer(bytes.fromhex(side['fill_value_hex']), tl.descr_to_dtype(side['dtype']))
        assert tl.values_equal(got[0], fill), (got, fill)


def test_chunk_indexes_are_the_intended_ones(src, mnt):
    """The zoo really exercises each index (else the cases above prove less than they say)."""
    seen = set()
    for lv in LIBVERS:
        for name, _, libvers in CASES:
            if lv in libvers and name not in src['skipped'][lv]:
                p = mnt.path(f'zoo_{lv}.h5', name + '.json')
                seen.add(_side(osp.dirname(p), osp.basename(name))['chunk_index'])
    assert {'v1 B-tree', 'v2 B-tree', 'fixed array', 'extensible array', 'single chunk',
            'implicit'} <= seen, seen


def test_library_fallbacks_are_named(src, mnt):
    for name in ('filters/scaleoffset_float_2', 'filters/nbit_float', 'filters/szip'):
        if name in src['skipped']['latest']:
            continue
        side = _side(mnt.path('zoo_latest.h5', 'filters'), osp.basename(name))
        assert side['read_path'].startswith('library') and side['direct'] is False, side
        assert side['fallback_reason']
    for name in ('blosc/zstd_bitshuffle', 'lz4/small_blocks', 'chunks/one_element_fixed_3000'):
        side = _side(mnt.path('zoo_latest.h5', osp.dirname(name)), osp.basename(name))
        assert side['read_path'] == 'direct', side


def test_fill_values_in_sidecar(src, mnt):
    side = _side(mnt.path('zoo_latest.h5', 'fill'), 'float_nan_chunked')
    assert side['fill_value'] == 'nan' and side['fill_value_defined'] is True
    assert bytes.fromhex(side['fill_value_hex']) == np.array(np.nan, '<f8').tobytes()
    side = _side(mnt.path('zoo_latest.h5', 'fill'), 'contiguous_never_written')
    assert side['fill_value'] == -9
    assert _side(mnt.path('zoo_latest.h5', 'fill'), 'u8_max_partial')['fill_value'] == 2 ** 64 - 1
    assert _side(mnt.path('zoo_latest.h5', 'fill'), 'float16_fill_partial')['fill_value'] == -0.5
    assert _side(mnt.path('zoo_latest.h5', 'fill'), 'bool_true_partial')['fill_value'] is True
    side = _side(mnt.path('zoo_latest.h5', 'compound'), 'fillvalue_never_written')
    with h5py.File(osp.join(src['dir'], 'zoo_latest.h5'), 'r') as f:
        fv = f['compound/fillvalue_never_written'].fillvalue
    assert bytes.fromhex(side['fill_value_hex']) == np.asarray(fv).tobytes()


@pytest.mark.skipif(ZSTD is None, reason='no libzstd to encode chunks')
@pytest.mark.parametrize('name', sorted(HAND_CHUNKED))
def test_hand_encoded_chunks(src, mnt, name):
    check_array(mnt.path('hand.h5'), name, hand_data(name))
    side = _side(mnt.path('hand.h5'), name)
    assert side['read_path'] == 'direct', side


@pytest.mark.parametrize('name', BIG_HEADERS)
def test_npy_headers_over_numpy_limits(src, mnt, name):
    """Compound types with thousands of fields: numpy's header exceeds the 10,000 bytes np.load
    reads by default (data then start at a multiple of 64) or 65535 bytes (format 2.0)."""
    with h5py.File(osp.join(src['dir'], 'zoo_latest.h5'), 'r') as f:
        expected = f[name][()]
    mdir = mnt.path('zoo_latest.h5', osp.dirname(name))
    base = osp.basename(name)
    npy = osp.join(mdir, base + '.npy')
    side = _side(mdir, base)
    content = pread(npy)
    off = side['npy_data_offset']
    assert off % 64 == 0 and content[off - 1:off] == b'\n'
    ours = np.lib.format.header_data_from_array_1_0(expected)
    hlen = struct.unpack('<H' if content[6] == 1 else '<I', content[8:10 if content[6] == 1
                                                                    else 12])[0]
    assert content[6] == (2 if 'over_65535' in name else 1) and content[7] == 0
    assert off == (10 if content[6] == 1 else 12) + hlen
    assert off - 64 < len(repr(ours).encode()) + 64 + 12       # numpy's 64 alignment, not 4096
    big = dict(max_header_size=10 ** 7)
    assert tl.values_equal(np.load(npy, **big), expected)
    assert tl.values_equal(np.load(npy, mmap_mode='r', **big), expected)
    assert content[off:] == pread(osp.join(mdir, base + '.raw')) == expected.tobytes()


def test_npy_data_offset_near_numpy_header_limit(src, mnt):
    """Headers padded to a page unless that passes numpy's 10,000 bytes: then numpy's own."""
    mdir = mnt.path('zoo_latest.h5', 'compound')
    with h5py.File(osp.join(src['dir'], 'zoo_latest.h5'), 'r') as f:
        for n, page in (('many_fields_npy_header_7990', True),
                        ('many_fields_npy_header_9334', False)):
            a = f['compound/' + n][()]
            buf = io.BytesIO()
            np.save(buf, a)
            numpy_off = len(buf.getvalue()) - a.nbytes
            off = _side(mdir, n)['npy_data_offset']
            assert off == ((numpy_off + 4095) // 4096 * 4096 if page else numpy_off), (n, off)


@pytest.mark.parametrize('kind', VARIANTS)
def test_files_made_differently(src, mnt, kind):
    fname = f'variant_{kind}.h5'
    with h5py.File(osp.join(src['dir'], fname), 'r') as f:
        names, broken = [], []

        def walk(g, prefix):
            for k in g.keys():
                try:
                    o = g[k]
                except Exception:  # noqa: BLE001 - libhdf5 cannot open it (see below)
                    broken.append(prefix + k)
                    continue
                if isinstance(o, h5py.Group):
                    walk(o, prefix + k + '/')
                else:
                    names.append(prefix + k)
        walk(f, '')
        assert len(names) + len(broken) == 35 + VARIANTS[kind]
        for n in names:
            check_array(mnt.path(fname, osp.dirname(n)), osp.basename(n), f[n][()])
    # libhdf5 1.10.8 cannot open an extensible-array dataset in a file with 4-byte lengths
    # ("didn't find unlimited dimension"): the mount shows its .json with an error member
    assert broken == (['ea'] if kind == 'sizes4_latest' else []), broken
    for n in broken:
        side = _side(mnt.path(fname, osp.dirname(n)), osp.basename(n))
        assert side['error'] and side['is_array'] is False
        assert not osp.exists(mnt.path(fname, n + '.npy'))


def test_external_storage_and_external_link_to_group(src, mnt):
    with h5py.File(osp.join(src['dir'], 'external.h5'), 'r') as f:
        side = check_array(mnt.path('external.h5'), 'raw_storage', f['raw_storage'][()])
        assert side['read_path'].startswith('library')
        check_array(mnt.path('external.h5', 'elinked'), 'data', f['elinked/data'][()])
    assert sorted(os.listdir(mnt.mnt)).count('external_segment.bin') == 0


def test_tiny_cache_one_thread(src, mount):
    """Chunks far bigger than the decoded-chunk cache (4 MiB chunks, 64 KiB cache), one decode
    thread: random boxes through mmap still equal h5py."""
    m = mount(src['dir'], 'cache_size=64K,threads=1')
    rng = np.random.default_rng(11)
    with h5py.File(osp.join(src['dir'], 'zoo_latest.h5'), 'r') as f:
        for name in ('chunks/big_4MiB_default_gzip', 'blosc/zstd_bitshuffle',
                     'chunks/one_element_extensible_40000', 'shrunk/then_grown'):
            d = f[name]
            mm = np.load(m.path('zoo_latest.h5', name + '.npy'), mmap_mode='r')
            for _ in range(15):
                lo = [int(rng.integers(0, n)) for n in d.shape]
                box = tuple(slice(l, l + int(rng.integers(1, 40))) for l in lo)
                assert np.array(mm[box]).tobytes() == d[box].tobytes(), (name, box)
            del mm


# -- non-arrays, attributes ---------------------------------------------------------------------

@pytest.mark.parametrize('libver', LIBVERS)
def test_not_arrays_only_json(src, mnt, libver):
    fdir = mnt.path(f'misc_{libver}.h5', 'na')
    names = sorted(os.listdir(fdir))
    arrays = {'target', 'after', 'after_hardlink'}
    non = ['empty_f4', 'empty_compound', 'objrefs', 'regionrefs', 'vlen_i4', 'vlen_bytes',
           'compound_with_vlen']
    assert names == sorted([n + '.json' for n in non] + ['.attrs.json'] +
                           [a + s for a in arrays for s in ('.npy', '.raw', '.json')])
    for n in non:
        side = _side(fdir, n)
        assert side['is_array'] is False, (n, side)
        assert side['why_not_array'] and side['read_path'].startswith('none'), side
        for ext in ('.npy', '.raw'):
            with pytest.raises(FileNotFoundError):
                os.stat(osp.join(fdir, n + ext))
    assert _side(fdir, 'vlen_bytes')['value'] == ['ab', 'cde']
    # the arrays next to them read fine
    with h5py.File(osp.join(src['dir'], f'misc_{libver}.h5'), 'r') as f:
        for a in arrays:
            check_array(fdir, a, f['na/' + a][()])
    _mount_alive(mnt)


def test_not_array_compound_dtype_is_null(src, mnt):
    assert _side(mnt.path('misc_latest.h5', 'na'), 'compound_with_vlen')['dtype'] is None


@pytest.mark.parametrize('libver', LIBVERS)
def test_attributes(src, mnt, libver):
    side = _side(mnt.path(f'misc_{libver}.h5', 'attrs'), 'd')
    attrs = side['attrs']
    with h5py.File(osp.join(src['dir'], f'misc_{libver}.h5'), 'r') as f:
        h = dict(f['attrs/d'].attrs)
    assert set(attrs) == set(h)

    def to_json(v):
        v = np.asarray(v) if not isinstance(v, (str, list)) else v
        if isinstance(v, list):
            return [to_json(x) for x in v]
        if isinstance(v, str):
            return v
        if v.dtype.kind == 'S':
            return v.tolist().decode() if v.ndim == 0 else [x.decode() for x in v.tolist()]
        if v.dtype.kind == 'O':
            return [x.decode() if isinstance(x, bytes) else x for x in v.tolist()]
        if v.dtype.kind == 'f':
            if v.ndim:
                return [to_json(x) for x in v]
            x = float(v)
            return 'nan' if x != x else ('inf' if x == np.inf else ('-inf' if x == -np.inf
                                                                      else x))
        return v.tolist()
    for k in ATTRS:
        assert attrs[k] == to_json(h[k]), (k, attrs[k], h[k])
    # exact beyond 2**53
    raw = pread(mnt.path(f'misc_{libver}.h5', 'attrs', 'd.json'))
    json.loads(raw, parse_constant=lambda c: pytest.fail(f'non-JSON constant {c}'))
    for k in list(ATTRS_NOT_JSON) + ['enum2', 'ref']:
        assert k in attrs


@pytest.mark.parametrize('libver', LIBVERS)
def test_enum_attribute_value(src, mnt, libver):
    attrs = _side(mnt.path(f'misc_{libver}.h5', 'attrs'), 'd')['attrs']
    assert attrs['enum2'] == 3


@pytest.mark.parametrize('libver', LIBVERS)
def test_dimension_scales(src, mnt, libver):
    mdir = mnt.path(f'misc_{libver}.h5', 'scales')
    with h5py.File(osp.join(src['dir'], f'misc_{libver}.h5'), 'r') as f:
        for n in ('image', 'x', 'y'):
            side = check_array(mdir, n, f['scales/' + n][()])
            assert set(side['attrs']) == set(f['scales/' + n].attrs), n
    assert _side(mdir, 'x')['attrs']['CLASS'] == 'DIMENSION_SCALE'
    assert _side(mdir, 'x')['attrs']['NAME'] == 'x'


@pytest.mark.parametrize('libver', LIBVERS)
def test_groups_and_files_with_attributes_only(src, mnt, libver):
    # their attributes are in .attrs.json (docs/sidecar.md, "Attributes of groups and files")
    only = mnt.path(f'misc_{libver}.h5', 'attrs', 'only_attrs')
    assert os.listdir(only) == ['.attrs.json']
    with h5py.File(osp.join(src['dir'], f'misc_{libver}.h5'), 'r') as f:
        assert set(_side(only, '.attrs')['attrs']) == set(f['attrs/only_attrs'].attrs)
    top = mnt.path(f'misc_{libver}_attrs_only.h5')
    assert sorted(os.listdir(top)) == ['.attrs.json', 'g']
    assert os.listdir(osp.join(top, 'g')) == ['.attrs.json']
    with h5py.File(osp.join(src['dir'], f'misc_{libver}_attrs_only.h5'), 'r') as f:
        assert set(_side(top, '.attrs')['attrs']) == set(f.attrs)
        assert set(_side(osp.join(top, 'g'), '.attrs')['attrs']) == set(f['g'].attrs)


@pytest.mark.parametrize('libver', LIBVERS)
def test_huge_sparse_through_mmap(src, mnt, libver):
    mdir = mnt.path(f'misc_{libver}.h5', 'huge')
    side = _side(mdir, 'sparse')
    assert side['shape'] == [100000, 20000] and side['fill_value'] == 'nan'
    npy = osp.join(mdir, 'sparse.npy')
    assert os.stat(npy).st_size == side['npy_data_offset'] + 100000 * 20000 * 8
    m = np.load(npy, mmap_mode='r')
    rng = np.random.default_rng(7)
    boxes = [(slice(0, 3), slice(0, 1000)), (slice(495, 505), slice(990, 1010)),
             (slice(50248, 50262), slice(6999, 7004)), (slice(99998, 100000), slice(19990, 20000))]
    for _ in range(6):
        i, j = int(rng.integers(0, 99990)), int(rng.integers(0, 19990))
        boxes.append((slice(i, i + 10), slice(j, j + 10)))
    with h5py.File(osp.join(src['dir'], f'misc_{libver}.h5'), 'r') as f:
        d = f['huge/sparse']
        for box in boxes:
            got, exp = np.array(m[box]), d[box]
            assert got.tobytes() == exp.tobytes(), box
    m2 = np.load(osp.join(mdir, 'contiguous_unwritten.npy'), mmap_mode='r')
    assert m2.shape == (10 ** 9,)
    for i in (0, 4095, 123456789, 10 ** 9 - 3):
        assert np.array_equal(m2[i:i + 3], np.full(len(m2[i:i + 3]), 1.5))
    del m2
    raw = osp.join(mdir, 'sparse.raw')
    with open(raw, 'rb') as fh:
        fh.seek(100000 * 20000 * 8 - 8)
        assert np.frombuffer(fh.read(), '<f8')[0] == 42
    del m


# -- names, many datasets -------------------------------------------------------------------------

def test_odd_names(src, mnt):
    """Spaces, tabs, backslashes, unicode (NFC and combining), leading dots, '..', names ending
    in .npy/.json/.raw next to the dataset they extend, names differing in case, and names
    whose NAME.npy exceeds NAME_MAX (255 bytes; FUSE itself allows 1024 and more)."""
    gdir = mnt.path('names.h5', 'names')
    listing = os.listdir(gdir)
    expected = {n + ext for n in ODD_NAMES for ext in ('.npy', '.raw', '.json')} | {'..grp', '.attrs.json'}
    assert set(listing) == expected and len(listing) == len(expected)
    with h5py.File(osp.join(src['dir'], 'names.h5'), 'r') as f:
        for n in ODD_NAMES:
            check_array(gdir, n, f['names/' + n][()])
            assert _side(gdir, n)['path'] == '/names/' + n
        np.testing.assert_array_equal(np.load(mnt.path('names.h5', '.h5direct.npy')),
                                      np.arange(4))
    np.testing.assert_array_equal(np.load(osp.join(gdir, '..grp', 'inside.npy')), np.arange(3))
    _mount_alive(mnt)


NON_UTF8_JSONS = [b'non_utf8_inside.h5/ds_' + NON_UTF8 + b'.json',
                  b'non_utf8_inside.h5/grp_' + NON_UTF8 + b'/inside.json',
                  b'non_utf8_inside.h5/attr_name.json',
                  b'file_' + NON_UTF8 + b'.h5/x.json']


def test_names_not_utf8_arrays(src, mnt):
    root = os.fsencode(mnt.mnt)
    listing = os.listdir(osp.join(root, b'non_utf8_inside.h5'))
    assert b'ds_' + NON_UTF8 + b'.npy' in listing and b'grp_' + NON_UTF8 in listing
    for p, n in ((b'non_utf8_inside.h5/ds_' + NON_UTF8, 4),
                 (b'non_utf8_inside.h5/grp_' + NON_UTF8 + b'/inside', 5),
                 (b'file_' + NON_UTF8 + b'.h5/x', 8), (b'non_utf8_inside.h5/fine', 7)):
        np.testing.assert_array_equal(np.load(osp.join(root, p + b'.npy')), np.arange(n))
        assert pread(osp.join(root, p + b'.raw')) == np.arange(n, dtype='<i2').tobytes()
    side = _side(mnt.path('non_utf8_inside.h5'), 'fine')
    assert side['shape'] == [7]
    _mount_alive(mnt)


@pytest.mark.parametrize('rel', NON_UTF8_JSONS, ids=['dataset', 'group', 'attribute', 'file'])
def test_names_not_utf8_sidecars(src, mnt, rel):
    with open(osp.join(os.fsencode(mnt.mnt), rel), 'rb') as f:
        side = json.loads(f.read())
    assert side['is_array'] is True


@pytest.mark.parametrize('fname', ['many_latest.h5', 'many_earliest.h5', 'many_track_order.h5'])
def test_many_datasets_in_one_group(src, mnt, fname):
    gdir = mnt.path(fname, 'many')
    listing = os.listdir(gdir)
    expected = {'d%05d%s' % (i, ext) for i in range(N_MANY) for ext in ('.npy', '.raw', '.json')}
    expected.add('.attrs.json')
    assert len(listing) == len(expected) and set(listing) == expected
    assert sorted(os.listdir(mnt.path(fname))) == ['.attrs.json', 'alpha', 'many', 'zeta']
    rng = np.random.default_rng(3)
    with h5py.File(osp.join(src['dir'], fname), 'r') as f:
        for k in rng.choice(N_MANY, 25, replace=False):
            n = 'd%05d' % k
            exp = f['many/' + n][()]
            assert np.array_equal(np.load(osp.join(gdir, n + '.npy')), exp)
            assert pread(osp.join(gdir, n + '.raw')) == exp.tobytes()
        np.testing.assert_array_equal(np.load(mnt.path(fname, 'zeta', 'b.npy')), f['zeta/b'][()])


def test_mount_survived(mnt):
    _mount_alive(mnt)
