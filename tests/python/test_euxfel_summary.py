"""A run's summary (docs/euxfel.md, "Run summary"): run.json lists every source's keys, shapes,
dtypes and trains with data; timestamp.npy and flag.npy sit next to trainId.npy;
-o inc_suspect_trains; `h5direct info PATH` prints what EXtra-data 1.24's run.info() prints (and
lsxfel after its first line), from a mount and from the files; -o run_view=per_file shows the
files beside the run view.

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
from h5d_testlib import BIN, descr_to_dtype, h5_files_holding  # noqa: E402

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


# ---- EXtra-data 1.24's DataCollection.info() (extra_data/display.py, InfoPrinter), rebuilt here
# from its rules, over the files read with h5py (read_oracle): the text `lsxfel RUN` prints after
# its first line, and `h5direct info` prints.

_PIECE = re.compile(r'(\d+|[a-zA-Z]+)')


def _name_pieces(name):
    """A source name cut for grouping (SourceGroup.split_name): an odd-length list whose odd
    items are the pieces that may vary within a group (numbers, short names), the even items
    the text between them, which must match exactly."""
    parts = name.split('/')
    last, _, channel = parts[-1].partition(':')
    parts[-1] = last
    out = _PIECE.split(parts[0])
    for comp in parts[1:]:
        head, *rest = _PIECE.split(comp)
        out[-1] += '/' + head
        if len(rest) == 2 and rest[1] == '':       # the component is one piece
            if len(rest[0]) <= 2 or rest[0].isdigit():
                out += rest
            else:
                out[-1] += rest[0]                 # a long name never varies
        elif rest:
            out += rest
    if channel:
        head, *rest = _PIECE.split(channel)
        out[-1] += ':' + head
        out += rest
    return out


def _group_text(members):
    """A group's line: each varying piece as {a, b} (numbers as ranges {1-3, 5})."""
    varies = [i for i, (a, b) in enumerate(zip(members[0], members[1]))
              if a != b][0] if len(members) > 1 else None
    numeric = varies is not None and all(m[varies].isdigit() for m in members)
    out = ''
    for i in range(len(members[0])):
        vals = {m[i] for m in members}
        if len(vals) == 1:
            out += vals.pop()
        elif numeric:
            nums = sorted(vals, key=int)
            ranges = [[nums[0], nums[0]]]
            for v in nums[1:]:
                if int(v) == int(ranges[-1][1]) + 1:
                    ranges[-1][1] = v
                else:
                    ranges.append([v, v])
            out += '{' + ', '.join(a if a == b else f'{a}-{b}' for a, b in ranges) + '}'
        else:
            out += '{' + ', '.join(sorted(vals)) + '}'
    return out


def grouped_sources(names):
    """The '  - ...' lines of a source list with similar names grouped (group_sources=True): in
    sorted order, a name joins the current group when it has as many pieces and differs from
    the group's last member in exactly one varying piece (and, once the group has more than two
    members, one where its last and first members differ too)."""
    groups = []
    for name in sorted(names):
        p = _name_pieces(name)
        g = groups[-1] if groups else None
        if g is not None and len(p) == len(g[0]):
            diff = [i for i, (a, b) in enumerate(zip(g[-1], p)) if a != b]
            if len(diff) == 1 and diff[0] % 2 == 1 and not (len(g) > 2 and g[-1][diff[0]] == g[0][diff[0]]):
                g.append(p)
                continue
        groups.append([p])
    return [f'  - {_group_text(g)}' for g in groups]


def _counts(k, train_ids):
    """Entries per run train of a key (its group's INDEX counts)."""
    tids, n = np.unique(k['tids'], return_counts=True)
    got = dict(zip(tids.tolist(), n.tolist()))
    return np.array([got.get(int(t), 0) for t in train_ids])


def _dtype_text(dt):
    return str(np.dtype(dt))


def _key_line(name, k):
    shape = f', entry shape {tuple(k["entry_shape"])}' if len(k['entry_shape']) else ''
    return f'      - {name}\t[{_dtype_text(k["dtype"])}{shape}]'


