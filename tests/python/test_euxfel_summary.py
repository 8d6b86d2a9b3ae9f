"""A run's summary (docs/euxfel.md, "Run summary"): run.json lists every source's keys, shapes,
dtypes and trains with data; timestamp.npy and flag.npy sit next to trainId.npy;
-o inc_suspect_trains; `h5direct info PATH` prints what extra-data-run-info prints, from a mount
and from the files; -o run_view=per_file shows the files beside the run view.

Runs are written with the re-implemented EXtra-data mock writers (test_extra_data_mocks.py);
the expected values come from the HDF5 files read back with h5py (read_oracle, and below the
rules of EXtra-data's train_timestamps(), validity_flag and display.info())."""
import json
import os
import os.path as osp
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

h5py = pytest.importorskip('h5py')

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import test_extra_data_mocks as edm  # noqa: E402
from h5d_testlib import BIN, descr_to_dtype  # noqa: E402

pytestmark = pytest.mark.skipif(not BIN or not osp.exists(BIN),
                                reason='H5DIRECT_BIN (the built mount.h5direct) is not set')

SUSPECT = 10005       # flagged invalid (INDEX/flag 0) in the first DA01 file only
ALL_SUSPECT = 10007   # flagged invalid in every file holding it


@pytest.fixture
def spb_run():
    base, run_dir = edm._run(edm.make_spb_run, raw=True, format_version='1.0', frames=2)
    for name in sorted(os.listdir(run_dir)):
        with h5py.File(osp.join(run_dir, name), 'a') as f:
            tids = f['INDEX/trainId'][:]
            for t in ((SUSPECT, ALL_SUSPECT) if name == 'RAW-R0238-DA01-S00000.h5'
                      else (ALL_SUSPECT,)):
                if t in tids:
                    f['INDEX/flag'][int(np.nonzero(tids == t)[0][0])] = 0
    yield run_dir
    shutil.rmtree(base, ignore_errors=True)


def _files(run_dir):
    return [osp.join(run_dir, n) for n in sorted(os.listdir(run_dir)) if n.endswith('.h5')]


def expected_timestamps_and_flags(run_dir, train_ids, inc_suspect=True):
    """DataCollection.train_timestamps() and, per run train, whether any file holding it marks
    it valid (FileAccess.validity_flag: INDEX/flag != 0 for format 1.0)."""
    ts = np.zeros(len(train_ids), 'u8')
    missing = set(int(t) for t in train_ids)
    valid = np.zeros(len(train_ids), 'u1')
    ix = {int(t): i for i, t in enumerate(train_ids)}
    for p in _files(run_dir):
        with h5py.File(p, 'r') as f:
            tids = f['INDEX/trainId'][:]
            tids = tids[tids != 0]
            flag = f['INDEX/flag'][:len(tids)] != 0
            for t, v in zip(tids, flag):
                if int(t) in ix and v:
                    valid[ix[int(t)]] = 1
            stamps = f['INDEX/timestamp'][:]
            for i, t in enumerate(tids):
                t = int(t)
                if t in missing and (inc_suspect or flag[i]):
                    ts[ix[t]] = stamps[i]
                    missing.discard(t)
    out = ts.astype('datetime64[ns]')
    out[ts == 0] = np.datetime64('NaT')
    return out, valid


def test_run_json_lists_sources_keys_and_train_counts(spb_run, mount):
    m = mount(spb_run)
    oracle = edm.read_oracle(spb_run)
    meta = json.load(open(m.path('run.json')))
    assert meta['train_count'] == len(oracle['train_ids'])
    assert meta['first_train'] == oracle['train_ids'][0] and \
        meta['last_train'] == oracle['train_ids'][-1]
    assert [f['name'] for f in meta['files']] == [osp.basename(p) for p in _files(spb_run)]
    assert meta['train_ids_file'] == 'trainId.npy'
    for src, ent in oracle['sources'].items():
        sj = meta['sources'][src]
        assert set(sj['keys']) == set(ent['keys']), src
        for key, k in ent['keys'].items():
            kj = sj['keys'][key]
            assert kj['shape'] == [len(k['tids'])] + list(k['entry_shape']), (src, key)
            if k['is_array']:
                assert descr_to_dtype(kj['dtype']) == k['dtype'], (src, key)
        with_data = np.unique(np.concatenate([k['tids'] for k in ent['keys'].values()]))
        assert sj['train_count'] == len(with_data), src
        for g, gj in sj['index_groups'].items():
            keys = [k for k in ent['keys'].values() if (k['group'] or 'control') == g]
            _, counts = np.unique(keys[0]['tids'], return_counts=True)
            assert gj['trains_with_data'] == len(counts)
            assert gj['max_entries_per_train'] == (counts.max() if len(counts) else 0)
    assert m.proc.poll() is None


