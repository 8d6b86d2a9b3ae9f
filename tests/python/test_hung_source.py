"""A source file whose reads never answer (data on tape behind dCache, a stuck server), emulated
by bench/slowfs --hang: 24 readers blocked on it leave every other file readable at full depth,
bytes equal to h5py's, and a second SIGTERM ends the daemon (docs/architecture.md, "The I/O
path"; semantics.md)."""
import json
import os
import os.path as osp
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

from h5d_testlib import evict_pages, make_tmpdir

SLOWFS = os.environ.get('H5DIRECT_SLOWFS')
pytestmark = pytest.mark.skipif(not SLOWFS or not osp.exists(SLOWFS),
                                reason='H5DIRECT_SLOWFS (the built bench/slowfs) is not set')


def test_readers_hung_on_one_file_leave_the_others_readable_and_sigterm_ends_the_daemon(mount):
    d = make_tmpdir('hung-')
    rng = np.random.default_rng(5)
    good = rng.integers(0, 4000, (200, 256, 128)).astype('<u2')
    with h5py.File(osp.join(d, 'good.h5'), 'w') as f:
        f.create_dataset('data', data=good, chunks=(1, 256, 128), shuffle=True, compression='gzip',
                         compression_opts=1)
        f.create_dataset('plain', data=good[:64])
    with h5py.File(osp.join(d, 'tape.h5'), 'w') as f:
        f.create_dataset('pad', data=np.zeros(1 << 20, 'u1'))  # metadata stays readable below it
        f.create_dataset('data', data=good)
    with h5py.File(osp.join(d, 'tape.h5'), 'r') as f:
        hang_from = f['data'].id.get_offset()
    slow = mount(d, binary=SLOWFS, extra_args=['--latency-ms', '1', '--hang', f'tape.h5:{hang_from}'])
    m = mount(slow.mnt, 'io_depth=8')
    readers = [subprocess.Popen(['dd', f'if={m.path("tape.h5", "data.raw")}', 'of=/dev/null', 'bs=1M',
                                 f'skip={i % 6}'], stderr=subprocess.DEVNULL) for i in range(24)]
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with open(slow.path('.slowfs_stats')) as f:
                if json.load(f)['hung'] >= 8:
                    break
            time.sleep(0.1)
        for r in readers:
            assert r.poll() is None  # still waiting on the tape
        # Every other file reads whole, with its bytes, while they wait.
        for _ in range(2):
            evict_pages(osp.join(d, 'good.h5'), slow.path('good.h5'), m.path('good.h5', 'data.npy'),
                        m.path('good.h5', 'plain.npy'))
            assert np.array_equal(np.load(m.path('good.h5', 'data.npy')), good)
            assert np.array_equal(np.load(m.path('good.h5', 'plain.npy'), mmap_mode='r'), good[:64])
        with open(m.path('.h5direct', 'stats.json')) as f:
            st = json.load(f)
        assert st['io_depth'] == 8 and st['io_workers'] == 16
        # A second SIGTERM ends the daemon, though its reads of tape.h5 never return.
        m.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        m.proc.send_signal(signal.SIGTERM)
        m.proc.wait(timeout=30)
        assert 'some reads wait on a source that does not answer' in m.log()
    finally:
        for r in readers:
            r.kill()
            r.wait(10)
