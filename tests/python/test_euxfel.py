"""EuXFEL run view end to end: runs written by euxfel_mock.py are mounted with mount.h5direct and
every key's .npy and its train-ID file are compared with the arrays EXtra-data would return
(computed by the generator from its inputs)."""
import json
import os
import os.path as osp
import shutil
import sys

import numpy as np
import pytest

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import euxfel_mock  # noqa: E402
from h5d_testlib import BIN, Mount, h5_files_holding, make_tmpdir  # noqa: E402

pytestmark = pytest.mark.skipif(not BIN or not osp.exists(BIN),
                                reason='H5DIRECT_BIN (the built mount.h5direct) is not set')


def _tmp_base():
    return make_tmpdir('euxfel-py-')


@pytest.fixture
def mount_factory():
    mounts = []

    def make(src, opts=None):
        m = Mount(src, opts)
        mounts.append(m)
        return m.mnt

    yield make
    for m in mounts:
        m.close()


def make_run(**kw):
    out = _tmp_base()
    euxfel_mock.build(out, image_dims=(2, 16, 8), **kw)
    with open(osp.join(out, 'expected', 'expected.json')) as f:
        return out, json.load(f)


def check_run_view(root, out, manifest):
    exp = osp.join(out, 'expected')
    assert np.array_equal(np.load(osp.join(root, 'trainId.npy')),
                          np.load(osp.join(exp, manifest['train_ids'])))
    meta = json.load(open(osp.join(root, 'run.json')))
    assert meta['run'] == 338
    assert set(meta['sources']) == set(manifest['sources'])
    checked = 0
    for k in manifest['keys']:
        src_dir = osp.join(root, *k['source'].split('/'))
        side = json.load(open(osp.join(src_dir, k['key'] + '.json')))
        assert side['is_array'] == k['is_array'], k
        assert side['rows'] == k['rows'], k
        tids = np.load(osp.join(src_dir, side['train_ids']))
        assert tids.dtype == np.uint64
        assert np.array_equal(tids, np.load(osp.join(exp, k['train_ids']))), k
        if not k['is_array']:
            assert not osp.exists(osp.join(src_dir, k['key'] + '.npy'))
            # every file's indexed rows in train order: no padding rows, not only the first file
            assert side['value'] == k['values'], (k, side['value'])
            assert side['value_rows'] == k['rows'] and 'value_cut' not in side
            continue
        arr = np.load(osp.join(src_dir, k['key'] + '.npy'))
        e = np.load(osp.join(exp, k['data']))
        assert arr.dtype == e.dtype and arr.shape == e.shape, k
        assert np.array_equal(arr, e), k
        raw = open(osp.join(src_dir, k['key'] + '.raw'), 'rb').read()
        assert raw == e.tobytes()
        # KeyData.attributes() reads the dataset the run was built from: in overview mode that is
        # the overview file's virtual dataset, to which EXtra-data's VirtualFileWriter (and the
        # mock's write_overview) copies no attributes.
        for a, v in ({} if manifest.get('overview') else k.get('attrs', {})).items():
            assert a in side['attrs']
        checked += 1
    assert checked > 10


