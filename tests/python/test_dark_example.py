"""The dark-characterisation example end to end: dark runs written by dark_mock.py are mounted with
mount.h5direct; docs/examples/dark_characterisation.py (Dask LocalCluster, reads through the
mount) and docs/examples/dark_reference.py (serial h5py on the original files) must write the
same constants bit for bit, and those must match the generator's truth: offsets and noise within
statistical tolerance, planted bad pixels (and only those) flagged."""
import json
import os
import os.path as osp
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

HERE = osp.dirname(osp.abspath(__file__))
sys.path.insert(0, HERE)
import dark_mock  # noqa: E402
import h5d_testlib  # noqa: E402

EXAMPLES = osp.join(HERE, '..', '..', 'docs', 'examples')
sys.path.insert(0, EXAMPLES)
import dark_common  # noqa: E402
from dark_common import BadPixels  # noqa: E402

BIN = h5d_testlib.BIN
PY = '/usr/bin/python3' if osp.exists('/usr/bin/python3') else sys.executable
SIZE = dict(modules=3, cells=8, trains=48, pixels=(32, 16), trains_per_file=16, seed=7)


@pytest.fixture(scope='module')
def dark_runs():
    out = h5d_testlib.make_tmpdir('dark-py-')
    try:
        yield out, dark_mock.build(out, **SIZE)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_dark_mock_layout(dark_runs):
    """The generated runs look like raw AGIPD dark runs (what the examples rely on)."""
    out, man = dark_runs
    py, px = SIZE['pixels']
    assert set(man['runs']) == {'high', 'medium', 'low'}
    with h5py.File(man['truth'], 'r') as t:
        true_offset = t['offset'][()]
        dead = t['dead'][()]
    for gi, gain in enumerate(dark_common.GAINS):
        run = man['runs'][gain]
        for mi, m in enumerate(man['modules']):
            files = sorted(f for f in os.listdir(run) if f'-AGIPD{m:02d}-' in f)
            assert len(files) >= 3  # several sequence files per module
            tids_all, cells_all, data0 = [], [], []
            for fn in files:
                with h5py.File(osp.join(run, fn), 'r') as f:
                    src = dark_common.source_name(m)
                    img = f[f'INSTRUMENT/{src}/image']
                    ds = img['data']
                    assert ds.dtype == np.uint16 and ds.shape[1:] == (2, py, px)
                    assert ds.chunks == (1, 2, py, px) and ds.compression is None
                    ntr = np.count_nonzero(f['INDEX/trainId'][()])
                    first = f[f'INDEX/{src}/image/first'][:ntr]
                    count = f[f'INDEX/{src}/image/count'][:ntr]
                    n = int(count.sum())
                    assert ds.shape[0] > n  # padded beyond the index
                    assert img['cellId'].shape[1:] == (1,) and img['trainId'].shape[1:] == (1,)
                    assert img['pulseId'].shape[1:] == (1,)
                    tids_all.append(img['trainId'][:n, 0])
                    cells_all.append(img['cellId'][:n, 0])
                    data0.append(ds[:n, 0])
                    assert np.array_equal(first, np.concatenate([[0], np.cumsum(count)[:-1]]))
            tids = np.concatenate(tids_all)
            cells = np.concatenate(cells_all)
            data = np.concatenate(data0)
            missing = [x['train'] for x in man['missing_trains']
                       if x['gain'] == gain and x['module'] == m]
            assert len(np.unique(tids)) == SIZE['trains'] - len(missing)
            assert np.array_equal(np.bincount(cells), np.full(SIZE['cells'],
                                                              SIZE['trains'] - len(missing)))
            # a dead pixel reads its (integer) offset of the memory cell in every frame
            for _, _, y, x in dead[dead[:, 0] == mi]:
                assert np.array_equal(data[:, y, x], true_offset[mi, gi, cells, y, x])
    assert man['missing_trains'], 'one module should miss a train'


@pytest.mark.skipif(not BIN or not osp.exists(BIN),
                    reason='H5DIRECT_BIN (the built mount.h5direct) is not set')
