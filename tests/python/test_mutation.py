"""Damaged files never take the mount down: h5py-written files of several layouts, chunk indexes
and filters, with random bytes changed, ranges zeroed and ends cut (fixed seeds, bounded in
count and time). The daemon never dies or hangs, and no read gives a byte from outside a
dataset: a dataset h5py can read gives h5py's bytes or EIO; one h5py cannot read gives the
undamaged file's bytes or EIO. Targeted damage where h5py itself gives wrong bytes or fill
(a contiguous shape grown past its storage, a compressed chunk flagged raw, a chunk address
moved into its neighbour, chunk-index keys out of order or beyond the maximum extent) gives
EIO for the damaged dataset and the undamaged file's bytes for every other one.
"""
import errno
import hashlib
import os
import os.path as osp
import threading
import time

import h5py
import numpy as np
import pytest

import h5d_damage as dmg
from h5d_testlib import Mount, make_tmpdir
from test_corpus import Oracle
from corpus_oracle import MAX_BYTES

SEED = 20261201
MUTANTS_PER_BASE = 75
TIME_LIMIT = 420  # seconds for the whole walk over every mutant


def write_bases(d):
    rng = np.random.default_rng(SEED)
    img = rng.integers(0, 4000, (40, 24, 16)).astype('<u2')
    f8 = rng.random((300, 7))
    paths = []
    for libver in ['earliest', 'latest']:
        p = osp.join(d, f'base_{libver}.h5')
        with h5py.File(p, 'w', libver=libver) as f:
            f['contig'] = f8
            f.create_dataset('gzip', data=img, chunks=(4, 24, 16), compression='gzip')
            f.create_dataset('shuffle_gzip_f32', data=f8, chunks=(50, 7), shuffle=True,
                             compression='gzip', fletcher32=True)
            f.create_dataset('lzf', data=img, chunks=(8, 12, 16), compression='lzf')
            # fixed array (latest), extensible array (one unlimited dim), v2 B-tree (two)
            f.create_dataset('fixed', data=img, chunks=(10, 24, 16))
            e = f.create_dataset('ext', data=img, chunks=(5, 24, 16), maxshape=(None, 24, 16))
            e.attrs['units'] = 'counts'
            f.create_dataset('bt2', data=f8, chunks=(32, 4), maxshape=(None, None),
                             compression='gzip')
            g = f.create_group('grp')
            g.attrs['n'] = np.arange(5)
            g['small'] = np.arange(10, dtype='<i4')
            g['s'] = b'hello'
        paths.append(p)
    return paths


def mutate(data, rng):
    b = bytearray(data)
    kind = rng.integers(0, 3)
    # Half of the changes hit the first 8 KiB, where the superblock, the root group and most
    # object headers are: metadata damage is what reaches libhdf5.
    span = 8192 if rng.random() < 0.5 else len(b)
    if kind == 0:  # random byte changes
        for _ in range(int(rng.integers(1, 9))):
            b[int(rng.integers(0, span))] = int(rng.integers(0, 256))
        return bytes(b), 'bytes'
    if kind == 1:  # a zeroed range
        n = int(rng.integers(8, 600))
        off = int(rng.integers(0, max(1, span - n)))
        b[off:off + n] = bytes(min(n, len(b) - off))
        return bytes(b), 'zeroed'
    cut = int(rng.integers(64, len(b)))  # truncated
    return bytes(b[:cut]), 'truncated'


# (name, damaged dataset, damage) applied to base_earliest.h5, whose chunk indexes are v1
# B-trees (keys without checksums: what libhdf5 does not notice).
TARGETED = [
    ('grown', '/contig', lambda p: dmg.set_dims(p, 'contig', (420, 7))),
    ('mask', '/gzip', lambda p: dmg.flip_chunk_mask(p, 'gzip', 3)),
    ('addr', '/fixed', lambda p: dmg.move_chunk_address(p, 'fixed', 2, -20)),
    ('key_order', '/ext', lambda p: dmg.set_chunk_key(p, 'ext', 2, (60, 0, 0))),
    ('key_max', '/fixed', lambda p: dmg.set_chunk_key(p, 'fixed', 3, (400, 0, 0))),
    # The last chunk's key: a found mutant (seed 9111) changed one byte there, and the chunk
    # was served while h5py read fill.
    ('key_elem', '/gzip', lambda p: dmg.set_chunk_elem_offset(p, 'gzip', 9, 0x61000000)),
    # Found by mutating other files (tests' random dataset zoo): a compact dataset's dims grown
    # past the bytes its layout message holds (h5py reads past the message), and a contiguous
    # one's stored size zeroed (it was served as fill; h5py reads the bytes at the address).
    ('compact_grown', '/compact', lambda p: dmg.set_dims(p, 'compact', (90,))),
    ('contig_size0', '/contig', lambda p: dmg.zero_contiguous_size(p, 'contig')),
]


def write_targeted(src, base, workdir):
    """The targeted mutants, each a damaged copy of `base` plus a compact dataset (the random
    mutants' bases have none: their stream of mutants stays as it was). Returns them and the
    undamaged file they are copies of."""
    tbase = osp.join(workdir, 'targeted_base.h5')
    with open(base, 'rb') as f, open(tbase, 'wb') as g:
        g.write(f.read())
    with h5py.File(tbase, 'a') as f:  # compact: the bytes live in the layout message
        space = h5py.h5s.create_simple((30,))
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        c = h5py.h5d.create(f.id, b'compact', h5py.h5t.STD_I16LE, space, dcpl=dcpl)
        c.write(h5py.h5s.ALL, h5py.h5s.ALL, np.arange(30, dtype='<i2') * 7)
    out = []
    for kind, dset, damage in TARGETED:
        name = f'targeted_{kind}.h5'
        with open(tbase, 'rb') as f, open(osp.join(src, name), 'wb') as g:
            g.write(f.read())
        damage(osp.join(src, name))
        out.append((name, dset))
    return out, tbase


