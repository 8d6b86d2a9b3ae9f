"""No byte from outside a dataset's storage, and no allocation from an unchecked size (issue 17).

Each test writes a file with h5py, damages one record with h5d_damage (found through h5py's
low-level API), mounts it and reads. A read that would need bytes the dataset does not own is
EIO with one log line naming file, dataset and chunk; the file's other datasets read equal to
h5py. The damaged records: a contiguous dataspace grown past its storage, a chunk's filter mask
saying "stored raw" for a compressed chunk, a chunk address moved by -20 bytes, chunk-index keys
moved out of order or outside the maximum extent, a datatype size of 1 GiB, a shape whose byte
count overflows 2^64; and a damaged scale-offset dataset (read by libhdf5 in the helper) read
right after another file's.
"""
import errno
import json
import os
import os.path as osp
import re

import h5py
import numpy as np
import pytest

import h5d_damage as dmg
import h5d_testlib as tl

# 4 chunks of (16, 16, 16) <u2: 8 KiB each, page multiples, so that the kernel's page-sized
# reads of one chunk never touch its neighbours.
IMG = np.arange(64 * 16 * 16, dtype='<u2').reshape(64, 16, 16)
CHUNK = (16, 16, 16)
CB = 16 * 16 * 16 * 2


def _read(path, offset=0, size=None):
    if size is None:
        with open(path, 'rb') as f:
            f.seek(offset)
            return f.read()
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def _eio(path, offset=0, size=None):
    with pytest.raises(OSError) as e:
        _read(path, offset, size)
    assert e.value.errno == errno.EIO, e.value


def _error_lines(m):
    return [ln for ln in m.log().splitlines() if 'error' in ln.lower()]


def _check_logged(m, fname, dset, *words):
    """Every failure so far has exactly one log line (the kernel's repeats of a failed read are
    EIO replies without one), naming file, dataset and `words`."""
    s = m.stats()
    n_eio = s['error_replies'].get('EIO', 0)
    lines = _error_lines(m)
    assert n_eio >= 1, m.log()
    assert len(lines) == s['errors_reported'] <= n_eio, (s['errors_reported'], n_eio, lines)
    for ln in lines:
        assert fname in ln and dset in ln, ln
        for w in words:
            assert w in ln, (w, ln)
    return lines


def _check_others(m, path, skip):
    """Every dataset of `path` but `skip` reads through the mount equal to h5py."""
    name = osp.basename(path)
    with h5py.File(path, 'r') as f:
        for k in f:
            if k in skip:
                continue
            np.testing.assert_array_equal(np.load(m.path(name, k + '.npy')), f[k][()], err_msg=k)


def _write_chunked(path, maxshape=None):
    with h5py.File(path, 'w', libver='earliest') as f:
        f['first'] = np.arange(1000, dtype='<f8')
        f.create_dataset('plain', data=IMG, chunks=CHUNK, maxshape=maxshape)
        f.create_dataset('gz', data=IMG, chunks=CHUNK, compression='gzip')
        f['last'] = np.arange(500, dtype='<i8')


def test_contiguous_shape_beyond_storage_is_eio_not_the_next_bytes(mount):
    d = tl.make_tmpdir('ext-contig-')
    p = osp.join(d, 'grown.h5')
    a = np.arange(1237, dtype='<i4')
    with h5py.File(p, 'w', libver='earliest') as f:
        f['a'] = a
        f['b'] = np.full(3000, 7, dtype='<i4')  # the bytes right after a's storage
        f['c'] = np.linspace(0, 1, 50)
    dmg.grow_contiguous(p, 'a', 2000)
    with h5py.File(p, 'r') as f:
        assert f['a'].shape == (2000,) and f['a'].id.get_storage_size() == a.nbytes
    m = mount(d)
    raw = m.path('grown.h5', 'a.raw')
    assert os.stat(raw).st_size == 2000 * 4
    # Every read of it, wholly (the kernel reads whole pages and ahead: a read of the first
    # elements alone cannot be promised), and its .npy alike.
    _eio(raw)
    _eio(raw, 0, 16)
    _eio(raw, a.nbytes + 100, 16)
    _eio(m.path('grown.h5', 'a.npy'))
    _check_logged(m, 'grown.h5', '/a', 'beyond its storage')
    _check_others(m, p, skip={'a'})


