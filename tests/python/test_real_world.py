"""Real-world file classes (issue 14) made with h5py, each checked against h5py/numpy: tagged
opaque datetime64, zero-size datasets memory-mapped, groups linking back to an ancestor, names
too long to list. (The corpus ones: test_corpus.py.)"""
import errno
import json
import os
import os.path as osp
import subprocess
import sys

import h5py
import numpy as np
import pytest

from h5d_testlib import Mount, make_tmpdir

HERE = osp.dirname(osp.abspath(__file__))
CORPUS = osp.join(osp.dirname(osp.dirname(HERE)), '..', 'shared', 'corpus')
HDF5_TESTS = osp.join(CORPUS, 'shyrmapp+hdf5', 'testdata', 'hdf5_official')


def mount_hdf5_test_files(prefix, names):
    """HDF5's test files `names` linked (never copied) into a new source directory, mounted."""
    src = make_tmpdir(prefix)
    for n in names:
        os.symlink(osp.abspath(osp.join(HDF5_TESTS, n)), osp.join(src, n))
    return src, Mount(src)


def check_tree_like_h5py(h5path, top):
    """Every member h5py lists in every group is shown under its name in `top` (the file's
    directory in the mount): a group as a directory, a dataset as NAME.json, and a link back to
    a group on the way there (same file number and object address: an endless tree otherwise)
    as a relative symbolic link whose realpath is that group's directory; `find` over it ends
    without following them. Returns how many such links were seen."""
    loops = 0
    with h5py.File(h5path, 'r') as f:
        def walk(group, mdir, above):
            nonlocal loops
            shown = set(os.listdir(mdir))
            for name in group:
                obj = group.get(name)
                if obj is None or len(name.encode()) > 2040:  # dangling, or too long to list:
                    continue                                   # left out, as documented
                info = h5py.h5o.get_info(obj.id)
                key = (info.fileno, info.addr)
                mpath = osp.join(mdir, name)
                if isinstance(obj, h5py.Group) and key in dict(above):
                    loops += 1
                    assert name in shown and osp.islink(mpath), (h5path, obj.name, mpath, shown)
                    target = os.readlink(mpath)
                    assert not osp.isabs(target) and set(target.split('/')) <= {'.', '..'}, target
                    assert osp.realpath(mpath) == osp.realpath(dict(above)[key]), (mpath, target)
                elif isinstance(obj, h5py.Group):
                    assert name in shown and osp.isdir(mpath) and not osp.islink(mpath), (h5path, mpath, shown)
                    walk(obj, mpath, above + [(key, mpath)])
                elif isinstance(obj, h5py.Dataset):
                    assert name + '.json' in shown, (h5path, mpath, shown)
        root = h5py.h5o.get_info(f["/"].id)
        walk(f['/'], top, [((root.fileno, root.addr), top)])
    out = subprocess.run(['find', top], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) < 10000, 'find did not end soon: ' + out.stdout[-500:]
    return loops


@pytest.mark.skipif(not osp.isdir(HDF5_TESTS), reason='../shared/corpus is absent: HDF5 test files not there')
def test_links_back_to_an_ancestor_are_relative_symlinks_like_h5py_lists_them():
    """tloop.h5, thlink.h5, h5ex_g_traverse.h5 (HDF5's test files): groups linking back to a
    group above them, which h5py lists (a user looking for /g1/g1.1/g2.1 finds it)."""
    names = ['tloop.h5', 'thlink.h5', 'h5ex_g_traverse.h5']
    src, m = mount_hdf5_test_files('rw-loops-', names)
    try:
        for n in names:
            assert check_tree_like_h5py(osp.join(src, n), m.path(n)) > 0, n
        # tloop.h5: /g1/g1.1/g2.1 is /g1 again
        assert os.readlink(m.path('tloop.h5', 'g1', 'g1.1', 'g2.1')) == '..'
        assert sorted(os.listdir(m.path('tloop.h5', 'g1', 'g1.1', 'g2.1'))) == ['.attrs.json', 'g1.1']
        assert m.proc.poll() is None
    finally:
        m.close()


