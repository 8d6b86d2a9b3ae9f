"""Detector views end to end: runs written by detector_mock.py (AGIPD-1M raw and corrected,
LPD-1M, DSSC-1M, two JUNGFRAU) are mounted with mount.h5direct and every stacked key (modules
first and frames first), its train IDs, fill mask and the pulse / cell IDs are compared with the
arrays EXtra-data's components would give, computed by the generator from its inputs."""
import json
import os
import os.path as osp
import shutil
import sys

import numpy as np
import pytest

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import detector_mock  # noqa: E402
from h5d_testlib import BIN, Mount, make_tmpdir  # noqa: E402

pytestmark = pytest.mark.skipif(not BIN or not osp.exists(BIN),
                                reason='H5DIRECT_BIN (the built mount.h5direct) is not set')


def _tmp_base():
    return make_tmpdir('detector-py-')


@pytest.fixture(scope='module', params=['raw', 'corr'])
def mounted(request):
    out = _tmp_base()
    detector_mock.build(out, request.param)
    with open(osp.join(out, 'expected', 'detectors.json')) as f:
        manifest = json.load(f)
    m = Mount(manifest['run_dir'])
    try:
        yield m.mnt, out, manifest
    finally:
        m.close()
        shutil.rmtree(out, ignore_errors=True)


def load(out, name):
    return np.load(osp.join(out, 'expected', name))


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_detectors_listed(mounted):
    root, out, manifest = mounted
    meta = json.load(open(osp.join(root, 'run.json')))
    assert set(meta['detectors']) == set(manifest['detectors'])
    for name, d in manifest['detectors'].items():
        dj = json.load(open(osp.join(root, name, 'detector.json')))
        assert dj['detector_class'] == d['class']
        assert [m['module'] for m in dj['modules']] == d['modules']
        assert dj['usable'] and dj['errors'] == []
        assert dj['train_count'] == len(load(out, d['train_ids']))
        assert set(dj['keys']) == set(d['keys'])
        # the module sources keep their directories below the detector's
        assert 'DET' in os.listdir(osp.join(root, name)) or 'CORR' in os.listdir(osp.join(root, name))


def test_stacked_keys_modules_first(mounted):
    root, out, manifest = mounted
    n = 0
    for name, d in manifest['detectors'].items():
        ddir = osp.join(root, name)
        for key, k in d['keys'].items():
            e = load(out, k['data'])
            a = np.load(osp.join(ddir, key + '.npy'))
            assert same(a, e), (name, key)
            assert open(osp.join(ddir, key + '.raw'), 'rb').read() == e.tobytes()
            side = json.load(open(osp.join(ddir, key + '.json')))
            assert side['shape'] == list(e.shape) and side['modules'] == d['modules']
            assert side['layout'] == 'modules_first'
            tids = np.load(osp.join(ddir, side['train_ids']))
            assert same(tids, load(out, k['train_ids']))
            filled = np.load(osp.join(ddir, side['filled']))
            assert same(filled, load(out, k['filled'])), (name, key)
            if e.dtype.kind == 'f':
                assert side['fill_value'] == 'NaN'
                assert np.isnan(a[filled]).all()
            n += 1
    assert n > 20


def test_stacked_keys_frames_first(mounted):
    root, out, manifest = mounted
    n = 0
    for name, d in manifest['detectors'].items():
        ffdir = osp.join(root, name, 'frames_first')
        for key, k in d['keys'].items():
            path = osp.join(ffdir, key + '.npy')
            if 'ff' not in k:
                assert not osp.exists(path), (name, key)
                continue
            e = load(out, k['ff'])
            a = np.load(path)
            assert same(a, e), (name, key)
            side = json.load(open(osp.join(ffdir, key + '.json')))
            assert side['layout'] == 'frames_first' and side['modules'] == d['module_slots']
            assert same(np.load(osp.join(ffdir, side['train_ids'])), load(out, k['ff_train_ids']))
            assert same(np.load(osp.join(ffdir, side['filled'])), load(out, k['ff_filled']))
            n += 1
    assert n > 5


def test_pulse_and_cell_ids(mounted):
    root, out, manifest = mounted
    for name, d in manifest['detectors'].items():
        if 'pulseId' not in d:
            continue
        for field, sub in (('pulseId', '.pulse_ids'), ('cellId', '.cell_ids')):
            a = np.load(osp.join(root, name, sub, 'image.npy'))
            assert same(a, load(out, d[field]).astype(np.uint64)), (name, field)
            assert same(np.load(osp.join(root, name, 'frames_first', sub, 'image.npy')), a)


def test_partial_reads_across_modules(mounted):
    """Byte ranges that start and end inside frames and span several modules."""
    root, out, manifest = mounted
    for name, d in manifest['detectors'].items():
        for key in ('image.data', 'data.adc'):
            if key not in d['keys']:
                continue
            for sub, field in (('', 'data'), ('frames_first', 'ff')):
                if field not in d['keys'][key]:
                    continue
                e = load(out, d['keys'][key][field]).tobytes()
                path = osp.join(root, name, sub, key + '.raw')
                rng = np.random.default_rng(len(e))
                with open(path, 'rb') as f:
                    for _ in range(20):
                        a = int(rng.integers(0, len(e)))
                        b = int(rng.integers(a, min(len(e), a + 3 * len(e) // 4) + 1))
                        f.seek(a)
                        assert f.read(b - a) == e[a:b], (name, key, sub, a, b)