def test_raw_flagged_compressed_chunk_is_eio_not_the_bytes_after_it(mount):
    d = tl.make_tmpdir('ext-mask-')
    p = osp.join(d, 'mask.h5')
    _write_chunked(p)
    dmg.flip_chunk_mask(p, 'gz', 1)  # chunk (1,0,0): "gzip skipped", stored size < 7680 bytes
    m = mount(d)
    raw = m.path('mask.h5', 'gz.raw')
    _eio(raw, CB, CB)
    _check_logged(m, 'mask.h5', '/gz', 'chunk (1,0,0)', 'stored unfiltered')
    for k in (0, 2, 3):  # the other chunks of the dataset decode as before
        assert _read(raw, k * CB, CB) == IMG[k * 16:(k + 1) * 16].tobytes()
    _check_others(m, p, skip={'gz'})


def test_chunk_address_moved_into_its_neighbour_is_eio(mount):
    d = tl.make_tmpdir('ext-addr-')
    p = osp.join(d, 'addr.h5')
    _write_chunked(p)
    ci = dmg.chunk_infos(p, 'plain')
    assert ci[2].byte_offset == ci[1].byte_offset + ci[1].size  # chunks back to back
    dmg.move_chunk_address(p, 'plain', 2, -20)
    m = mount(d)
    raw = m.path('addr.h5', 'plain.raw')
    # Both chunks of the overlapping pair: which record is wrong cannot be told from the file.
    _eio(raw, 2 * CB, CB)
    _eio(raw, CB, CB)
    lines = _check_logged(m, 'addr.h5', '/plain', 'overlap')
    assert any('chunk (2,0,0)' in ln for ln in lines) and any('chunk (1,0,0)' in ln for ln in lines), lines
    assert 'chunk(s) overlap' in m.log()
    for k in (0, 3):
        assert _read(raw, k * CB, CB) == IMG[k * 16:(k + 1) * 16].tobytes()
    _check_others(m, p, skip={'plain'})


@pytest.mark.parametrize('case', ['out_of_order', 'beyond_maxshape'])
def test_damaged_chunk_key_is_eio_never_silent_fill(mount, case):
    d = tl.make_tmpdir('ext-key-')
    p = osp.join(d, f'key_{case}.h5')
    if case == 'out_of_order':
        # Unlimited first dimension: (50,0,0) is a legal place for a chunk, but the key now
        # sorts after its right neighbour: libhdf5 finds neither and serves fill.
        _write_chunked(p, maxshape=(None, 16, 16))
        dmg.set_chunk_key(p, 'plain', 1, (80, 0, 0))
    else:
        _write_chunked(p)  # maxshape = shape: no chunk at (64,0,0) or beyond can exist
        dmg.set_chunk_key(p, 'plain', 3, (640, 0, 0))
    with h5py.File(p, 'r') as f:
        lib = f['plain'][()]
    assert not np.array_equal(lib, IMG)  # libhdf5 silently serves fill for the lost chunk
    m = mount(d)
    raw = m.path(f'key_{case}.h5', 'plain.raw')
    _eio(raw)
    # Caught by the key order (the one key moved sorts after the next); the maximum-extent
    # check itself, for a record whose neighbours moved along, is in the unit tests.
    words = ['key (5,0,0)', 'out of order'] if case == 'out_of_order' else ['key (40,0,0)', 'out of order']
    _check_logged(m, f'key_{case}.h5', '/plain', 'chunk index', *words)
    _check_others(m, p, skip={'plain'})


def _vm_hwm_kib(pid):
    with open(f'/proc/{pid}/status') as f:
        return int(re.search(r'VmHWM:\s+(\d+)', f.read()).group(1))


def _helper_pids(daemon_pid):
    out = []
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            with open(f'/proc/{pid}/stat') as f:
                ppid = int(f.read().rsplit(')', 1)[1].split()[1])
        except OSError:
            continue
        if ppid == daemon_pid:
            out.append(int(pid))
    return out