@pytest.mark.parametrize('inc_suspect', [True, False])
def test_timestamps_flags_and_inc_suspect_trains(spb_run, mount, inc_suspect):
    m = mount(spb_run, None if inc_suspect else 'inc_suspect_trains=0')
    tids = np.load(m.path('trainId.npy'))
    all_tids = edm.read_oracle(spb_run)['train_ids']
    if inc_suspect:   # EXtra-data's default: suspect trains kept
        assert np.array_equal(tids, all_tids)
    else:             # a train every file flags is dropped; one that some file has valid is not
        assert np.array_equal(tids, all_tids[all_tids != ALL_SUSPECT])
    ts_exp, flag_exp = expected_timestamps_and_flags(spb_run, tids, inc_suspect)
    ts = np.load(m.path('timestamp.npy'))
    assert ts.dtype == np.dtype('<M8[ns]') and len(ts) == len(tids)
    assert np.array_equal(ts, ts_exp, equal_nan=True)
    flags = np.load(m.path('flag.npy'))
    assert flags.dtype == np.uint8 and np.array_equal(flags, flag_exp)
    meta = json.load(open(m.path('run.json')))
    assert meta['inc_suspect_trains'] is inc_suspect
    assert meta['timestamps_file'] == 'timestamp.npy' and meta['flags_file'] == 'flag.npy'
    if inc_suspect:
        assert flags[list(tids).index(ALL_SUSPECT)] == 0 and flags[list(tids).index(SUSPECT)] == 1
    else:
        # DA01's keys lose the rows of both trains (the AGIPD modules keep SUSPECT's)
        xgm = np.load(m.path('SA1_XTD2_XGM', 'DOOCS', 'MAIN', '.train_ids', 'control.npy'))
        assert SUSPECT not in xgm and ALL_SUSPECT not in xgm and len(xgm) == 62
        agipd = np.load(m.path('SPB_DET_AGIPD1M-1', 'DET', '0CH0:xtdf', '.train_ids', 'header.npy'))
        assert SUSPECT in agipd and ALL_SUSPECT not in agipd


def expected_info_text(run_dir):
    """extra-data-run-info's output (EXtra-data display.info(), details off) from the files."""
    oracle = edm.read_oracle(run_dir)
    tids = oracle['train_ids']
    first, last = int(tids[0]), int(tids[-1])
    secs, dsec = divmod(last - first + 1, 10)
    out = [f'# of trains:    {len(tids)}', f'Duration:       {secs // 3600}:{secs // 60 % 60:02d}:'
           f'{secs % 60:02d}.{dsec}', f'First train ID: {first}', f'Last train ID:  {last}', '']
    det_re = re.compile(r'(.+/(?:DET|CORR))/(\d+)CH')
    inst = sorted(s for s, e in oracle['sources'].items() if e['section'] == 'INSTRUMENT')
    ctrl = sorted(s for s, e in oracle['sources'].items() if e['section'] == 'CONTROL')
    dets = {}
    for s in inst:
        mt = det_re.match(s)
        if mt:
            dets.setdefault(mt[1], {})[mt[2]] = s
    for det in sorted(dets):
        mods = dets[det]
        modno = sorted(mods)[0]
        k = oracle['sources'][mods[modno]]['keys']['image.data']
        _, counts = np.unique(k['tids'], return_counts=True)
        fpt = int(counts.max())
        out += [f'{len(mods)} XTDF detector modules of {det}/*',
                f'  e.g. module {det} {modno} : {k["entry_shape"][-2]} x {k["entry_shape"][-1]} pixels',
                f'  {mods[modno]}', f'  {fpt} frames per train, up to {fpt * len(tids)} frames total',
                '']
    plain = [s for s in inst if not det_re.match(s)]
    out.append(f'{len(plain)} instrument sources (excluding XTDF detectors):')
    out += [f'  - {s}' for s in plain]
    out += ['', f'{len(ctrl)} control sources:'] + [f'  - {s}' for s in ctrl] + ['', '']
    return '\n'.join(out)


def test_info_from_the_files_and_from_the_mount(spb_run, mount):
    exp = expected_info_text(spb_run)
    r = subprocess.run([BIN, 'info', spb_run], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == exp, r.stdout
    m = mount(spb_run)
    r2 = subprocess.run([BIN, 'info', m.mnt], capture_output=True, text=True, timeout=120)
    assert r2.returncode == 0, r2.stderr
    assert r2.stdout == exp
    # --details: every key with its dtype and entry shape, per index group the trains with data
    d = subprocess.run([BIN, 'info', '--details', m.mnt], capture_output=True, text=True).stdout
    assert '      - data.intensityTD\t[float32, entry shape (1000,)]' in d
    assert '      data for 64 trains (100.00%), up to 2 entries per train' in d
    assert '    - Control keys (1 entry per train):\n      - beamPosition.ixPos\t[float32]' in d
    # --json: the run.json the mount shows
    j = json.loads(subprocess.run([BIN, 'info', '--json', spb_run], capture_output=True,
                                  text=True).stdout)
    mj = json.load(open(m.path('run.json')))
    assert j['sources'].keys() == mj['sources'].keys() and j['train_count'] == mj['train_count']
    bad = subprocess.run([BIN, 'info'], capture_output=True, text=True)
    assert bad.returncode == 2 and 'usage' in bad.stderr


def test_per_file_view_beside_the_run_view(spb_run, mount):
    m = mount(spb_run, 'run_view=per_file')
    names = set(os.listdir(m.mnt))
    assert {'run.json', 'trainId.npy', 'SA1_XTD2_XGM'} <= names
    files = [osp.basename(p) for p in _files(spb_run)]
    assert set(files) <= names
    f0 = m.path('RAW-R0238-DA01-S00000.h5')
    assert {'INDEX', 'METADATA', 'CONTROL'} <= set(os.listdir(f0))
    with h5py.File(osp.join(spb_run, 'RAW-R0238-DA01-S00000.h5'), 'r') as f:
        assert np.array_equal(np.load(osp.join(f0, 'INDEX', 'trainId.npy')), f['INDEX/trainId'][:])
    # the run view next to it is the same as with run_view=auto
    assert edm.check_mounted_run(m.mnt, edm.read_oracle(spb_run)) > 10
