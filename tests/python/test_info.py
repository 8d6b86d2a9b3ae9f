"""`h5direct info` beyond one healthy run (docs/usage.md, "Run summary: h5direct info").

- A folder of runs (a proposal's raw/, as lsxfel summarises it): one line per run with its
  trains, files, sources and size, from the files and from a mount of the folder alike. The
  oracle: h5py reading every sequence file (train IDs, source lists), file names and sizes.
- A damaged or truncated HDF5 file: what can be read is listed as the mount shows it, what is
  damaged is named with why, and the exit status says which (0 all readable, 3 read in part,
  1 nothing readable). The oracle: h5py on the original (shapes, dtypes, where chunks lie) and on
  the damaged file (which groups it cannot list).
"""
import os
import os.path as osp
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import h5d_testlib as tl  # noqa: E402
import test_extra_data_mocks as edm  # noqa: E402

pytestmark = pytest.mark.skipif(not tl.BIN or not osp.exists(tl.BIN),
                                reason='H5DIRECT_BIN (the built mount.h5direct) is not set')


def info(*args):
    return subprocess.run([tl.BIN, 'info', *args], capture_output=True, text=True, timeout=300)


# ---- a folder of runs ---------------------------------------------------------------------------

def iec(n):
    """The size as info prints it: binary units, one decimal (bytes below 1 KiB)."""
    if n < 1024:
        return f'{n} B'
    for unit in ('KiB', 'MiB', 'GiB', 'TiB', 'PiB'):
        n /= 1024
        if n < 1024 or unit == 'PiB':
            return f'{n:.1f} {unit}'


def run_line(run_dir):
    """lsxfel's line for a run ('r0001 : Run of   64 trains, with   2 detector files and   2
    others') and the sources and size h5direct adds, from the files with h5py."""
    names = sorted(n for n in os.listdir(run_dir) if re.match(r'(.+)-S\d+\.h5$', n))
    det = sum(1 for n in names if (m := re.match(r'([A-Z]+)(\d+)', n[:-3].split('-')[2]))
              and m[1] in ('AGIPD', 'DSSC', 'LPD'))
    tids, sources = set(), set()
    for n in names:
        with h5py.File(osp.join(run_dir, n), 'r') as f:
            t = f['INDEX/trainId'][:]
            tids.update(int(x) for x in t[t != 0])
            ds = f['METADATA/dataSourceId'] if 'METADATA/dataSourceId' in f else \
                f['METADATA/dataSources/dataSourceId']
            for s in ds[:]:
                s = s.decode() if isinstance(s, bytes) else s
                if s:
                    section, rest = s.split('/', 1)
                    sources.add(rest.rsplit('/', 1)[0] if section == 'INSTRUMENT' else rest)
    size = sum(os.path.getsize(osp.join(run_dir, n)) for n in names)
    return (f'  {osp.basename(run_dir)} : Run of {len(tids):>4} trains, with {det:>3} detector files '
            f'and {len(names) - det:>3} others, {len(sources)} sources, {iec(size)}')


@pytest.fixture
def proposal():
    base = tl.make_tmpdir('info-prop-')
    raw = osp.join(base, 'raw')
    for name, build, kw in (('r0001', edm.make_spb_run, dict(raw=True, format_version='1.0', frames=2)),
                            ('r0002', edm.make_fxe_run, dict(raw=True)),
                            ('r0010', edm.make_spb_run, dict(raw=True, format_version='0.5'))):
        os.makedirs(osp.join(raw, name))
        build(osp.join(raw, name), **kw)
    os.makedirs(osp.join(raw, 'notes'))            # not a run: left out, as lsxfel does
    open(osp.join(raw, 'README.txt'), 'w').close()
    yield raw
    shutil.rmtree(base, ignore_errors=True)


def test_info_on_a_folder_of_runs_lists_each_run(proposal, mount):
    want = ['raw : Proposal data directory', ''] + \
        [run_line(osp.join(proposal, r)) for r in ('r0001', 'r0002', 'r0010')] + ['']
    r = info(proposal)
    assert r.returncode == 0, r.stderr
    assert r.stdout == '\n'.join(want), r.stdout
    # the same folder mounted: the runs' run.json files say the same
    m = mount(proposal)
    r = info(m.mnt)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[2:] == want[2:-1], r.stdout
    assert r.stdout.splitlines()[0] == osp.basename(m.mnt) + ' : Proposal data directory'
    # a proposal directory (holding raw/): lsxfel's "Proposal directory"
    r = info(osp.dirname(proposal))
    assert r.returncode == 0, r.stderr
    base = osp.basename(osp.dirname(proposal))
    assert r.stdout == '\n'.join([f'{base} : Proposal directory', '', f'{base}/raw/'] + want[2:]), r.stdout


def test_info_on_a_folder_with_an_unreadable_run(proposal):
    """A run whose files cannot be read is listed with why; the others are summarised; exit 3."""
    bad = osp.join(proposal, 'r0003')
    os.makedirs(bad)
    with open(osp.join(bad, 'RAW-R0003-DA01-S00000.h5'), 'wb') as f:
        f.write(b'not hdf5 at all')
    r = info(proposal)
    assert r.returncode == 3, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert lines[2] == run_line(osp.join(proposal, 'r0001')) and lines[5] == run_line(osp.join(proposal, 'r0010'))
    assert lines[4].startswith('  r0003 : cannot read: '), lines