def test_dark_example_matches_reference_and_truth(dark_runs, mount):
    pytest.importorskip('distributed')
    out, man = dark_runs
    mnt = mount(osp.join(out, 'raw'))
    mounted = [mnt.path(man['run_names'][g]) for g in dark_common.GAINS]
    originals = [man['runs'][g] for g in dark_common.GAINS]
    ref_h5 = osp.join(out, 'dark_reference.h5')
    dask_h5 = osp.join(out, 'dark_dask.h5')
    r = subprocess.run([PY, osp.join(EXAMPLES, 'dark_reference.py'), *originals, '-o', ref_h5],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([PY, osp.join(EXAMPLES, 'dark_characterisation.py'), *mounted,
                        '-o', dask_h5, '--workers', '2', '--threads-per-worker', '1',
                        '--cells-per-task', '3'],
                       capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr

    # 1. the same constants, bit for bit
    with h5py.File(ref_h5, 'r') as a, h5py.File(dask_h5, 'r') as b:
        names = []
        a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        assert len(names) == 3 * 4 + 1 + 3 * 4
        for n in names:
            x, y = a[n][()], b[n][()]
            assert x.dtype == y.dtype and x.shape == y.shape, n
            assert x.tobytes() == y.tobytes(), n  # bit-identical (NaN patterns included)
        assert json.loads(a.attrs['runs'])['high'] == osp.abspath(originals[0])
        assert json.loads(b.attrs['bad_pixel_flags'])['DATA_STD_IS_ZERO'] == 1 << 14

    # 2. the constants against the generator's truth
    with h5py.File(man['truth'], 'r') as t:
        truth = {k: t[k][()] for k in ('offset', 'noise', 'dead', 'hot', 'noisy', 'noisy_cell')}
    ncells = SIZE['cells']
    planted = np.zeros(truth['offset'].shape, np.uint32)  # expected flags (module, gain, cell,...)
    for mi, _, y, x in truth['dead']:
        planted[mi, :, :, y, x] |= BadPixels.DATA_STD_IS_ZERO | BadPixels.NOISE_OUT_OF_THRESHOLD
    for mi, _, y, x in truth['hot']:
        planted[mi, :, :, y, x] |= BadPixels.OFFSET_OUT_OF_THRESHOLD
    for mi, _, y, x in truth['noisy']:
        planted[mi, :, :, y, x] |= BadPixels.NOISE_OUT_OF_THRESHOLD
    for mi, c, y, x in truth['noisy_cell']:
        planted[mi, :, c, y, x] |= BadPixels.NOISE_OUT_OF_THRESHOLD
    zs_o, zs_n = [], []
    with h5py.File(dask_h5, 'r') as f:
        for mi, m in enumerate(man['modules']):
            g = f[f'module_{m:02d}']
            off, noi, bp, nfr = g['offset'][()], g['noise'][()], g['badpix'][()], g['n_frames'][()]
            for gi, gain in enumerate(dark_common.GAINS):
                missing = [x for x in man['missing_trains']
                           if x['gain'] == gain and x['module'] == m]
                assert np.all(nfr[gi] == SIZE['trains'] - len(missing))
                assert np.array_equal(bp[gi], planted[mi, gi]), (m, gain)
                good = planted[mi, gi] == 0
                n = nfr[gi][:, None, None].astype(float)
                tn = truth['noise'][mi, gi].astype(float)
                # numpy's std (ddof=0) is biased low: E[s] = c4(n) sqrt((n-1)/n) sigma
                c4 = 1 - 1 / (4 * n) - 7 / (32 * n ** 2)
                with np.errstate(divide='ignore', invalid='ignore'):  # dead pixels: noise 0
                    z_o = (off[gi] - truth['offset'][mi, gi]) / (tn / np.sqrt(n))
                    z_n = (noi[gi] - tn * c4 * np.sqrt((n - 1) / n)) / (tn / np.sqrt(2 * n))
                good &= tn > 0
                zs_o.append(z_o[good])
                zs_n.append(z_n[good])
                # hot pixels: the planted offset; dead pixels: exactly the constant, noise 0
                for mj, _, y, x in truth['hot']:
                    if mj == mi:
                        assert np.all(np.abs(off[gi, :, y, x] - 15000.) < 6 * 12)
                for mj, _, y, x in truth['dead']:
                    if mj == mi:
                        assert np.all(noi[gi, :, y, x] == 0)
                        assert np.array_equal(off[gi, :, y, x], truth['offset'][mi, gi, :, y, x])
        zo, zn = np.concatenate(zs_o), np.concatenate(zs_n)
        assert np.abs(zo).max() < 6 and np.abs(zn).max() < 6
        assert abs(zo.mean()) < 0.05 and 0.9 < zo.std() < 1.1, (zo.mean(), zo.std())
        assert abs(zn.mean()) < 0.1 and 0.85 < zn.std() < 1.15, (zn.mean(), zn.std())
        # statistics tables: per gain, module and cell
        for gi, gain in enumerate(dark_common.GAINS):
            st = f[f'statistics/{gain}']
            assert st['median_offset'].shape == (len(man['modules']), ncells)
            good = planted[:, gi] == 0
            for mi in range(len(man['modules'])):
                for c in range(ncells):
                    true_med = np.median(truth['offset'][mi, gi, c][good[mi, c]])
                    assert abs(st['median_offset'][mi, c] - true_med) < 5
                    assert st['bad_pixels'][mi, c] == np.count_nonzero(planted[mi, gi, c])
            flags = list(st['flag_counts'].attrs['flags'])
            k = flags.index('DATA_STD_IS_ZERO')
            assert np.all(st['flag_counts'][:, k] == ncells * 3)  # 3 dead pixels a module
