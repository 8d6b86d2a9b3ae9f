"""Virtual datasets: sources in the same file and in other files, strided mappings, gaps read as
the fill value, a missing source file (EIO by default, fill with -o vds_missing=fill)."""
import errno
import json
import os.path as osp

import h5py
import numpy as np
import pytest

import h5d_testlib as tl


@pytest.fixture(scope='module')
def src():
    d = tl.make_tmpdir('vds-src-')
    for i, name in enumerate(('a.h5', 'b.h5')):
        with h5py.File(osp.join(d, name), 'w') as f:
            f['data'] = np.arange(10, dtype='<i4') + 100 * (i + 1)
            f['img'] = (np.arange(4 * 6, dtype='<f4').reshape(4, 6) + 1000 * i)
    with h5py.File(osp.join(d, 'vds.h5'), 'w', libver='latest') as f:
        f['local'] = np.arange(8, dtype='<i4') * 3
        lay = h5py.VirtualLayout(shape=(8,), dtype='<i4')
        lay[:] = h5py.VirtualSource('.', 'local', shape=(8,))
        f.create_virtual_dataset('same_file', lay)

        lay = h5py.VirtualLayout(shape=(20,), dtype='<i4')
        lay[0:10] = h5py.VirtualSource('a.h5', 'data', shape=(10,))
        lay[10:20] = h5py.VirtualSource('b.h5', 'data', shape=(10,))
        f.create_virtual_dataset('concat', lay)

        lay = h5py.VirtualLayout(shape=(20,), dtype='<i4')
        lay[0::2] = h5py.VirtualSource('a.h5', 'data', shape=(10,))
        lay[1::2] = h5py.VirtualSource('b.h5', 'data', shape=(10,))
        f.create_virtual_dataset('strided', lay)

        lay = h5py.VirtualLayout(shape=(2, 4, 6), dtype='<f4')
        lay[0] = h5py.VirtualSource('a.h5', 'img', shape=(4, 6))
        lay[1] = h5py.VirtualSource('b.h5', 'img', shape=(4, 6))
        f.create_virtual_dataset('stack', lay, fillvalue=np.nan)

        lay = h5py.VirtualLayout(shape=(35,), dtype='<i4')
        lay[5:15] = h5py.VirtualSource('a.h5', 'data', shape=(10,))
        lay[20:25] = h5py.VirtualSource('b.h5', 'data', shape=(10,))[2:7]
        f.create_virtual_dataset('gaps', lay, fillvalue=-1)

        lay = h5py.VirtualLayout(shape=(20,), dtype='<i4')
        lay[0:10] = h5py.VirtualSource('a.h5', 'data', shape=(10,))
        lay[10:20] = h5py.VirtualSource('missing.h5', 'data', shape=(10,))
        f.create_virtual_dataset('missing', lay, fillvalue=-7)
    return d


@pytest.fixture(scope='module')
def mnt(src):
    m = tl.Mount(src)
    yield m
    m.close()


def expected(src, name):
    with h5py.File(osp.join(src, 'vds.h5'), 'r') as f:
        return f[name][()]


@pytest.mark.parametrize('name', ['same_file', 'concat', 'strided', 'stack', 'gaps'])
def test_vds_matches_h5py(src, mnt, name):
    side = tl.check_dataset_files(mnt.path('vds.h5'), name, expected(src, name))
    assert side['layout'] == 'virtual'
    assert side['virtual']['mappings']
    for m in side['virtual']['mappings']:
        assert {'file', 'dataset', 'vspace', 'srcspace'} <= set(m)


def test_vds_sidecar_lists_sources(src, mnt):
    side = json.load(open(mnt.path('vds.h5', 'concat.json')))
    files = side['virtual']['source_files']
    assert any(f.endswith('a.h5') for f in files) and any(f.endswith('b.h5') for f in files)
    assert side['virtual']['missing_files'] == []
    side = json.load(open(mnt.path('vds.h5', 'missing.json')))
    assert side['virtual']['missing_files'] == ['missing.h5']
    side = json.load(open(mnt.path('vds.h5', 'gaps.json')))
    assert side['fill_value'] == -1


def test_missing_source_is_eio_by_default(src, mnt):
    # (In cached mode the kernel reads whole pages, so any read of this small file touches the
    # missing part.)
    for name in ('missing.raw', 'missing.npy'):
        with pytest.raises(OSError) as e:
            with open(mnt.path('vds.h5', name), 'rb') as f:
                f.read()
        assert e.value.errno == errno.EIO
    # np.load reads the data with numpy.fromfile, which turns a failed read into a short one:
    # numpy then raises ValueError (cannot reshape), never returns the array.
    with pytest.raises((OSError, ValueError)):
        np.load(mnt.path('vds.h5', 'missing.npy'))
    # the mount survives
    assert json.load(open(mnt.path('vds.h5', 'missing.json')))['shape'] == [20]
    assert 'missing' in mnt.log()
    assert mnt.stats()['error_replies'].get('EIO', 0) >= 1


def test_missing_source_with_fill(src, mount):
    m = mount(src, 'vds_missing=fill')
    tl.check_dataset_files(m.path('vds.h5'), 'missing', expected(src, 'missing'))