def test_real_world_classes():
    src = make_tmpdir('rw-src-')
    p = osp.join(src, 'f.h5')
    t = np.array(['2020-01-01T00:00:01', '2021-05-05', 'NaT'], dtype='datetime64[s]')
    long_name = 'L' * 3000
    with h5py.File(p, 'w') as f:
        f.create_dataset('t', data=t.view(h5py.opaque_dtype(t.dtype)))
        f.create_dataset('td', data=np.arange(4).astype('timedelta64[ms]').view(h5py.opaque_dtype('<m8[ms]')))
        f['empty'] = np.zeros((0, 5), '<f4')
        f.create_dataset('empty_chunked', shape=(0, 3), maxshape=(None, 3), dtype='<i8')
        g = f.create_group('g')
        g['x'] = np.arange(3)
        g['loop'] = g        # hard link back to itself
        g['up'] = f['/']     # and to the root
        g[long_name] = np.arange(2)
        g['after_long'] = np.arange(4)
    with h5py.File(p, 'r') as f:
        want_t, want_td = f['t'][()], f['td'][()]
        assert want_t.dtype == np.dtype('<M8[s]')  # h5py's reading of the tag
    ok = open(p, 'rb').read()
    with open(osp.join(src, 'unopenable.h5'), 'wb') as fb:  # the superblock zeroed after the signature
        fb.write(ok[:8] + bytes(56) + ok[64:])
    m = Mount(src)
    try:
        # A file libhdf5 cannot open: listed, then EIO with a log line saying why.
        assert 'unopenable.h5' in os.listdir(m.mnt)
        try:
            os.listdir(m.path('unopenable.h5'))
            raise AssertionError('listing an unopenable file succeeded')
        except OSError as e:
            assert e.errno == errno.EIO, e
        assert 'unopenable.h5: cannot open as HDF5' in m.log(), m.log()
        got = np.load(m.path('f.h5', 't.npy'))
        assert got.dtype == want_t.dtype and np.array_equal(got, want_t, equal_nan=True)
        got = np.load(m.path('f.h5', 'td.npy'))
        assert got.dtype == want_td.dtype and np.array_equal(got, want_td)
        with open(m.path('f.h5', 't.json')) as fj:
            assert json.load(fj)['dtype'] == '<M8[s]'
        for name, shape in [('empty', (0, 5)), ('empty_chunked', (0, 3))]:
            a = np.load(m.path('f.h5', name + '.npy'), mmap_mode='r')
            assert a.shape == shape
        listing = sorted(os.listdir(m.path('f.h5', 'g')))
        assert listing == ['.attrs.json', 'after_long.json', 'after_long.npy', 'after_long.raw',
                           'loop', 'up', 'x.json', 'x.npy', 'x.raw'], listing
        assert np.array_equal(np.load(m.path('f.h5', 'g', 'after_long.npy')), np.arange(4))
        check_tree_like_h5py(p, m.path('f.h5'))
        assert os.readlink(m.path('f.h5', 'g', 'loop')) == '.'
        assert os.readlink(m.path('f.h5', 'g', 'up')) == '..'
        assert 'too long to list' in m.log(), m.log()
    finally:
        m.close()


def test_vds_source_behind_a_missing_external_link_is_in_missing_files():
    src = make_tmpdir('rw-vds-')
    with h5py.File(osp.join(src, 'a.h5'), 'w') as f:
        f['present'] = np.arange(4, dtype='<i4')
        f['linked'] = h5py.ExternalLink('gone.h5', '/data')  # gone.h5 does not exist
    with h5py.File(osp.join(src, 'vds.h5'), 'w') as f:
        lay = h5py.VirtualLayout(shape=(2, 4), dtype='<i4')
        lay[0] = h5py.VirtualSource('a.h5', 'present', shape=(4,))
        lay[1] = h5py.VirtualSource('a.h5', 'linked', shape=(4,))
        f.create_virtual_dataset('v', lay, fillvalue=-1)
    m = Mount(src)
    try:
        with open(m.path('vds.h5', 'v.json')) as fj:
            v = json.load(fj)['virtual']
        assert v['missing_files'] == ['a.h5:linked'], v
        assert [bool(mp.get('source_missing')) for mp in v['mappings']] == [False, True], v
    finally:
        m.close()


