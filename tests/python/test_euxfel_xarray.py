"""The xarray recipe (docs/euxfel.md, "Labelled arrays: xarray"; python/h5direct_xarray.py):
a mounted key's .npy + .json + train IDs give what EXtra-data's run[source, key].xarray()
returns, and select_trains what run.select_trains(by_id[...]) gives. The expected arrays are
built here with xarray from the HDF5 files read with h5py (test_extra_data_mocks.read_oracle),
EXtra-data's rules applied to them: dims ('trainId', 'dim_0', ...), the trainId coordinate,
name 'source.key' (CONTROL keys without '.value'), attrs units (metricPrefixSymbol +
unitSymbol, 'u' as 'μ'), a Dataset of fields for structured dtypes."""
import os.path as osp
import shutil
import sys

import numpy as np
import pytest

h5py = pytest.importorskip('h5py')
xr = pytest.importorskip('xarray')

HERE = osp.dirname(osp.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, osp.join(HERE, '..', '..', 'python'))
import h5direct_xarray as hx  # noqa: E402
import test_extra_data_mocks as edm  # noqa: E402
from h5d_testlib import BIN  # noqa: E402

pytestmark = pytest.mark.skipif(not BIN or not osp.exists(BIN),
                                reason='H5DIRECT_BIN (the built mount.h5direct) is not set')


def _attrs(run_dir, src, key, section):
    """KeyData.attributes() of the key's first file, decoded (EXtra-data keeps bytes)."""
    for name in sorted(n for n in __import__('os').listdir(run_dir) if n.endswith('.h5')):
        with h5py.File(osp.join(run_dir, name), 'r') as f:
            path = f'{section}/{src}/{key.replace(".", "/")}'
            if path not in f:
                continue
            attrs = dict(f[path].attrs)
            if section == 'CONTROL' and key.endswith('.value'):
                attrs.update(f[path.rsplit('/', 1)[0]].attrs)
            return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
    return {}


def expected_xarray(run_dir, oracle, src, key):
    ent = oracle['sources'][src]
    k = ent['keys'][key]
    data = k['data']
    dims = ['trainId'] + ['dim_%d' % i for i in range(data.ndim - 1)]
    coords = {'trainId': k['tids']}
    a = _attrs(run_dir, src, key, ent['section'])
    attrs = {}
    if 'unitSymbol' in a:
        prefix = a.get('metricPrefixSymbol', '')
        attrs['units'] = ('μ' if prefix == 'u' else prefix) + a['unitSymbol']
    if data.dtype.names:
        return xr.Dataset({f: (dims, data[f]) for f in data.dtype.names}, coords=coords,
                          attrs=attrs)
    name = f'{src}.{key}'
    if name.endswith('.value') and ent['section'] == 'CONTROL':
        name = name[:-6]
    return xr.DataArray(data, dims=dims, coords=coords, name=name, attrs=attrs)


@pytest.fixture
def spb():
    base, run_dir = edm._run(edm.make_spb_run, raw=True, format_version='1.0', frames=2)
    yield run_dir
    shutil.rmtree(base, ignore_errors=True)


KEYS = [('SA1_XTD2_XGM/DOOCS/MAIN', 'beamPosition.ixPos.value'),
        ('SA1_XTD2_XGM/DOOCS/MAIN:output', 'data.intensityTD'),
        ('SPB_IRU_CAM/CAM/SIDEMIC:daqOutput', 'data.image.pixels'),
        ('SPB_DET_AGIPD1M-1/DET/0CH0:xtdf', 'image.data'),
        ('SPB_DET_AGIPD1M-1/DET/1CH0:xtdf', 'header.pulseCount')]


def test_key_xarray_is_extra_datas(spb, mount):
    m = mount(spb)
    oracle = edm.read_oracle(spb)
    for src, key in KEYS:
        got = hx.run_key(m.mnt, src, key)
        exp = expected_xarray(spb, oracle, src, key)
        xr.testing.assert_identical(got, exp)
        assert got.dtype == exp.dtype and got.trainId.dtype == np.uint64
    assert hx.run_key(m.mnt, *KEYS[1]).attrs['units'] == 'μJ'
    named = hx.run_key(m.mnt, *KEYS[2], extra_dims=['y', 'x'], mmap=False)
    assert named.dims == ('trainId', 'y', 'x')


def test_select_trains_by_id(spb, mount):
    m = mount(spb)
    oracle = edm.read_oracle(spb)
    for src, key in KEYS[1], KEYS[3]:
        arr = hx.run_key(m.mnt, src, key)
        exp = expected_xarray(spb, oracle, src, key)
        ids = [10003, 10040, 10041, 99999]   # 99999: no such train, left out
        want = exp.isel(trainId=np.nonzero(np.isin(exp.trainId.values, ids))[0])
        got = hx.select_trains(arr, ids)
        xr.testing.assert_identical(got, want)
        assert set(got.trainId.values) == {10003, 10040, 10041}
        rng = hx.select_trains(arr, slice(10010, 10020))
        assert np.array_equal(np.unique(rng.trainId.values), np.arange(10010, 10020))
        xr.testing.assert_identical(
            rng, exp.isel(trainId=np.nonzero((exp.trainId.values >= 10010)
                                             & (exp.trainId.values < 10020))[0]))
        # plain xarray label selection on the trainId coordinate works as well
        one = arr.sel(trainId=10003)
        assert np.array_equal(np.asarray(one), np.asarray(want.sel(trainId=10003)))


def test_structured_key_gives_a_dataset(mount):
    base, run_dir = edm._run(edm.make_remi_run)
    try:
        m = mount(run_dir)
        oracle = edm.read_oracle(run_dir)
        src = 'SQS_REMI_DLD6/DET/TOP:output'
        keys = [k for k, v in oracle['sources'][src]['keys'].items()
                if v['is_array'] and v['dtype'].names]
        assert keys
        for key in keys:
            got = hx.run_key(m.mnt, src, key)
            assert isinstance(got, xr.Dataset)
            xr.testing.assert_identical(got, expected_xarray(run_dir, oracle, src, key))
    finally:
        shutil.rmtree(base, ignore_errors=True)
