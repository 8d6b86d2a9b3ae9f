"""Attributes of groups and files (docs/sidecar.md, "Attributes of groups and files"): every
group's directory (the file's root included) holds .attrs.json with the group's attributes, by
the rules of a dataset sidecar's attrs; listing reads no attribute values (the file is rendered
at its first stat or open, and its size is then the bytes a read returns). Values are compared with h5py's."""
import json
import os
import os.path as osp
import shutil

import numpy as np
import pytest

h5py = pytest.importorskip('h5py')

from h5d_testlib import BIN, make_tmpdir  # noqa: E402

pytestmark = pytest.mark.skipif(not BIN or not osp.exists(BIN),
                                reason='H5DIRECT_BIN (the built mount.h5direct) is not set')


def _py(v):
    """h5py's attribute value as the sidecar's JSON gives it."""
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray):
        return [_py(x) for x in v.tolist()] if v.ndim else _py(v[()])
    if isinstance(v, list):
        return [_py(x) for x in v]
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, np.generic):
        return v.item()
    return v


@pytest.fixture
def nexus_file():
    d = make_tmpdir('gattrs-')
    p = osp.join(d, 'scan.h5')
    with h5py.File(p, 'w') as f:
        f.attrs['title'] = 'a NeXus-like scan'
        f.attrs['file_version'] = np.int32(3)
        e = f.create_group('entry')
        e.attrs['NX_class'] = b'NXentry'
        e.attrs['default'] = 'data'
        g = e.create_group('instrument')
        g.attrs['NX_class'] = np.bytes_('NXinstrument')
        g.attrs['offsets'] = np.array([1.5, -2.0, 3.25])
        g.attrs['flag'] = np.bool_(True)
        g.attrs['counts'] = np.arange(6, dtype='u2').reshape(2, 3)
        g.attrs['names'] = np.array(['x', 'yy'], dtype=h5py.string_dtype())
        e.create_group('empty')
        e['data'] = np.arange(4)
        e['.attrs'] = np.arange(3)          # a dataset whose files would be .attrs.json
        other = f.create_group('other')
        other.attrs['lost'] = 1
        other.create_group('.attrs.json').attrs['x'] = 1   # a group holding the name itself
    yield d, p
    shutil.rmtree(d, ignore_errors=True)


def test_group_and_file_attributes(nexus_file, mount):
    d, p = nexus_file
    m = mount(d)
    root = m.path('scan.h5')
    # listed without reading values; its first stat renders it: the size is the bytes read
    assert '.attrs.json' in os.listdir(root)
    size = os.stat(osp.join(root, '.attrs.json')).st_size
    with open(osp.join(root, '.attrs.json'), 'rb') as fh:
        assert size == len(fh.read()) > 0
    with h5py.File(p, 'r') as f:
        for group, where in (('/', root), ('/entry', osp.join(root, 'entry')),
                             ('/entry/instrument', osp.join(root, 'entry', 'instrument')),
                             ('/entry/empty', osp.join(root, 'entry', 'empty'))):
            side = json.load(open(osp.join(where, '.attrs.json')))
            assert side['path'] == group and side['file'] == p
            assert side['kind'] == ('file' if group == '/' else 'group')
            want = {k: _py(v) for k, v in f[group].attrs.items()}
            assert side['attrs'] == want, (group, side['attrs'], want)
            assert os.stat(osp.join(where, '.attrs.json')).st_size > 0
    assert json.load(open(osp.join(root, '.attrs.json')))['attrs']['title'] == 'a NeXus-like scan'
    assert json.load(open(osp.join(root, 'entry', '.attrs.json')))['attrs']['NX_class'] == 'NXentry'
    # the dataset named .attrs moves aside
    entry = sorted(os.listdir(osp.join(root, 'entry')))
    assert '.attrs~ds.npy' in entry and '.attrs.json' in entry
    assert np.array_equal(np.load(osp.join(root, 'entry', '.attrs~ds.npy')), np.arange(3))
    # a group named .attrs.json keeps its name (its parent's attributes are then not shown)
    # and shows its own attributes inside
    assert osp.isdir(osp.join(root, 'other', '.attrs.json'))
    inner = json.load(open(osp.join(root, 'other', '.attrs.json', '.attrs.json')))
    assert inner['attrs'] == {'x': 1} and inner['path'] == '/other/.attrs.json'
    assert 'its attributes are not shown' in m.log()
    assert m.proc.poll() is None