def test_damaged_type_size_allocates_nothing_of_that_size(mount):
    d = tl.make_tmpdir('ext-type-')
    p = osp.join(d, 'typesize.h5')
    with h5py.File(p, 'w', libver='earliest') as f:
        f['t'] = np.arange(64, dtype='<u2')
        f['ok'] = np.linspace(0, 1, 30)
    dmg.set_type_size(p, 't', 1073741828)
    m = mount(d)
    names = os.listdir(m.path('typesize.h5'))
    assert 't.json' in names and 't.npy' not in names and 't.raw' not in names, names
    side = json.loads(_read(m.path('typesize.h5', 't.json')))
    assert 'larger than the file' in side['why_not_array'], side
    np.testing.assert_array_equal(np.load(m.path('typesize.h5', 'ok.npy')), np.linspace(0, 1, 30))
    # Nobody allocated (and touched) the 1 GiB the type claims: the daemon's and the helpers'
    # peak resident sizes stay far below it (a few tens of MiB each normally).
    for pid in [m.proc.pid] + _helper_pids(m.proc.pid):
        assert _vm_hwm_kib(pid) < 512 * 1024, (pid, _vm_hwm_kib(pid))


def test_shape_bytes_overflowing_2_64_are_no_array(mount):
    d = tl.make_tmpdir('ext-ovf-')
    p = osp.join(d, 'overflow.h5')
    with h5py.File(p, 'w', libver='earliest') as f:
        f.create_dataset('big', shape=(4, 5), dtype='<f8', chunks=(2, 5))
        f['ok'] = np.arange(7)
    dmg.set_dims(p, 'big', (1 << 62, 5))  # 2^62 * 5 * 8 bytes: wraps 2^64
    m = mount(d)
    names = os.listdir(m.path('overflow.h5'))
    assert 'big.json' in names and 'big.raw' not in names and 'big.npy' not in names, names
    side = json.loads(_read(m.path('overflow.h5', 'big.json')))
    assert '2^63' in side['why_not_array'], side
    np.testing.assert_array_equal(np.load(m.path('overflow.h5', 'ok.npy')), np.arange(7))


def test_damaged_scaleoffset_chunk_is_eio_not_memory_of_another_file(mount):
    """libhdf5 decodes a scale-offset chunk whose minbits claims more bits than were stored by
    reading past the chunk's buffer, into whatever the helper's heap holds (in h5py, repeated
    reads of it differ): such a chunk is EIO, checked against its stored size before H5Dread."""
    d = tl.make_tmpdir('ext-so-')
    secret = np.full((64, 64), -1, dtype='<i4')
    with h5py.File(osp.join(d, 'a_secret.h5'), 'w') as f:
        f.create_dataset('s', data=secret, chunks=(64, 64), scaleoffset=0)
    q = osp.join(d, 'b_damaged.h5')
    with h5py.File(q, 'w') as f:
        f.create_dataset('x', data=np.arange(64 * 64, dtype='<i4').reshape(64, 64), chunks=(32, 64),
                         scaleoffset=0)
        f['ok'] = np.arange(5)
    ci = dmg.chunk_infos(q, 'x')[1]
    # The scale-offset header of the chunk starts with minbits (u32): 31 bits for each of the
    # 2048 elements need 7936 bytes, far more than the chunk holds.
    assert ci.size < 21 + 2048 * 31 // 8
    with open(q, 'r+b') as fh:
        fh.seek(ci.byte_offset)
        fh.write((31).to_bytes(4, 'little'))
    m = mount(d, 'hdf5_helpers=1')
    raw = m.path('b_damaged.h5', 'x.raw')
    half = 32 * 64 * 4
    for _ in range(3):
        assert _read(m.path('a_secret.h5', 's.raw')) == secret.tobytes()
        _eio(raw)
        _eio(raw, half, 64)
        assert _read(raw, 0, half) == np.arange(32 * 64, dtype='<i4').tobytes()
    _check_logged(m, 'b_damaged.h5', '/x', 'chunk (1,0)', 'scale-offset')
    np.testing.assert_array_equal(np.load(m.path('b_damaged.h5', 'ok.npy')), np.arange(5))
