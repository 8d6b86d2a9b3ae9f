"""An open or mapped virtual file keeps its bytes while its source files are deleted or replaced
(docs/semantics.md, "Files that change"), as any open file keeps its bytes after an unlink.

The case that matters: a reader maps a file (np.load(mmap_mode='r')) and reads its pages later,
after a sequence file behind it was deleted (the run was cleaned up, a file rewritten by rename).
The daemon holds the descriptors of every source file a virtual file reads from from the moment
it is opened, within -o max_open_files; where the bound does not allow it, a warning names the
virtual file. The oracle: h5py reading the files before they are deleted (plain files) and the
arrays euxfel_mock computes from its inputs (runs). Mappings are made and read in another process
(/usr/bin/python3): a failed page would kill it with SIGBUS.
"""
import errno
import json
import os
import os.path as osp
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import euxfel_mock  # noqa: E402
import h5d_testlib as tl  # noqa: E402

PY = '/usr/bin/python3'
N = 1 << 20  # 4 MiB of <i4 per dataset: far more than the kernel reads ahead of an open

# Maps each .npy given, says so, waits for a line on stdin, then compares every mapped array with
# the .npy file of expected values given beside it (exit status 0: equal).
MAP_THEN_READ = r'''
import sys, numpy as np
pairs = [a.split('=', 1) for a in sys.argv[1:]]
maps = [np.load(p, mmap_mode='r') for p, _ in pairs]
print('mapped', flush=True)
sys.stdin.readline()
for m, (p, e) in zip(maps, pairs):
    want = np.load(e)
    assert m.shape == want.shape and np.array_equal(m, want), p
print('equal', flush=True)
'''


