"""Runs being written while mounted (docs/euxfel.md, "Runs being written"; docs/semantics.md,
"Files that change").

The runs are written with the re-implemented EXtra-data mock writers of test_extra_data_mocks.py
and grown while mounted: a new sequence file, a file that a libhdf5 writer keeps open (latest
format, SWMR or not), a sequence file whose trains are appended (h5py resize). What the mount shows
is read from another process (/usr/bin/python3 in a subprocess) and compared with the oracle of
test_extra_data_mocks.py (read_oracle: the HDF5 files read back with h5py as EXtra-data reads
them). Waiting for a change to show is a poll with a generous deadline (the daemon checks a run
at most once per -o revalidate seconds, the kernel keeps names as long), not a timing claim."""
import json
import os
import os.path as osp
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

h5py = pytest.importorskip('h5py')

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import test_extra_data_mocks as edm  # noqa: E402
from h5d_testlib import BIN, make_tmpdir  # noqa: E402

pytestmark = pytest.mark.skipif(not BIN or not osp.exists(BIN),
                                reason='H5DIRECT_BIN (the built mount.h5direct) is not set')

PY = '/usr/bin/python3'
DEADLINE = 30.0   # seconds a change may take to show: far beyond revalidate=1 plus the kernel's 1 s


class Motor(edm.Device):
    """A CONTROL-only device (no padding rows: INDEX fits the trains exactly)."""
    control_keys = [('actualPosition', 'f4', ()), ('encoderPosition', 'i4', ())]


def _devices():
    return [edm.XGM('SA1_XTD2_XGM/DOOCS/MAIN'), Motor('SPB_MOTOR/MDL/X')]


def _seq(run_dir, seq):
    return osp.join(run_dir, f'RAW-R0042-DA01-S{seq:05d}.h5')


