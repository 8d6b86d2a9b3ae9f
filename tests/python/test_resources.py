"""Resources: a tree of 5,000 HDF5 files mounts and reads under a limit of 256 open files
(the descriptor cache and the HDF5 handle bound keep the daemon under it), every value equal to
h5py's, the daemon's memory bounded."""
import os
import os.path as osp
import shutil

import h5py
import numpy as np

import h5d_testlib as tl

NFILES = int(os.environ.get('H5D_RESOURCE_FILES', '5000'))


def test_5000_files_under_256_open_files(mount):
    d = tl.make_tmpdir('res-')
    proto = osp.join(d, 'proto.h5')
    with h5py.File(proto, 'w') as f:
        f.create_dataset('x', data=np.arange(1000, dtype='<i4').reshape(10, 100), chunks=(5, 100),
                         compression='gzip')
        f['y'] = np.float64(2.5)
    # 50 directories of 100 files; each file's x holds its own number at [0, 0]
    for i in range(NFILES):
        sub = osp.join(d, f'd{i // 100:02d}')
        os.makedirs(sub, exist_ok=True)
        shutil.copyfile(proto, osp.join(sub, f'f{i:04d}.h5'))
    os.unlink(proto)
    # the daemon runs under RLIMIT_NOFILE=256 (prlimit), with max_open_files=64
    wrapper = osp.join(tl.make_tmpdir('res-bin-'), 'h5direct-nofile256')
    with open(wrapper, 'w') as f:
        f.write(f'#!/bin/sh\nexec prlimit --nofile=256:256 -- {tl.BIN} "$@"\n')
    os.chmod(wrapper, 0o755)
    real_bin, tl.BIN = tl.BIN, wrapper  # same pid: sh and prlimit exec the daemon
    try:
        m = mount(d, 'cache_size=16M,max_open_files=64')
    finally:
        tl.BIN = real_bin
    expected = np.arange(1000, dtype='<i4').reshape(10, 100)
    peak_fds = 0
    n = 0
    for sub in sorted(os.listdir(m.mnt)):
        if sub == '.h5direct':
            continue
        for name in sorted(os.listdir(m.path(sub))):
            a = np.load(m.path(sub, name, 'x.npy'))
            assert np.array_equal(a, expected), (sub, name)
            assert float(np.load(m.path(sub, name, 'y.npy'))) == 2.5
            n += 1
            if n % 500 == 0:
                peak_fds = max(peak_fds, len(os.listdir(f'/proc/{m.proc.pid}/fd')))
    assert n == NFILES
    assert peak_fds < 256
    with open(f'/proc/{m.proc.pid}/limits') as f:
        assert any(ln.startswith('Max open files') and ' 256 ' in ln for ln in f)
    with open(f'/proc/{m.proc.pid}/status') as f:
        hwm = [int(ln.split()[1]) for ln in f if ln.startswith('VmHWM')][0] << 10
    print(f'\n{NFILES} files read; daemon peak fds {peak_fds}, VmHWM {hwm >> 20} MiB')
    if not os.environ.get('H5D_SANITIZED'):
        assert hwm < 16 * 2**20 + 200 * 2**20
    assert m.stats()['error_replies'] == {}
    assert m.proc.poll() is None