def _run_only_keys(run_dir, source, oracle_keys):
    """SourceData.run_values(inc_timestamps=False) keys that are not CONTROL keys: name,
    'string' or the dtype, and the entry shape, from the source's first file's RUN section."""
    out = []
    for _, f in h5_files_holding(run_dir, f'RUN/{source}'):
        found = []
        f[f'RUN/{source}'].visititems(lambda n, o: found.append((n, o)) if isinstance(o, h5py.Dataset) else None)
        for n, o in found:
            key = n.replace('/', '.')
            if not key.endswith('.value') or key in oracle_keys:
                continue
            if isinstance(o[0], bytes) or h5py.check_string_dtype(o.dtype):
                out.append((key[:-6], 'string', ()))
            else:
                out.append((key[:-6], str(o.dtype), tuple(o.shape[1:])))
        return sorted(out)   # the source's first file
    return out


def expected_info_text(run_dir, details=False):
    """DataCollection.info() of the run in EXtra-data 1.24 (details: every source's keys, as
    info(details_for_sources=['*']))."""
    import datetime
    oracle = edm.read_oracle(run_dir)
    tids = oracle['train_ids']
    first, last = int(tids[0]), int(tids[-1])
    secs, dsec = divmod(last - first + 1, 10)
    out = [f'# of trains:    {len(tids)}', f'Duration:       {datetime.timedelta(seconds=secs)}.{dsec}',
           f'First train ID: {first}', f'Last train ID:  {last}', '']
    det_re = re.compile(r'(.+/(?:DET|CORR))/(\d+)CH')
    srcs = oracle['sources']
    inst = sorted(s for s, e in srcs.items() if e['section'] == 'INSTRUMENT')
    ctrl = sorted(s for s, e in srcs.items() if e['section'] == 'CONTROL')
    xtdf = [s for s in inst if det_re.match(s)]
    if not details:
        dets = {}
        for s in xtdf:
            mt = det_re.match(s)
            dets.setdefault(mt[1], {})[mt[2]] = s
        for det in sorted(dets):
            mods = dets[det]
            modno = sorted(mods)[0]
            src = mods[modno]
            k = srcs[src]['keys']['image.data']
            # frames per train: the counts of the module's first file (one value in these runs)
            f0 = sorted(srcs[src]['files'])[0]
            with h5py.File(osp.join(run_dir, f0), 'r') as f:
                n = len([t for t in f['INDEX/trainId'][:] if t])
                c = set(int(x) for x in f[f'INDEX/{src}/image/count'][:n]) - {0}
            assert len(c) == 1, c
            fpt = c.pop()
            out += [f'{len(mods)} XTDF detector modules of {det}/*',
                    f'  e.g. module {" ".join(modno)} : {k["entry_shape"][-2]} x {k["entry_shape"][-1]} pixels',
                    f'  {src}', f'  {fpt} frames per train, up to {fpt * len(tids)} frames total', '']
        plain = [s for s in inst if s not in xtdf]
        out.append(f'{len(plain)} instrument sources (excluding XTDF detectors):')
        out += grouped_sources(plain)
        out += ['', f'{len(ctrl)} control sources:'] + grouped_sources(ctrl) + ['', '']
        return '\n'.join(out)
    out.append(f'{len(inst)} instrument sources:')
    for s in inst:
        out.append(f'  - {s} ')
        keys = srcs[s]['keys']
        for g in sorted({k.split('.')[0] for k in keys}):
            gk = sorted(k for k in keys if k.split('.')[0] == g)
            c = _counts(keys[gk[0]], tids)
            c = c[c > 0]
            lo, hi = (int(c.min()), int(c.max())) if len(c) else (0, 0)
            out += [f'    - {g}:', f'      data for {len(c)} trains ({len(c) / len(tids):.2%}), '
                                   f'{lo if lo == hi else f"{lo}–{hi}"} entries per train']
            out += [_key_line(k, keys[k]) for k in gk]
    out += ['', f'{len(ctrl)} control sources:']
    for s in ctrl:
        keys = srcs[s]['keys']
        out += [f'  - {s} ', '    - Control keys (1 entry per train):']
        out += [_key_line(k[:-6], keys[k]) for k in sorted(keys) if k.endswith('.value')]
        run_only = _run_only_keys(run_dir, s, keys)
        if run_only:
            out.append('    - Additional run keys (1 entry per run):')
            out += [f'      - {n}\t[{dt}' + (f', entry shape {sh}' if sh else '') + ']' for n, dt, sh in run_only]
    return '\n'.join(out + ['', ''])


