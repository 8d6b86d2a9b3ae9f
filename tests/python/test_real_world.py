"""Real-world file classes (issue 14) made with h5py, each checked against h5py/numpy: tagged
opaque datetime64, zero-size datasets memory-mapped, groups linking back to an ancestor, names
too long to list. (The corpus ones: test_corpus.py.)"""
import errno
import json
import os
import os.path as osp

import h5py
import numpy as np

from h5d_testlib import Mount, make_tmpdir


def test_real_world_classes():
    src = make_tmpdir('rw-src-')
    p = osp.join(src, 'f.h5')
    t = np.array(['2020-01-01T00:00:01', '2021-05-05', 'NaT'], dtype='datetime64[s]')
    long_name = 'L' * 3000
    with h5py.File(p, 'w') as f:
        f.create_dataset('t', data=t.view(h5py.opaque_dtype(t.dtype)))
        f.create_dataset('td', data=np.arange(4).astype('timedelta64[ms]').view(h5py.opaque_dtype('<m8[ms]')))
        f['empty'] = np.zeros((0, 5), '<f4')
        f.create_dataset('empty_chunked', shape=(0, 3), maxshape=(None, 3), dtype='<i8')
        g = f.create_group('g')
        g['x'] = np.arange(3)
        g['loop'] = g        # hard link back to itself
        g['up'] = f['/']     # and to the root
        g[long_name] = np.arange(2)
        g['after_long'] = np.arange(4)
    with h5py.File(p, 'r') as f:
        want_t, want_td = f['t'][()], f['td'][()]
        assert want_t.dtype == np.dtype('<M8[s]')  # h5py's reading of the tag
    ok = open(p, 'rb').read()
    with open(osp.join(src, 'unopenable.h5'), 'wb') as fb:  # the superblock zeroed after the signature
        fb.write(ok[:8] + bytes(56) + ok[64:])
    m = Mount(src)
    try:
        # A file libhdf5 cannot open: listed, then EIO with a log line saying why.
        assert 'unopenable.h5' in os.listdir(m.mnt)
        try:
            os.listdir(m.path('unopenable.h5'))
            raise AssertionError('listing an unopenable file succeeded')
        except OSError as e:
            assert e.errno == errno.EIO, e
        assert 'unopenable.h5: cannot open as HDF5' in m.log(), m.log()
        got = np.load(m.path('f.h5', 't.npy'))
        assert got.dtype == want_t.dtype and np.array_equal(got, want_t, equal_nan=True)
        got = np.load(m.path('f.h5', 'td.npy'))
        assert got.dtype == want_td.dtype and np.array_equal(got, want_td)
        with open(m.path('f.h5', 't.json')) as fj:
            assert json.load(fj)['dtype'] == '<M8[s]'
        for name, shape in [('empty', (0, 5)), ('empty_chunked', (0, 3))]:
            a = np.load(m.path('f.h5', name + '.npy'), mmap_mode='r')
            assert a.shape == shape
        listing = sorted(os.listdir(m.path('f.h5', 'g')))
        assert listing == ['.attrs.json', 'after_long.json', 'after_long.npy', 'after_long.raw',
                           'x.json', 'x.npy', 'x.raw'], listing
        assert np.array_equal(np.load(m.path('f.h5', 'g', 'after_long.npy')), np.arange(4))
        log = m.log()
        assert 'left out, a link back to a group above it' in log and 'g/loop' in log, log
        assert 'too long to list' in log, log
    finally:
        m.close()


def test_vds_source_behind_a_missing_external_link_is_in_missing_files():
    src = make_tmpdir('rw-vds-')
    with h5py.File(osp.join(src, 'a.h5'), 'w') as f:
        f['present'] = np.arange(4, dtype='<i4')
        f['linked'] = h5py.ExternalLink('gone.h5', '/data')  # gone.h5 does not exist
    with h5py.File(osp.join(src, 'vds.h5'), 'w') as f:
        lay = h5py.VirtualLayout(shape=(2, 4), dtype='<i4')
        lay[0] = h5py.VirtualSource('a.h5', 'present', shape=(4,))
        lay[1] = h5py.VirtualSource('a.h5', 'linked', shape=(4,))
        f.create_virtual_dataset('v', lay, fillvalue=-1)
    m = Mount(src)
    try:
        with open(m.path('vds.h5', 'v.json')) as fj:
            v = json.load(fj)['virtual']
        assert v['missing_files'] == ['a.h5:linked'], v
        assert [bool(mp.get('source_missing')) for mp in v['mappings']] == [False, True], v
    finally:
        m.close()