def _in_subprocess(code, *args):
    """Runs `code` with /usr/bin/python3 in another process; returns its stdout parsed as JSON."""
    r = subprocess.run([PY, '-c', code, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


READ_RUN = r'''
import json, sys, numpy as np
root = sys.argv[1]
meta = json.load(open(root + '/run.json'))
tids = np.load(root + '/trainId.npy')
pos = np.load(root + '/SPB_MOTOR/MDL/X/actualPosition.value.npy')
print(json.dumps({'files': [f['name'] for f in meta['files']], 'errors': meta['errors'],
                  'train_ids': tids.tolist(), 'pos': pos.tolist()}))
'''


def _wait_for(pred, what):
    t0 = time.monotonic()
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() - t0 > DEADLINE:
            raise AssertionError('not seen within the deadline: ' + what)
        time.sleep(0.2)


def _oracle_pos(run_dir):
    o = edm.read_oracle(run_dir)
    return o, o['sources']['SPB_MOTOR/MDL/X']['keys']['actualPosition.value']


@pytest.fixture
def run_dir():
    base = make_tmpdir('live-')
    d = osp.join(base, 'r0042')
    os.makedirs(d)
    edm.write_file(_seq(d, 0), _devices(), ntrains=32, firsttrain=10000, chunksize=32,
                   format_version='1.0')
    yield d
    shutil.rmtree(base, ignore_errors=True)


def test_new_sequence_file_joins_without_remount(run_dir, mount):
    m = mount(run_dir)
    first = _in_subprocess(READ_RUN, m.mnt)
    assert first['files'] == [osp.basename(_seq(run_dir, 0))]
    assert first['train_ids'] == list(range(10000, 10032))
    # an open mapping of the key, made before the run grows
    key = m.path('SPB_MOTOR', 'MDL', 'X', 'actualPosition.value.npy')
    old_map = np.load(key, mmap_mode='r')
    _, k0 = _oracle_pos(run_dir)
    assert np.array_equal(old_map, k0['data'])

    edm.write_file(_seq(run_dir, 1), _devices(), ntrains=16, firsttrain=10032, chunksize=16,
                   format_version='1.0')
    got = _wait_for(lambda: (lambda r: r if len(r['files']) == 2 and len(r['pos']) == 48
                             and len(r['train_ids']) == 48 else None)(
        _in_subprocess(READ_RUN, m.mnt)), 'the second sequence file in run.json and the key')
    oracle, k = _oracle_pos(run_dir)
    assert got['train_ids'] == oracle['train_ids'].tolist() == list(range(10000, 10048))
    assert np.array_equal(np.asarray(got['pos'], 'f4'), k['data'])
    assert len(k['data']) == 48
    # every key of the grown run, against the oracle
    assert edm.check_mounted_run(m.mnt, oracle) > 10
    # the mapping made before keeps the array it had: the old shape and bytes
    assert old_map.shape == (32,) and np.array_equal(old_map, k0['data'])
    del old_map
    assert 'changed on disk' in m.log(), m.log()
    assert m.proc.poll() is None


@pytest.mark.parametrize('swmr', [False, True])
def test_file_being_written_is_left_out_neighbours_readable(run_dir, mount, swmr):
    m = mount(run_dir)
    assert len(_in_subprocess(READ_RUN, m.mnt)['files']) == 1
    _, k = _oracle_pos(run_dir)   # the oracle reads every .h5 of the directory: before the new one
    path = _seq(run_dir, 1)
    f = h5py.File(path, 'w', libver='latest')
    try:
        f.create_dataset('INDEX/trainId', data=np.arange(10032, 10040, dtype='u8'),
                         maxshape=(None,), chunks=(8,))
        if swmr:
            f.swmr_mode = True
        f.flush()
        time.sleep(0.05)
        # seen (the directory changed) and left out; the run stays readable
        got = _wait_for(lambda: (lambda r: r if any('being written' in e for e in r['errors'])
                                 else None)(_in_subprocess(READ_RUN, m.mnt)),
                        'the file being written named in run.json errors')
        assert got['files'] == [osp.basename(_seq(run_dir, 0))]
        assert got['train_ids'] == list(range(10000, 10032))
        assert np.array_equal(np.asarray(got['pos'], 'f4'), k['data'])
        # it keeps being written: still left out, logged once
        f['INDEX/trainId'].resize((16,))
        f.flush()
        time.sleep(1.5)
        again = _in_subprocess(READ_RUN, m.mnt)
        assert again['files'] == got['files']
        assert m.log().count('left out of its run while libhdf5 has it open') == 1, m.log()
    finally:
        f.close()
    # once written completely and closed, it joins
    os.remove(path)
    edm.write_file(path, _devices(), ntrains=16, firsttrain=10032, chunksize=16,
                   format_version='1.0')
    got = _wait_for(lambda: (lambda r: r if len(r['files']) == 2 and len(r['train_ids']) == 48
                             else None)(_in_subprocess(READ_RUN, m.mnt)),
                    'the closed file joining the run')
    assert got['train_ids'] == list(range(10000, 10048))
    assert m.proc.poll() is None


def _append_trains(path, extra):
    """Appends `extra` trains to a sequence file of CONTROL sources (h5py resize), as a writer
    continuing it would: INDEX/trainId, flag, timestamp, every source's first/count, every key."""
    with h5py.File(path, 'a') as f:
        tid = f['INDEX/trainId']
        n = int(np.count_nonzero(tid[:]))
        new = np.arange(int(tid[n - 1]) + 1, int(tid[n - 1]) + 1 + extra, dtype='u8')
        for name, vals in (('trainId', new), ('flag', np.ones(extra, 'i4')),
                           ('timestamp', np.arange(extra, dtype='u8'))):
            d = f['INDEX/' + name]
            d.resize((n + extra,))
            d[n:] = vals
        for sid in f['METADATA/dataSources/dataSourceId'][:]:
            sid = sid.decode()
            if not sid:
                continue
            section, src = sid.split('/', 1)
            idx = f'INDEX/{src}'   # INSTRUMENT: INDEX/<dev:chan>/<group>
            first, count = f[idx + '/first'], f[idx + '/count']
            rows = int(first[n - 1] + count[n - 1])
            per_train = 1 if section == 'CONTROL' else 0   # no new instrument data
            for d, vals in ((first, rows + per_train * np.arange(extra)),
                            (count, np.full(extra, per_train))):
                d.resize((n + extra,))
                d[n:] = vals
            if section != 'CONTROL':
                continue
            keys = []
            f[f'CONTROL/{src}'].visititems(
                lambda nm, o: keys.append(nm) if isinstance(o, h5py.Dataset) else None)
            for kname in keys:
                d = f[f'CONTROL/{src}/{kname}']
                if d.shape[0] != rows:
                    continue
                d.resize((rows + extra,) + d.shape[1:])
                if d.dtype.kind in 'iuf':
                    d[rows:] = np.arange(extra).reshape((extra,) + (1,) * (d.ndim - 1)) + 1000
                else:
                    d[rows:] = b'ON'


def test_sequence_file_grown_in_place(run_dir, mount):
    """Trains appended to a closed sequence file (h5py resize): new opens see the new shape;
    an open mapping keeps the bytes it holds."""
    m = mount(run_dir)
    key = m.path('SPB_MOTOR', 'MDL', 'X', 'actualPosition.value.npy')
    old = np.load(key)
    assert old.shape == (32,)
    _append_trains(_seq(run_dir, 0), 8)
    # names are revalidated one by one: wait until both the key and trainId.npy show it
    got = _wait_for(lambda: (lambda r: r if len(r['pos']) == 40 and len(r['train_ids']) == 40
                             else None)(_in_subprocess(READ_RUN, m.mnt)), 'the grown key')
    oracle, k = _oracle_pos(run_dir)
    assert np.array_equal(np.asarray(got['pos'], 'f4'), k['data'])
    assert got['train_ids'] == oracle['train_ids'].tolist() == list(range(10000, 10040))
    assert np.array_equal(k['data'][:32], old)
    assert edm.check_mounted_run(m.mnt, oracle) > 10
    assert m.proc.poll() is None


def test_revalidate_0_keeps_the_listing(run_dir, mount):
    """-o revalidate=0: sources are taken as unchanging; a new file shows after a remount."""
    m = mount(run_dir, 'revalidate=0')
    assert len(_in_subprocess(READ_RUN, m.mnt)['files']) == 1
    edm.write_file(_seq(run_dir, 1), _devices(), ntrains=16, firsttrain=10032, chunksize=16,
                   format_version='1.0')
    time.sleep(2.5)   # several revalidate periods of the default mount
    assert len(_in_subprocess(READ_RUN, m.mnt)['files']) == 1
    m.close()
    m2 = mount(run_dir)
    assert len(_in_subprocess(READ_RUN, m2.mnt)['files']) == 2


def _try_read_run(root):
    """READ_RUN in another process; None while the run is not (yet) there."""
    r = subprocess.run([PY, '-c', READ_RUN, root], capture_output=True, text=True, timeout=120)
    return json.loads(r.stdout) if r.returncode == 0 else None


def _runs(mnt):
    return sorted(n for n in os.listdir(mnt) if not n.startswith('.'))


def test_new_and_deleted_run_directories_show_in_their_parent(run_dir, mount):
    """A mount of a proposal's raw/ left up during a beamtime: a run copied in (cp -r), a run
    directory made empty and filled afterwards (first a plain directory, then a run), and a run
    deleted show without a remount; the run already read keeps its node (it is not read again)."""
    parent = osp.dirname(run_dir)
    m = mount(parent, 'revalidate=1')
    assert _runs(m.mnt) == ['r0042']
    first = _in_subprocess(READ_RUN, m.path('r0042'))
    ino = os.stat(m.path('r0042')).st_ino
    assert not osp.exists(m.path('r0043'))

    shutil.copytree(run_dir, osp.join(parent, 'r0043'))     # cp -r r0042 r0043
    got = _wait_for(lambda: _try_read_run(m.path('r0043')), 'r0043 read as a run')
    oracle, k = _oracle_pos(osp.join(parent, 'r0043'))
    assert got['train_ids'] == oracle['train_ids'].tolist()
    assert np.array_equal(np.asarray(got['pos'], 'f4'), k['data'])
    assert edm.check_mounted_run(m.path('r0043'), oracle) > 10
    _wait_for(lambda: _runs(m.mnt) == ['r0042', 'r0043'], 'r0043 listed')

    # made empty, listed as a plain directory, then written: shown as a run
    os.makedirs(osp.join(parent, 'r0044'))
    _wait_for(lambda: 'r0044' in _runs(m.mnt), 'r0044 listed')
    assert _runs(m.path('r0044')) == []
    edm.write_file(osp.join(parent, 'r0044', 'RAW-R0044-DA01-S00000.h5'), _devices(), ntrains=8,
                   firsttrain=20000, chunksize=8, format_version='1.0')
    got = _wait_for(lambda: _try_read_run(m.path('r0044')), 'r0044 read as a run once written')
    assert got['train_ids'] == list(range(20000, 20008))
    assert edm.check_mounted_run(m.path('r0044'), edm.read_oracle(osp.join(parent, 'r0044'))) > 10
    assert 'r0044: changed on disk; shown by its own view now' in m.log(), m.log()

    shutil.rmtree(osp.join(parent, 'r0043'))
    _wait_for(lambda: _runs(m.mnt) == ['r0042', 'r0044'], 'r0043 gone from the listing')
    _wait_for(lambda: not osp.exists(m.path('r0043', 'run.json')), 'r0043 gone (lookup)')

    # the run read first was not replaced: same inode, same contents, not read again
    assert os.stat(m.path('r0042')).st_ino == ino
    assert _in_subprocess(READ_RUN, m.path('r0042')) == first
    assert osp.realpath(run_dir) + ': changed on disk' not in m.log(), m.log()
    assert m.proc.poll() is None