@pytest.mark.parametrize('fmt', ['0.5', '1.0', '1.2', '1.3'])
def test_run_view_formats(mount_factory, fmt):
    out, m = make_run(format_version=fmt)
    try:
        root = mount_factory(m['run_dir'])
        check_run_view(root, out, m)
        rv = json.load(open(osp.join(root, 'SA1_XTD2_XGM', 'DOOCS', 'MAIN', '.run_values.json')))
        assert rv['run_values']['classId.value'] == 'DoocsXGM'
        assert os.listdir(osp.join(root, 'SA1_XTD2_XGM', 'DOOCS', 'MAIN', '.train_ids')) == \
            ['control.npy']
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_tree_of_runs_and_plain_files(mount_factory):
    """A proposal-like tree: raw/r0338 becomes a run view, a plain HDF5 file keeps its view."""
    out, m = make_run(format_version='1.3')
    try:
        import h5py
        with h5py.File(osp.join(out, 'plain.h5'), 'w') as f:
            f['x'] = np.arange(5)
        root = mount_factory(out)
        assert 'r0338' in os.listdir(osp.join(root, 'raw'))
        check_run_view(osp.join(root, 'raw', 'r0338'), out, m)
        assert np.array_equal(np.load(osp.join(root, 'plain.h5', 'x.npy')), np.arange(5))
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_run_view_off(mount_factory):
    out, m = make_run(format_version='1.3')
    try:
        root = mount_factory(m['run_dir'], 'run_view=off')
        names = os.listdir(root)
        assert 'RAW-R0338-DA01-S00000.h5' in names and 'run.json' not in names
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_overview_same_arrays(mount_factory):
    out, m = make_run(format_version='1.2', overview=True)
    try:
        root = mount_factory(m['run_dir'])
        meta = json.load(open(osp.join(root, 'run.json')))
        assert meta['overview_file'].endswith('overview.h5')
        check_run_view(root, out, m)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_corrected_legacy_links(mount_factory):
    out, m = make_run(scenario='corr', format_version='1.2')
    try:
        root = mount_factory(m['run_dir'])
        legacy = osp.join(root, 'SPB_DET_AGIPD1M-1', 'DET', '0CH0:xtdf')
        assert osp.islink(legacy)
        assert os.readlink(legacy) == '../CORR/0CH0:output'
        check_run_view(root, out, m)
        a = np.load(osp.join(legacy, 'image.data.npy'))
        b = np.load(osp.join(root, 'SPB_DET_AGIPD1M-1', 'CORR', '0CH0:output', 'image.data.npy'))
        assert np.array_equal(a, b)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_duplicated_train_reported(mount_factory):
    out, m = make_run(scenario='dup', format_version='1.3')
    try:
        root = mount_factory(m['run_dir'])
        check_run_view(root, out, m)
        side = json.load(open(osp.join(root, 'SA1_XTD2_XGM', 'DOOCS', 'MAIN',
                                       'pulseEnergy.photonFlux.value.json')))
        assert side['duplicate_trains'] == m['duplicates']['SA1_XTD2_XGM/DOOCS/MAIN']
        meta = json.load(open(osp.join(root, 'run.json')))
        assert any('conflicting data' in e for e in meta['errors'])
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_generated_run_has_a_usable_detector(mount_factory):
    """The generator's AGIPD modules agree on the frame count of every train (one pulse pattern,
    as at the facility) while missing trains and breaking sequences differently: the detector
    view is usable and AGIPD1M(run)['image.data'].ndarray() is every module's frames aligned by
    train (trains where a module has no data filled with 0), computed here from the generator's
    per-module expected arrays."""
    out, m = make_run(format_version='1.3')
    try:
        root = mount_factory(m['run_dir'])
        ddir = osp.join(root, 'SPB_DET_AGIPD1M-1')
        info = json.load(open(osp.join(ddir, 'detector.json')))
        assert info['usable'], info
        e, frame_tids = euxfel_mock.expected_stack(out, m)
        got = np.load(osp.join(ddir, 'image.data.npy'))
        assert got.shape == e.shape and np.array_equal(got, e)
        assert np.array_equal(np.load(osp.join(ddir, '.train_ids', 'image.npy')), frame_tids)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _row_blocks_from_files(run_dir, source, section, group, dset_path):
    """The blocks of a key's rows as EXtra-data reads them, from the sequence files (h5py): per
    file holding the source, its trains (INDEX/trainId without the zero padding) and the group's
    INDEX first/count cut to them; each file's rows are one block, [first[0], first[0] +
    sum(count)) of its dataset (every train included: inc_suspect_trains). Blocks in order of
    their first train; files without rows give none."""
    blocks = []
    for name, f in h5_files_holding(run_dir, f'{section}/{source}'):
        tids = f['INDEX/trainId'][:]
        tids = tids[tids != 0]
        ipath = f'INDEX/{source}' + (f'/{group}' if group else '')
        first = f[ipath + '/first'][:len(tids)].astype(np.int64)
        count = f[ipath + '/count'][:len(tids)].astype(np.int64)
        n = int(count.sum())
        if n == 0:
            continue
        d = f[dset_path]
        row_tids = np.repeat(tids, count)
        blocks.append(dict(file=name, dataset_rows=[int(first[0]), int(first[0]) + n],
                           first_train=int(row_tids[0]), last_train=int(row_tids[-1]),
                           chunk_rows=d.chunks[0] if d.chunks else None, n=n, t0=int(tids[0])))
    blocks.sort(key=lambda b: b['t0'])
    pos = 0
    for b in blocks:
        b['rows'] = [pos, pos + b['n']]
        pos += b['n']
        del b['n'], b['t0']
    return blocks


def test_key_sidecar_gives_train_range_and_row_chunking(mount_factory):
    """A key's .json gives its first and last train ID and how its rows are stored: one block per
    sequence file's rows (rows, the file, its dataset's rows, train range, the dataset's chunk
    rows), and row_chunks, those blocks' row counts, ready for dask's chunks= (each dask chunk
    then reads one file). The oracle: h5py reading each sequence file's INDEX and dataset."""
    da = pytest.importorskip('dask.array')
    out, m = make_run(format_version='1.3')
    try:
        root = mount_factory(m['run_dir'])
        checked = 0
        for k in m['keys']:
            src_dir = osp.join(root, *k['source'].split('/'))
            side = json.load(open(osp.join(src_dir, k['key'] + '.json')))
            tids = np.load(osp.join(src_dir, side['train_ids']))
            if k['rows'] == 0:
                assert side['first_train'] is None and side['last_train'] is None
                assert side['row_blocks'] == [] and side['row_chunks'] == []
                continue
            assert side['first_train'] == int(tids[0]) and side['last_train'] == int(tids[-1]), k
            want = _row_blocks_from_files(m['run_dir'], k['source'], side['section'], k['group'],
                                          side['dataset_path'])
            assert side['row_blocks'] == want, (k, side['row_blocks'], want)
            assert side['row_chunks'] == [b['rows'][1] - b['rows'][0] for b in want]
            assert sum(side['row_chunks']) == side['rows']
            if k['is_array'] and k['key'] == 'image.data':
                a = np.load(osp.join(src_dir, k['key'] + '.npy'), mmap_mode='r')
                x = da.from_array(a, chunks=(tuple(side['row_chunks']),) + a.shape[1:])
                assert np.array_equal(x.compute(), np.load(osp.join(out, 'expected', k['data'])))
            checked += 1
        # sequence breaks differ per module: several files, chunk rows differing between files
        assert checked > 10
        assert any(len({b['chunk_rows'] for b in json.load(open(osp.join(
            root, *k['source'].split('/'), k['key'] + '.json')))['row_blocks']}) > 1
            for k in m['keys'] if k['rows'])
    finally:
        shutil.rmtree(out, ignore_errors=True)