# ---- damaged files ------------------------------------------------------------------------------

def _datasets(f):
    out = {}
    f.visititems(lambda n, o: out.__setitem__('/' + n, o) if isinstance(o, h5py.Dataset) else None)
    return out


def test_info_on_a_damaged_file_lists_what_it_can_read():
    """A group whose symbol table is damaged (h5py cannot list it; the mount's listing of it is
    EIO): info lists every other dataset as h5py reads them, names the group with why, and
    exits 3."""
    d = tl.make_tmpdir('info-dmg-')
    p = osp.join(d, 'grp.h5')
    with h5py.File(p, 'w', libver='earliest') as f:
        f['first'] = np.arange(1000, dtype='<i4')
        f['grp/a'] = np.arange(10, dtype='<f8')
        f['z'] = np.arange(7, dtype='>u2').reshape(7, 1)
    data = bytearray(open(p, 'rb').read())
    trees = [i for i in range(len(data) - 5) if data[i:i + 4] == b'TREE' and data[i + 4] == 0]
    assert len(trees) == 2   # the root's and grp's group B-trees
    data[trees[1]:trees[1] + 4] = b'XXXX'
    open(p, 'wb').write(data)
    with h5py.File(p, 'r') as f:
        with pytest.raises(Exception):
            list(f['grp'])
        want = {n: (f[n].shape, f[n].dtype.str) for n in ('/first', '/z')}
    r = info(p)
    assert r.returncode == 3, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert lines[0] == f'{p}: HDF5 file, 2 datasets readable, 1 group unreadable (mount it to read them as .npy files)', lines
    for n, (shape, dt) in want.items():
        assert any(ln.startswith(f'  {n}  {shape} {dt}  contiguous') for ln in lines), (n, lines)
    grp = [ln for ln in lines if ln.startswith('  /grp/')]
    assert len(grp) == 1 and 'unreadable: ' in grp[0] and 'cannot list group' in grp[0], lines
    j = info('--json', p)
    assert j.returncode == 3
    import json
    got = json.loads(j.stdout)
    assert [g['path'] for g in got['unreadable_groups']] == ['/grp']


def test_info_on_a_truncated_file_names_the_chunks_past_the_cut():
    """A file cut through the chunks of its last dataset (its writer crashed): the datasets
    before the cut are listed as readable, the last one as damaged, with how many of its chunks
    lie past the cut and both sizes (h5py's own eof and stored_eof); exit 3. Cut through the root
    group's metadata: nothing can be read, exit 1 with one line on stderr."""
    d = tl.make_tmpdir('info-cut-')
    orig = osp.join(d, 'orig.h5')
    with h5py.File(orig, 'w', libver='earliest') as f:
        f['first'] = np.arange(4096, dtype='<f8')
        f.create_dataset('g', data=np.arange(16 * 64, dtype='<u2').reshape(16, 64), chunks=(4, 64),
                         compression='gzip')
        f.create_dataset('target', data=np.arange(48 * 1024, dtype='<u2').reshape(48, 1024),
                         chunks=(4, 1024), compression='gzip')
        infos = [f['target'].id.get_chunk_info(i) for i in range(f['target'].id.get_num_chunks())]
        want = {n: (ds.shape, ds.dtype.str) for n, ds in _datasets(f).items()}
    cut_at = sorted(ci.byte_offset for ci in infos)[7]
    past = sum(1 for ci in infos if ci.byte_offset + ci.size > cut_at)
    data = open(orig, 'rb').read()
    p = osp.join(d, 'cut.h5')
    with open(p, 'wb') as f:
        f.write(data[:cut_at])
    with pytest.raises(OSError) as e:
        h5py.File(p, 'r')
    eof, stored = map(int, re.search(r'eof\s*=\s*(\d+).*stored_eof\s*=\s*(\d+)', str(e.value)).groups())
    r = info(p)
    assert r.returncode == 3, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert lines[0] == (f'{p}: HDF5 file, truncated: {eof} bytes, its superblock says {stored}; 2 datasets '
                        f'readable, 1 damaged (mount it to read them as .npy files)'), lines
    for n, (shape, dt) in want.items():
        assert any(ln.startswith(f'  {n}  {shape} {dt}') for ln in lines), (n, lines)
    tgt = [ln for ln in lines if ln.startswith('  /target  ')]
    assert len(tgt) == 1 and f'damaged: {past} of {len(infos)} chunks lie past the end of the file' in tgt[0], lines
    # cut through the superblock's root group: nothing readable
    p2 = osp.join(d, 'cut_root.h5')
    with open(p2, 'wb') as f:
        f.write(data[:200])
    r = info(p2)
    assert r.returncode == 1 and r.stdout == '', r
    last = r.stderr.splitlines()[-1]
    assert last.startswith(f'{osp.basename(tl.BIN)} info: {p2}: ') and 'nothing in it can be read' in last, r.stderr