def test_numpy_tagged_opaque_types_read_as_h5py_reads_them():
    """h5py stores numpy dtypes it has no HDF5 type for as opaque types tagged NUMPY:<dtype str>
    and reads them back as np.dtype(tag[6:]): the mount gives that dtype (.npy header, .json)
    and h5py's bytes; a tag that is no such dtype, or whose size differs from the type's (h5py
    cannot read it then), stays |V<size>."""
    src = make_tmpdir('rw-opaque-')
    p = osp.join(src, 'o.h5')
    rng = np.random.default_rng(7)
    cases = [('s21', b'NUMPY:|S21', 21), ('i4', b'NUMPY:<i4', 4), ('f8be', b'NUMPY:>f8', 8),
             ('u2', b'NUMPY:<U2', 8), ('v3', b'NUMPY:|V3', 3), ('b1', b'NUMPY:|b1', 1),
             ('c8', b'NUMPY:<c8', 8), ('bogus', b'NUMPY:bogus', 4), ('size_differs', b'NUMPY:|S4', 5),
             ('other_tag', b'some tag', 6)]
    with h5py.File(p, 'w') as f:
        for name, tag, size in cases:
            t = h5py.h5t.create(h5py.h5t.OPAQUE, size)
            t.set_tag(tag)
            d = h5py.h5d.create(f.id, name.encode(), t, h5py.h5s.create_simple((3, 2)))
            raw = rng.integers(0, 256, size=3 * 2 * size, dtype=np.uint8)
            if name == 'b1':
                raw &= 1
            if name == 'u2':
                raw = np.frombuffer(np.array([['ab', 'c'], ['', 'xy'], ['q', 'rs']], '<U2').tobytes(), np.uint8)
            d.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(raw).view(f'|V{size}').reshape(3, 2), mtype=t)
    m = Mount(src)
    try:
        with h5py.File(p, 'r') as f:
            for name, tag, size in cases:
                got = np.load(m.path('o.h5', name + '.npy'))
                with open(m.path('o.h5', name + '.json')) as fj:
                    side = json.load(fj)
                try:
                    want = f[name][()]
                except (OSError, TypeError, ValueError):
                    want = None  # h5py cannot read it: the opaque bytes as they are
                if want is not None:
                    assert got.dtype == want.dtype and got.dtype.str == want.dtype.str, (name, got.dtype, want.dtype)
                    assert got.tobytes() == want.tobytes(), name
                else:
                    assert got.dtype.str == f'|V{size}', (name, got.dtype)
                assert side['dtype'] == got.dtype.str, (name, side['dtype'])
    finally:
        m.close()


ATTR_ORACLE = r'''
import sys, json, h5py
path, obj, names = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with h5py.File(path, 'r') as f:
    o = f[obj]
    print(json.dumps({'count': h5py.h5a.get_num_attrs(o.id)}), flush=True)
    for n in names:
        try:
            o.attrs[n]
            print(json.dumps({n: 'ok'}), flush=True)
        except Exception as e:
            print(json.dumps({n: str(e)}), flush=True)
'''


@pytest.mark.skipif(not osp.isdir(HDF5_TESTS), reason='../shared/corpus is absent: HDF5 test files not there')
def test_attributes_libhdf5_cannot_read_are_listed_unreadable_and_the_rest_reads():
    """tattr2.h5, h5diff_attr1.h5, h5diff_attr3.h5: attributes of every type on the root, a
    group and a dataset, some of which libhdf5 1.10.8 cannot decode (and crashed on, listing
    them by index). Each object's .json / .attrs.json reads and has as many attributes as
    libhdf5 counts; an attribute h5py reads by its name has a value, one h5py cannot read says
    "unreadable: <why>"; the data read as h5py reads them."""
    names = ['tattr2.h5', 'h5diff_attr1.h5', 'h5diff_attr3.h5']
    src, m = mount_hdf5_test_files('rw-attrs-', names)
    try:
        unreadable = 0
        for n in names:
            with h5py.File(osp.join(src, n), 'r') as f:
                objects = ['/'] + [k for k in f if isinstance(f.get(k), (h5py.Group, h5py.Dataset))]
                for k in objects:
                    if isinstance(f[k], h5py.Dataset):
                        side = m.path(n, k + '.json')
                        assert np.array_equal(np.load(m.path(n, k + '.npy')), f[k][()]), (n, k)
                    else:
                        side = m.path(n, k.strip('/'), '.attrs.json')
                    with open(side) as fj:
                        attrs = json.load(fj)['attrs']
                    out = subprocess.run([sys.executable, '-c', ATTR_ORACLE, osp.join(src, n), k, json.dumps(sorted(attrs))],
                                         capture_output=True, text=True, timeout=120)
                    said = {}
                    for line in out.stdout.splitlines():
                        said.update(json.loads(line))
                    assert said.get('count') == len(attrs), (n, k, said.get('count'), len(attrs))
                    for a, v in attrs.items():
                        if a not in said:
                            continue  # h5py died before it: nothing to compare
                        bad = isinstance(v, str) and v.startswith('unreadable: ')
                        # h5py reads it -> it has a value here; libhdf5 cannot open it (h5py
                        # says so) -> unreadable here. (h5py also fails on some types libhdf5
                        # opens, opaque ones: those show their placeholder here.)
                        assert not (bad and said[a] == 'ok'), (n, k, a, v)
                        if "can't open" in said[a].lower():
                            assert bad, (n, k, a, v, said[a])
                        unreadable += bad
        assert unreadable > 0
        assert m.proc.poll() is None
    finally:
        m.close()