def read_all(path, limit=MAX_BYTES):
    """The file's bytes; of a file larger than `limit` (a damaged shape can make a dataset of
    tens of GB, valid to serve: mostly fill), only its first and last MiB, read all the same."""
    try:
        with open(path, 'rb') as f:
            size = os.fstat(f.fileno()).st_size
            if size <= limit:
                return f.read(), None
            head = f.read(1 << 20)
            f.seek(size - (1 << 20))
            return head + f.read(), None
    except OSError as e:
        return None, e.errno


def test_mutated_files_never_kill_or_hang_the_daemon():
    src = make_tmpdir('mut-src-')
    bases = write_bases(make_tmpdir('mut-base-'))
    rng = np.random.default_rng(SEED)
    mutants = []
    for base in bases:
        data = open(base, 'rb').read()
        for i in range(MUTANTS_PER_BASE):
            mdata, kind = mutate(data, rng)
            name = f'{osp.basename(base)[:-3]}_{i:02d}_{kind}.h5'
            with open(osp.join(src, name), 'wb') as f:
                f.write(mdata)
            mutants.append(name)
    targeted, tbase = write_targeted(src, bases[0], make_tmpdir('mut-tbase-'))
    oracle = Oracle(timeout=30)
    answers = {n: oracle.ask(osp.join(src, n)) for n in mutants}
    # The undamaged files' bytes: what a dataset h5py cannot read may give instead of EIO.
    base_sha = {}
    for base in bases:
        for d in oracle.ask(base)['datasets']:
            if d['status'] == 'ok':
                base_sha[(osp.basename(base)[:-3], d['path'])] = d['sha256']
    target_sha = {d['path']: d['sha256'] for d in oracle.ask(tbase)['datasets'] if d['status'] == 'ok'}
    oracle.close()
    assert len(base_sha) >= 16, base_sha
    assert '/compact' in target_sha and all(d in target_sha for _, d in targeted), target_sha
    m = Mount(src, opts='hdf5_timeout=5')
    wrong = []
    outcome = {'done': False}
    counts = {'equal': 0, 'eio': 0, 'h5py_failed': 0}

    def walk():
        for n in mutants:
            for dirpath, dirnames, filenames in os.walk(m.path(n)):
                for fn in filenames:
                    read_all(osp.join(dirpath, fn))
            base = n.split('_')[0] + '_' + n.split('_')[1]
            for d in answers[n]['datasets']:
                if d['status'] not in ('ok', 'error'):
                    continue
                got, err = read_all(m.path(n, d['path'].lstrip('/') + '.raw'))
                if err is not None:
                    assert err in (errno.EIO, errno.ENOENT), (n, d['path'], os.strerror(err))
                    counts['eio'] += 1
                    continue
                sha = hashlib.sha256(got).hexdigest()
                if d['status'] == 'error':  # h5py failed: the undamaged bytes or EIO
                    counts['h5py_failed'] += 1
                    if sha != base_sha.get((base, d['path'])):
                        wrong.append(f'{n}:{d["path"]}: h5py fails, we give {len(got)} bytes that are '
                                     'not the undamaged file\'s')
                elif sha != d['sha256']:
                    wrong.append(f'{n}:{d["path"]}: bytes differ from h5py ({len(got)} bytes)')
                else:
                    counts['equal'] += 1
        for n, damaged in targeted:
            for path, sha in target_sha.items():
                got, err = read_all(m.path(n, path.lstrip('/') + '.raw'))
                if path == damaged:
                    if err != errno.EIO:
                        wrong.append(f'{n}:{path}: damaged, read gives '
                                     f'{os.strerror(err) if err else f"{len(got)} bytes"}, not EIO')
                elif err is not None or hashlib.sha256(got).hexdigest() != sha:
                    wrong.append(f'{n}:{path}: undamaged, read gives '
                                 f'{os.strerror(err) if err else "other bytes"}')
        outcome['done'] = True

    try:
        t0 = time.monotonic()
        th = threading.Thread(target=walk, daemon=True)
        th.start()
        th.join(TIME_LIMIT)
        assert not th.is_alive(), f'the walk did not end within {TIME_LIMIT} s (a hang)\n' + m.log()[-3000:]
        assert outcome['done'], 'the walk failed (see above)'
        assert m.proc.poll() is None and osp.ismount(m.mnt), 'the daemon died\n' + m.log()[-3000:]
        print(f'{len(mutants)} mutants in {time.monotonic() - t0:.0f} s; datasets h5py reads: '
              f'{counts["equal"]} equal, {counts["eio"]} EIO/ENOENT, {counts["h5py_failed"]} undamaged where h5py '
              f'fails; helper failures logged: '
              f'{m.log().count("HDF5 helper")}')
        # Most mutants leave most datasets readable: the comparison is not vacuous.
        assert counts['equal'] > len(mutants)
    finally:
        m.close()
    assert not wrong, '\n'.join(wrong)
