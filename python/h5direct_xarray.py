"""Labelled arrays from an h5direct mount of a European XFEL run (docs/euxfel.md, "Labelled
arrays: xarray").

A key's KEY.npy, its KEY.json and the train-ID file the .json names make what EXtra-data's
run[source, key].xarray() returns: an xarray.DataArray (a Dataset for structured dtypes) whose
first dimension 'trainId' is labelled with the train ID of every row, named like EXtra-data's
(source.key, CONTROL keys without '.value'), with the key's units in attrs. The array stays a
memory map of the .npy: nothing is read until used.

    import h5direct_xarray as hx
    xgm = hx.key_xarray('/mnt/r0338/SA1_XTD2_XGM/DOOCS/MAIN:output/data.intensityTD.npy')
    # or hx.run_key('/mnt/r0338', 'SA1_XTD2_XGM/DOOCS/MAIN:output', 'data.intensityTD')
    some = hx.select_trains(xgm, [10002, 10003])    # by train ID, in the run's order
    xgm.sel(trainId=10002)                           # plain xarray works too

Pure Python; needs numpy and xarray (Debian: python3-xarray). Not needed by h5direct itself.
"""
import json
import os.path as osp

import numpy as np

__all__ = ['key_xarray', 'run_key', 'select_trains', 'units']


def units(attrs):
    """KeyData.units: metricPrefixSymbol + unitSymbol ('u' shown as 'μ'), None without a unit."""
    def text(v):
        if isinstance(v, list) and len(v) == 1:   # a 1-element attribute array
            v = v[0]
        return v if isinstance(v, str) else None
    base = text(attrs.get('unitSymbol'))
    if base is None:
        return None
    prefix = text(attrs.get('metricPrefixSymbol')) or ''
    return ('μ' if prefix == 'u' else prefix) + base


def key_xarray(npy_path, extra_dims=None, name=None, mmap=True):
    """run[source, key].xarray() from a mounted key's .npy (its .json and train IDs beside it).

    extra_dims: names of the dimensions after 'trainId' (default dim_0, dim_1, ...), as
    EXtra-data's; name: the array's name (default as EXtra-data's); mmap=False reads the
    whole array now instead of mapping it."""
    import xarray
    if not npy_path.endswith('.npy'):
        raise ValueError(f'{npy_path}: not a key .npy')
    side_path = npy_path[:-4] + '.json'
    with open(side_path) as f:
        side = json.load(f)
    if 'train_ids' not in side or 'source' not in side:
        raise ValueError(f'{side_path}: not a EuXFEL run key (no train_ids / source)')
    data = np.load(npy_path, mmap_mode='r' if mmap else None)
    tids = np.load(osp.join(osp.dirname(npy_path), side['train_ids']))
    if len(tids) != len(data):
        raise ValueError(f'{npy_path}: {len(data)} rows but {len(tids)} train IDs')
    if extra_dims is None:
        extra_dims = ['dim_%d' % i for i in range(data.ndim - 1)]
    dims = ['trainId'] + list(extra_dims)
    coords = {'trainId': tids}
    attrs = {}
    u = units(side.get('attrs', {}))
    if u:
        attrs['units'] = u
    if data.dtype.names is not None:   # structured: one variable per field, as EXtra-data
        return xarray.Dataset({f: (dims, data[f]) for f in data.dtype.names},
                              coords=coords, attrs=attrs)
    if name is None:
        name = f"{side['source']}.{side['key']}"
        if name.endswith('.value') and side.get('section') == 'CONTROL':
            name = name[:-6]
    return xarray.DataArray(data, dims=dims, coords=coords, name=name, attrs=attrs)


def run_key(run_dir, source, key, **kw):
    """key_xarray for (source, key) of the run view mounted at run_dir."""
    return key_xarray(osp.join(run_dir, *source.split('/'), key + '.npy'), **kw)


def select_trains(arr, train_ids):
    """The rows of the given train IDs, in the array's (the run's) order, as EXtra-data's
    run.select_trains(by_id[train_ids])[source, key].xarray(): a list of IDs (IDs without data
    left out) or a slice of IDs (start <= ID < stop, as by_id[start:stop]); every row of a
    train with several is kept."""
    tids = arr['trainId'].values
    if isinstance(train_ids, slice):
        if train_ids.step not in (None, 1):
            raise ValueError('select_trains: a slice of train IDs takes no step')
        keep = np.ones(len(tids), bool)
        if train_ids.start is not None:
            keep &= tids >= train_ids.start
        if train_ids.stop is not None:
            keep &= tids < train_ids.stop
    else:
        keep = np.isin(tids, np.asarray(train_ids, dtype=np.uint64))
    return arr.isel(trainId=np.nonzero(keep)[0])
