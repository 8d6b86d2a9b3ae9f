"""EXtra-data's run files map (karabo_data_map.json, extra_data/run_files_map.py RunFilesMap):
where it is present and its entries match the files on disk (size and mtime), listing a run and
reading one module's key open only that module's files; names and bytes are those of the same
run mounted without a map (and the generator's expected arrays, the h5py oracle). Stale entries
(a touched file), entries of the wrong shape and damaged maps are not used."""
import json
import os
import os.path as osp
import subprocess
import sys

import h5py
import numpy as np
import pytest

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import euxfel_mock  # noqa: E402
from h5d_testlib import BIN, Mount, make_tmpdir  # noqa: E402

pytestmark = pytest.mark.skipif(not BIN or not osp.exists(BIN),
                                reason='H5DIRECT_BIN (the built mount.h5direct) is not set')

MODULE = 'SPB_DET_AGIPD1M-1/DET/0CH0:xtdf'


def h5_files(run_dir):
    return sorted(n for n in os.listdir(run_dir) if n.endswith('.h5'))


def file_access(path):
    """What EXtra-data's FileAccess reads of a file without a map (file_access.py)."""
    with h5py.File(path, 'r') as f:
        tids = f['INDEX/trainId'][()]
        tids = tids[tids != 0]
        fmt = f['METADATA/dataFormatVersion'][0].decode() if 'METADATA/dataFormatVersion' in f else '0.5'
        control, instrument, legacy = set(), set(), {}
        for sid in f['METADATA/dataSources/dataSourceId'][()]:
            if not sid:
                continue
            cat, _, h5src = sid.decode().partition('/')
            if cat == 'INSTRUMENT':
                dev, _, chan_grp = h5src.partition(':')
                src = dev + ':' + chan_grp.partition('/')[0]
                if src not in instrument:
                    link = f.get(f'INSTRUMENT/{src}', getlink=True)
                    if isinstance(link, h5py.SoftLink):
                        legacy[src] = link.path[1:].partition('/')[2]
                    instrument.add(src)
            elif cat == 'CONTROL':
                control.add(h5src)
        flag = f['INDEX/flag'][:len(tids)].astype(bool)
        if fmt == '1.1':
            flag = ~flag
    return tids, control, instrument, legacy, flag