# Names and the pieces and groups EXtra-data's own tests expect of them
# (extra_data/tests/test_display.py, 1.24).
SPLITS = {
    'SPB_IRU_INLINEMIC/MOTOR/MIC_AX': ['', 'SPB', '_', 'IRU', '_', 'INLINEMIC', '/MOTOR/', 'MIC', '_', 'AX', ''],
    'SA1_XTD9_HIREX/DET/GOTTHARD2_MASTER:daqOutput': [
        '', 'SA', '', '1', '_', 'XTD', '', '9', '_', 'HIREX', '/DET/', 'GOTTHARD', '', '2', '_', 'MASTER', ':',
        'daqOutput', ''],
    'LAS_PPL_SA3XT/MOTOR/SMARACTCMCOMPSTAGE': ['', 'LAS', '_', 'PPL', '_', 'SA', '', '3', '', 'XT',
                                              '/MOTOR/SMARACTCMCOMPSTAGE'],
    'FXE_OGT2_BIU-2/CAM/CAMERA': ['', 'FXE', '_', 'OGT', '', '2', '_', 'BIU', '-', '2', '/CAM/CAMERA'],
}
GROUPS = {
    'SPB_IRU_INLINEMIC/MOTOR/MIC_{AX, AY, X, Y, Z}': [f'SPB_IRU_INLINEMIC/MOTOR/MIC_{x}'
                                                     for x in ('AX', 'AY', 'X', 'Y', 'Z')],
    'SA1_XTD9_HIREX/DET/GOTTHARD2_{FOLLOWER, LEADER}:daqOutput': [
        'SA1_XTD9_HIREX/DET/GOTTHARD2_LEADER:daqOutput', 'SA1_XTD9_HIREX/DET/GOTTHARD2_FOLLOWER:daqOutput'],
    'SQS_RACK_MPOD-{1-2}/MDL/MPOD_MAPPER': ['SQS_RACK_MPOD-1/MDL/MPOD_MAPPER', 'SQS_RACK_MPOD-2/MDL/MPOD_MAPPER'],
    'FXE_AUXT_LIC/DOOCS/BAM_1932{M, S}:output': ['FXE_AUXT_LIC/DOOCS/BAM_1932M:output',
                                                 'FXE_AUXT_LIC/DOOCS/BAM_1932S:output'],
    'FXE_SMS_USR/MOTOR/UM{01-03, 08}': [f'FXE_SMS_USR/MOTOR/UM{x}' for x in ('01', '02', '03', '08')],
}
NOT_GROUPED = [['LAS_PPL_SA3XT/MOTOR/SMARACTCMCOMPSTAGE', 'LAS_PPL_SA3XT/MOTOR/SMARACTDMCOMPSTAGE'],
               ['FXE_OGT2_BIU-2/CAM/CAMERA', 'FXE_OGT2_BIU-2/IMGPROC/CAMERA'],
               ['SA1_XTD2_XGM/DOOCS/MAIN:output', 'SPB_XTD9_XGM/DOOCS/MAIN:output']]


def test_the_grouping_oracle_groups_as_extra_data():
    """The oracle's grouping rules against EXtra-data's own expectations."""
    for name, pieces in SPLITS.items():
        assert _name_pieces(name) == pieces, name
    for text, names in GROUPS.items():
        assert grouped_sources(names) == [f'  - {text}'], text
    for names in NOT_GROUPED:
        assert grouped_sources(names) == [f'  - {n}' for n in sorted(names)], names


def test_info_groups_similar_source_names(mount):
    """A JUNGFRAU run (3 modules: JNGFR01..03, not XTDF): info lists its module sources as one
    group, as EXtra-data 1.24 does, from the files and from a mount; --details lists every
    source on its own."""
    base, run_dir = edm._run(edm.make_jungfrau_run, modules=3)
    try:
        want = expected_info_text(run_dir)
        assert '  - SPB_IRDA_JF4M/DET/JNGFR{01-03}:daqOutput' in want.splitlines(), want
        m = mount(run_dir)
        for path in (run_dir, m.mnt):
            r = subprocess.run([BIN, 'info', path], capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            assert r.stdout == want, r.stdout
        d = subprocess.run([BIN, 'info', '--details', run_dir], capture_output=True, text=True, timeout=120)
        assert d.returncode == 0 and d.stdout == expected_info_text(run_dir, details=True), d.stdout
    finally:
        shutil.rmtree(base, ignore_errors=True)


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
    want = expected_info_text(spb_run, details=True)
    for path in (spb_run, m.mnt):
        d = subprocess.run([BIN, 'info', '--details', path], capture_output=True, text=True)
        assert d.returncode == 0, d.stderr
        assert d.stdout == want, d.stdout
    assert '      - data.intensityTD\t[float32, entry shape (1000,)]' in want
    assert '      data for 64 trains (100.00%), 2 entries per train' in want
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