class Mapper:
    """A process that maps files now and reads them when told to."""

    def __init__(self, pairs):
        self.p = subprocess.Popen([PY, '-c', MAP_THEN_READ] + [f'{a}={b}' for a, b in pairs],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        assert self.p.stdout.readline().strip() == 'mapped', self.p.stderr.read()

    def read_all(self):
        out, err = self.p.communicate('\n', timeout=120)
        return self.p.returncode, out, err


def _write(path, seed):
    rng = np.random.default_rng(seed)
    with h5py.File(path, 'w') as f:
        f['contig'] = rng.integers(0, 1 << 30, N, dtype='<i4')
        f.create_dataset('chunked', data=rng.integers(0, 1000, N, dtype='<i4'), chunks=(16384,),
                         compression='gzip')


def _read_fd(fd, n):
    out = b''
    while len(out) < n:
        b = os.pread(fd, min(1 << 20, n - len(out)), len(out))
        assert b, len(out)
        out += b
    return out


@pytest.mark.parametrize('how', ['deleted', 'replaced'])
def test_open_and_mapped_files_keep_their_bytes(mount, how):
    """Opened and mapped, nothing read; then the source is deleted (or replaced by rename): every
    byte still reads as h5py read it before, through the descriptors and the mappings."""
    src = tl.make_tmpdir('del-src-')
    p = osp.join(src, 'run.h5')
    _write(p, seed=1)
    exp = tl.make_tmpdir('del-exp-')
    old = {}
    with h5py.File(p, 'r') as f:
        for n in ('contig', 'chunked'):
            old[n] = f[n][()]
            np.save(osp.join(exp, n + '.npy'), old[n])
    m = mount(src)
    fds = {n: os.open(m.path('run.h5', n + '.raw'), os.O_RDONLY) for n in old}
    try:
        mapper = Mapper([(m.path('run.h5', n + '.npy'), osp.join(exp, n + '.npy')) for n in old])
        if how == 'deleted':
            os.unlink(p)
        else:
            time.sleep(0.05)   # a new mtime
            _write(p + '.new', seed=2)
            os.replace(p + '.new', p)
        for n, fd in fds.items():
            assert _read_fd(fd, old[n].nbytes) == old[n].tobytes(), n
        rc, out, err = mapper.read_all()
        assert rc == 0 and 'equal' in out, (rc, err[-2000:], m.log()[-3000:])
    finally:
        for fd in fds.values():
            os.close(fd)
    if how == 'replaced':   # a new open reads the new file
        with h5py.File(p, 'r') as f:
            np.testing.assert_array_equal(np.load(m.path('run.h5', 'contig.npy')), f['contig'][()])
    assert m.proc.poll() is None
    assert 'max_open_files' not in m.log(), m.log()


def _expected_key(out, manifest, source, key):
    for k in manifest['keys']:
        if k['source'] == source and k['key'] == key:
            return osp.join(out, 'expected', k['data'])
    raise KeyError((source, key))


def test_mapped_run_keys_keep_their_bytes_when_sequence_files_are_deleted(mount):
    """A module's key, a slow-data key and the stacked detector key of a run, mapped and not
    read; then every sequence file of module 0 and the last DA01 file are deleted: every row
    still reads as EXtra-data would have returned it (the generator's expected arrays)."""
    out = tl.make_tmpdir('del-run-')
    euxfel_mock.build(out, image_dims=(2, 16, 8), modules=2)
    manifest = json.load(open(osp.join(out, 'expected', 'expected.json')))
    run = manifest['run_dir']
    stack, _ = euxfel_mock.expected_stack(out, manifest)
    np.save(osp.join(out, 'expected', 'stack.npy'), stack)
    m = mount(run)
    mod0 = 'SPB_DET_AGIPD1M-1/DET/0CH0:xtdf'
    slow = ('SA1_XTD2_XGM/DOOCS/MAIN', 'pulseEnergy.photonFlux.value')
    pairs = [(m.path(*mod0.split('/'), 'image.data.npy'), _expected_key(out, manifest, mod0, 'image.data')),
             (m.path(*slow[0].split('/'), slow[1] + '.npy'), _expected_key(out, manifest, *slow)),
             (m.path('SPB_DET_AGIPD1M-1', 'image.data.npy'), osp.join(out, 'expected', 'stack.npy'))]
    side = json.load(open(pairs[0][0][:-4] + '.json'))
    assert len(side['files']) == 3
    mapper = Mapper(pairs)
    for name in side['files'] + ['RAW-R0338-DA01-S00001.h5']:
        os.unlink(osp.join(run, name))
    rc, out_, err = mapper.read_all()
    assert rc == 0 and 'equal' in out_, (rc, err[-2000:], m.log()[-3000:])
    assert m.proc.poll() is None
    shutil.rmtree(out, ignore_errors=True)


def test_beyond_max_open_files_a_warning_names_the_virtual_file(mount):
    """With -o max_open_files=8 the daemon holds at most 7 source files for open virtual files (one
    descriptor is kept for reading others): a key over 12 sequence files is opened with a warning
    naming it in the mount, once; the files it holds keep their bytes after a delete, a file it
    could not hold gives ESTALE (never other bytes)."""
    out = tl.make_tmpdir('del-bound-')
    run = euxfel_mock.build(out, scenario='bench', modules=1, image_dims=(1, 16, 8), seq_files=12,
                            trains_per_file=2)
    manifest = json.load(open(osp.join(out, 'expected', 'expected.json')))
    mod0 = 'SPB_DET_AGIPD1M-1/DET/0CH0:xtdf'
    want = np.load(_expected_key(out, manifest, mod0, 'image.data'))
    m = mount(run, 'max_open_files=8')
    key = m.path(*mod0.split('/'), 'image.data.raw')
    side = json.load(open(key[:-4] + '.json'))
    assert len(side['files']) == 12
    fd = os.open(key, os.O_RDONLY)
    fd2 = os.open(key, os.O_RDONLY)
    try:
        lines = [ln for ln in m.log().splitlines() if 'max_open_files' in ln]
        assert len(lines) == 1 and 'warning' in lines[0], m.log()
        assert key in lines[0] and '7 of its 12 source files' in lines[0], lines[0]
        # files in row order: the first 7 are held. A file it could not hold: ESTALE (nothing
        # of it was read before, so the kernel holds none of its pages)
        row = want[0].nbytes
        os.unlink(osp.join(run, side['files'][-1]))
        with pytest.raises(OSError) as e:
            os.pread(fd, row, row * (len(want) - 1))
        assert e.value.errno == errno.ESTALE
        # rows of the first file keep their bytes
        os.unlink(osp.join(run, side['files'][0]))
        assert os.pread(fd, row * 2, 0) == want[:2].tobytes()
    finally:
        os.close(fd)
        os.close(fd2)
    assert m.proc.poll() is None
    shutil.rmtree(out, ignore_errors=True)