def write_files_map(run_dir, path=None):
    """The map as RunFilesMap.save writes it (entries sorted by file name, indent=2)."""
    data = []
    for n in h5_files(run_dir):
        p = osp.join(run_dir, n)
        st = os.stat(p)
        tids, control, instrument, legacy, flag = file_access(p)
        data.append({'filename': n, 'mtime': st.st_mtime, 'size': st.st_size,
                     'train_ids': [int(t) for t in tids],
                     'control_sources': sorted(control), 'instrument_sources': sorted(instrument),
                     'legacy_sources': {k: legacy[k] for k in sorted(legacy)},
                     'suspect_train_indices': [int(i) for i in (~flag).nonzero()[0]]})
    path = path or osp.join(run_dir, 'karabo_data_map.json')
    os.makedirs(osp.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(data, f, indent=2)
    return data


@pytest.fixture(params=['basic', 'corr'])
def run(request):
    # <proposal>/raw/r0338 (or proc/): the layout whose scratch folder EXtra-data also searches
    out = osp.join(make_tmpdir('files-map-'), 'p001234')
    euxfel_mock.build(out, scenario=request.param, image_dims=(2, 16, 8))
    with open(osp.join(out, 'expected', 'expected.json')) as f:
        manifest = json.load(f)
    return out, manifest


def module_files(run_dir):
    return [n for n in h5_files(run_dir) if '-AGIPD00-' in n]


def open_module(mnt, manifest):
    """A user's first steps: list the run, list module 0, read its image.data whole."""
    names = sorted(os.listdir(mnt))
    src = osp.join(mnt, *MODULE.split('/'))
    keys = sorted(os.listdir(src))
    data = np.load(osp.join(src, 'image.data.npy'))
    canonical = manifest['legacy'].get(MODULE, MODULE)
    k = next(k for k in manifest['keys'] if k['source'] == canonical and k['key'] == 'image.data')
    expected = np.load(osp.join(osp.dirname(manifest['run_dir']), '..', 'expected', k['data']))
    assert data.dtype == expected.dtype and np.array_equal(data, expected)
    with open(osp.join(mnt, '.h5direct', 'stats.json')) as f:
        files = json.load(f)['hdf5_helper']['files']
    return names, keys, data, files


def tree(mnt):
    """Every name below the mount and the bytes of every file (run.json, sidecars, arrays)."""
    out = {}
    for d, dirs, files in os.walk(mnt):
        dirs[:] = sorted(x for x in dirs if x != '.h5direct')
        rel = osp.relpath(d, mnt)
        out[rel] = sorted(dirs + files)
        for n in files:
            p = osp.join(d, n)
            if not osp.islink(p):
                try:  # where EXtra-data raises (modules' cell IDs disagree) the read fails: EIO
                    with open(p, 'rb') as f:
                        out[osp.join(rel, n)] = f.read()
                except OSError as e:
                    out[osp.join(rel, n)] = e.errno
    return out


def test_valid_map_opens_only_the_module_files(run):
    out, manifest = run
    run_dir = manifest['run_dir']
    m0 = Mount(run_dir)
    try:
        base = open_module(m0.mnt, manifest)
        assert base[3] == len(h5_files(run_dir))  # without a map every file is read
        base_tree = tree(m0.mnt)
    finally:
        m0.close()
    write_files_map(run_dir)
    m1 = Mount(run_dir)
    try:
        names, keys, data, files = open_module(m1.mnt, manifest)
        assert (names, keys) == (base[0], base[1]) and np.array_equal(data, base[2])
        assert files == len(module_files(run_dir)), m1.log()
        assert 'described by the files map' in m1.log()
        assert tree(m1.mnt) == base_tree  # run.json, train IDs, flags, every key: the same bytes
    finally:
        m1.close()


def test_info_uses_the_map_as_the_mount_does(run):
    """`h5direct info RUN_DIR` opens the run as the mount's run view does, files map included:
    its summary is the run.json the mount shows (but for the mount's detector views; and its text the one info prints from the
    mount), and it says that the files the map describes were not opened; without the map the
    summary is the same, every file read."""
    out, manifest = run
    run_dir = manifest['run_dir']
    write_files_map(run_dir)
    m = Mount(run_dir)
    try:
        with open(osp.join(m.mnt, 'run.json')) as f:
            mounted = json.load(f)
        mounted.pop('detectors')  # the run view's own stacked detector directories
        assert 'described by the files map' in m.log()
        text = subprocess.run([BIN, 'info', m.mnt], capture_output=True, text=True, timeout=120)
        assert text.returncode == 0, text.stderr
    finally:
        m.close()

    def info(*args):
        r = subprocess.run([BIN, 'info', *args, run_dir], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r
    r = info('--json', '-o', 'debug')
    assert json.loads(r.stdout) == mounted
    n = len(h5_files(run_dir))
    assert f'{n} of {n} files described by the files map' in r.stderr, r.stderr
    assert info().stdout == text.stdout
    os.remove(osp.join(run_dir, 'karabo_data_map.json'))
    r = info('--json', '-o', 'debug')
    assert json.loads(r.stdout) == mounted
    assert 'files map' not in r.stderr, r.stderr


def test_map_in_the_proposal_scratch_folder(run):
    out, manifest = run
    run_dir = manifest['run_dir']
    cls = osp.basename(osp.dirname(run_dir))
    write_files_map(run_dir, osp.join(out, 'scratch', '.karabo_data_maps', f'{cls}_r0338.json'))
    m = Mount(run_dir)
    try:
        files = open_module(m.mnt, manifest)[3]
        assert files == len(module_files(run_dir)), m.log()
    finally:
        m.close()


def test_stale_and_malformed_entries_are_read_from_their_files(run):
    out, manifest = run
    run_dir = manifest['run_dir']
    data = write_files_map(run_dir)
    da = [n for n in h5_files(run_dir) if '-DA01-' in n]
    # A file changed since the map was written: its mtime differs (EXtra-data ignores the entry).
    st = os.stat(osp.join(run_dir, da[0]))
    os.utime(osp.join(run_dir, da[0]), ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    # An entry of the wrong shape: train IDs as strings; and a suspect index beyond the trains.
    for e in data:
        if e['filename'] == da[1]:
            e['train_ids'] = [str(t) for t in e['train_ids']]
        if '-AGIPD01-' in e['filename']:
            e['suspect_train_indices'] = [len(e['train_ids']) + 5]
    agipd01 = [n for n in h5_files(run_dir) if '-AGIPD01-' in n]
    with open(osp.join(run_dir, 'karabo_data_map.json'), 'w') as f:
        json.dump(data, f)
    m = Mount(run_dir)
    try:
        names, keys, arr, files = open_module(m.mnt, manifest)
        assert files == len(module_files(run_dir)) + 2 + len(agipd01), m.log()
        assert 'do not (those files are read)' in m.log()
        tids = np.load(osp.join(m.mnt, 'trainId.npy'))
        assert np.array_equal(tids, np.load(osp.join(out, 'expected', manifest['train_ids'])))
    finally:
        m.close()


@pytest.mark.parametrize('content', [b'\x00\xffnot json{[', b'{"filename": "x"}', b'[1, "a", null]',
                                     b'[' * 100000])
def test_damaged_map_is_ignored(run, content):
    out, manifest = run
    run_dir = manifest['run_dir']
    with open(osp.join(run_dir, 'karabo_data_map.json'), 'wb') as f:
        f.write(content)
    m = Mount(run_dir)
    try:
        files = open_module(m.mnt, manifest)[3]
        assert files == len(h5_files(run_dir))  # every file read, as without a map
        assert 'files map' in m.log()
    finally:
        m.close()
