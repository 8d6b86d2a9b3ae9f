"""Access through an allow_other mount as other users would meet the source: symlinks that lead
through private directories, chmod and chown of a source while mounted, files created through a
writable mount and who owns them. The oracle is the kernel itself: each user's access to the
resolved source path, tried directly (setpriv ... cat SOURCE), against the same user's access
through the mount. Throwaway users are numeric uids (setpriv needs no passwd entry); every file
they own lives in the test's own temporary directories."""
import json
import os
import os.path as osp
import shutil
import stat
import subprocess

import h5py
import numpy as np
import pytest

import h5d_testlib as tl

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which('setpriv'),
                                reason='needs root (allow_other, other users) and setpriv')

ALICE, BOB, EVE = 61001, 61002, 61003  # no passwd entries needed
X = np.arange(12, dtype='<u2').reshape(3, 4)


def _h5(path, owner=None, mode=0o644):
    with h5py.File(path, 'w') as f:
        f['x'] = X
    if owner is not None:
        os.chown(path, owner, owner)
    os.chmod(path, mode)
    return path


def as_user(uid, *cmd, groups=()):
    ids = [f'--reuid={uid}', f'--regid={uid}']
    ids += [f'--groups={",".join(map(str, groups))}'] if groups else ['--clear-groups']
    return subprocess.run(['setpriv'] + ids + list(cmd), capture_output=True, timeout=30)


def can_read(uid, path):
    r = as_user(uid, 'cat', path)
    return r.returncode == 0, r


def _private_dir(parent, name, owner, mode=0o700):
    d = osp.join(parent, name)
    os.mkdir(d)
    os.chown(d, owner, owner)
    os.chmod(d, mode)
    return d


@pytest.fixture
def tree():
    """src/ (0755) with alice/ (alice's, 0755) and bob/ (bob's, 0700) holding secret.h5 (0644);
    alice plants links to bob's file, to bob's directory, and to a file in a 0700 directory
    outside the source; outside/ (root's, 0700) holds out.h5 (0644)."""
    base = tl.make_tmpdir('acc-')
    src = osp.join(base, 'src')
    os.mkdir(src)
    os.chmod(src, 0o755)
    alice = _private_dir(src, 'alice', ALICE, 0o755)
    bob = _private_dir(src, 'bob', BOB, 0o700)
    _h5(osp.join(bob, 'secret.h5'), BOB, 0o644)
    _h5(osp.join(alice, 'own.h5'), ALICE, 0o644)
    outside = _private_dir(base, 'outside', 0, 0o700)
    _h5(osp.join(outside, 'out.h5'), 0, 0o644)
    # planted by alice herself (the links are hers, in her directory)
    for name, target in [('to_secret.h5', '../bob/secret.h5'), ('to_bob', '../bob'),
                         ('to_out.h5', osp.join(outside, 'out.h5'))]:
        r = as_user(ALICE, 'ln', '-s', target, osp.join(alice, name))
        assert r.returncode == 0, r.stderr
    return src, outside


def test_symlink_into_private_directory_is_denied_as_directly(tree, mount):
    """A link planted by alice into bob's 0700 directory (or root's, outside the source) gives
    alice EACCES through the mount, as reading the source directly does; bob, who may pass his
    own directory, reads through alice's link; root reads everything. Asked after root has
    looked every name up (the kernel's cached entries do not let alice in either)."""
    src, outside = tree
    m = mount(src, 'allow_other')
    x = X.tobytes()
    cases = {  # mount path -> the resolved source file
        ('alice', 'to_secret.h5'): osp.join(src, 'bob', 'secret.h5'),
        ('alice', 'to_out.h5'): osp.join(outside, 'out.h5'),
        ('alice', 'own.h5'): osp.join(src, 'alice', 'own.h5'),
    }
    for parts in cases:  # root first: every entry is in the kernel's caches now
        assert open(m.path(*parts, 'x.raw'), 'rb').read() == x
    for uid in (ALICE, BOB, EVE):
        for parts, source in cases.items():
            direct, _ = can_read(uid, source)
            through, r = can_read(uid, m.path(*parts, 'x.raw'))
            assert through == direct, (uid, parts, direct, r.stderr)
            if through:
                assert r.stdout == x
            else:
                assert b'Permission denied' in r.stderr, r.stderr
            listed = as_user(uid, 'ls', m.path(*parts))
            assert (listed.returncode == 0) == direct, (uid, parts, listed.stderr)
    # the expected outcome, spelled out: only bob (and root) reach bob's file
    assert not can_read(ALICE, m.path('alice', 'to_secret.h5', 'x.raw'))[0]
    assert can_read(BOB, m.path('alice', 'to_secret.h5', 'x.raw'))[0]
    assert not can_read(ALICE, m.path('alice', 'to_out.h5', 'x.raw'))[0]
    # a link to bob's directory itself: shown with bob's mode, so the kernel refuses alice
    r = as_user(ALICE, 'ls', m.path('alice', 'to_bob'))
    assert r.returncode != 0 and b'Permission denied' in r.stderr
    assert f'uid {ALICE} may not pass through {osp.join(src, "bob")}' in m.log()


def test_chmod_and_chown_of_a_source_while_mounted(tree, mount):
    """A new open after chmod/chown is decided on the source's new mode and owner, with the
    default attribute timeout (one day) too; with attr_timeout=0 the mode and owner shown
    follow at once."""
    src, _ = tree
    own = osp.join(src, 'alice', 'own.h5')
    x = X.tobytes()
    for opts in ('allow_other', 'allow_other,attr_timeout=0,entry_timeout=0'):
        os.chown(own, ALICE, ALICE)
        os.chmod(own, 0o644)
        m = mount(src, opts)
        p = m.path('alice', 'own.h5', 'x.raw')
        ok, r = can_read(EVE, p)
        assert ok and r.stdout == x, r.stderr
        os.chmod(own, 0o600)                      # revoked: eve is out, alice still in
        assert not can_read(EVE, p)[0]
        assert can_read(ALICE, p)[0]
        os.chown(own, EVE, EVE)                   # given to eve: alice is out
        assert can_read(EVE, p)[0]
        assert not can_read(ALICE, p)[0]
        if 'attr_timeout=0' in opts:
            st = os.stat(p)
            assert (st.st_uid, st.st_mode & 0o777) == (EVE, 0o400)
            assert os.stat(m.path('alice', 'own.h5')).st_mode & 0o777 == 0o500
            os.chmod(own, 0o644)                  # given back to everyone
            assert can_read(ALICE, p)[0]
            assert os.stat(p).st_mode & 0o777 == 0o444
        os.chmod(src, 0o700)                      # the source directory itself closed
        assert not can_read(EVE, p)[0]
        os.chmod(src, 0o755)
        m.close()


def test_files_created_through_a_writable_mount_belong_to_their_creator(mount):
    """mkdir NAME.h5 by alice makes a file alice owns on disk, with the mode she asked for
    (umask applied, x bits dropped); the mount shows the file's real owner and mode, and the
    datasets she writes into it are hers too. A plain directory is hers as well."""
    src = tl.make_tmpdir('acc-wr-')
    os.chmod(src, 0o777)
    m = mount(src, 'writable,allow_other')
    r = as_user(ALICE, 'sh', '-c', f'umask 027 && mkdir {m.path("a.h5")} && mkdir {m.path("plain")}')
    assert r.returncode == 0, r.stderr
    st = os.stat(osp.join(src, 'a.h5'))
    assert (st.st_uid, st.st_gid, oct(st.st_mode & 0o7777)) == (ALICE, ALICE, oct(0o640))
    d = os.stat(osp.join(src, 'plain'))
    assert (d.st_uid, oct(d.st_mode & 0o7777)) == (ALICE, oct(0o750))
    shown = os.stat(m.path('a.h5'))
    assert (shown.st_uid, shown.st_gid, oct(shown.st_mode & 0o777)) == (ALICE, ALICE, oct(0o750))
    spec = json.dumps({'shape': [3, 4], 'dtype': '<u2'})
    r = as_user(ALICE, 'sh', '-c', f"printf '%s' '{spec}' > {m.path('a.h5', 'd.json')}")
    assert r.returncode == 0, r.stderr
    r = as_user(ALICE, '/usr/bin/python3', '-c',
                f'import os; fd = os.open({m.path("a.h5", "d.raw")!r}, os.O_WRONLY); '
                f'os.pwrite(fd, bytes(range(24)), 0); os.close(fd)')
    assert r.returncode == 0, r.stderr
    ds = os.stat(m.path('a.h5', 'd.raw'))
    assert (ds.st_uid, ds.st_mode & 0o777) == (ALICE, 0o640)
    # eve (other) may neither read alice's 0640 file nor create in it
    assert not can_read(EVE, m.path('a.h5', 'd.raw'))[0]
    r = as_user(EVE, 'mkdir', m.path('a.h5', 'g'))
    assert r.returncode != 0
    m.close()
    with h5py.File(osp.join(src, 'a.h5'), 'r') as f:
        assert f['d'][()].tobytes() == bytes(range(24))
    assert os.stat(osp.join(src, 'a.h5')).st_uid == ALICE


def test_external_link_and_vds_sources_need_access_too(tree, mount):
    """A file alice may read whose dataset is an external link to bob's private file, or a
    virtual dataset whose source is that file: alice gets EACCES for those datasets (as reading
    bob's file directly), keeps reading her own; bob reads all of them."""
    src, _ = tree
    secret = osp.join(src, 'bob', 'secret.h5')
    p = osp.join(src, 'alice', 'links.h5')
    with h5py.File(p, 'w') as f:
        f['mine'] = np.arange(3, dtype='<i8')
        f['ext'] = h5py.ExternalLink(secret, '/x')
        lay = h5py.VirtualLayout(shape=X.shape, dtype=X.dtype)
        lay[:] = h5py.VirtualSource(secret, 'x', shape=X.shape)
        f.create_virtual_dataset('vds', lay)
    os.chown(p, ALICE, ALICE)
    os.chmod(p, 0o644)
    m = mount(src, 'allow_other')
    x = X.tobytes()
    for name in ('ext', 'vds'):
        ok, r = can_read(BOB, m.path('alice', 'links.h5', f'{name}.raw'))
        assert ok and r.stdout == x, (name, r.stderr)
        ok, r = can_read(ALICE, m.path('alice', 'links.h5', f'{name}.raw'))
        assert not ok and b'Permission denied' in r.stderr, (name, r.stdout[:40])
    ok, r = can_read(ALICE, m.path('alice', 'links.h5', 'mine.raw'))
    assert ok and r.stdout == np.arange(3, dtype='<i8').tobytes()


def test_no_creating_through_a_symlink_into_a_private_directory(tree, mount):
    """On a writable mount, a 0777 directory inside bob's 0700 one, reached through alice's
    symlink, takes no new file from alice (directly she gets EACCES too); bob may create there."""
    src, _ = tree
    drop = _private_dir(osp.join(src, 'bob'), 'drop', BOB, 0o777)
    r = as_user(ALICE, 'ln', '-s', '../bob/drop', osp.join(src, 'alice', 'to_drop'))
    assert r.returncode == 0, r.stderr
    assert as_user(ALICE, 'mkdir', osp.join(src, 'alice', 'to_drop', 'direct')).returncode != 0
    m = mount(src, 'writable,allow_other')
    r = as_user(ALICE, 'mkdir', m.path('alice', 'to_drop', 'new.h5'))
    assert r.returncode != 0 and b'Permission denied' in r.stderr, r.stderr
    assert os.listdir(drop) == []
    r = as_user(BOB, 'mkdir', m.path('alice', 'to_drop', 'bobs.h5'))
    assert r.returncode == 0, r.stderr
    assert os.stat(osp.join(drop, 'bobs.h5')).st_uid == BOB


def test_run_view_needs_read_access_to_the_sequence_files(mount):
    """A EuXFEL run whose detector module's sequence files are private (0600, root's): alice,
    who cannot read those files directly, cannot read that source's keys, nor what comes from
    every file of the run (run.json, trainId.npy), nor list the source; she reads the XGM keys,
    whose files she may read. Root reads everything."""
    import euxfel_mock
    base = tl.make_tmpdir('acc-run-')
    os.chmod(base, 0o755)
    run = euxfel_mock.build(base, scenario='bench', modules=1, seq_files=2, image_dims=(2, 16, 8))
    for d in (base, osp.dirname(run), run):
        os.chmod(d, 0o755)
    private = sorted(f for f in os.listdir(run) if 'AGIPD00' in f)
    assert private
    for f in private:
        os.chmod(osp.join(run, f), 0o600)
        assert not can_read(ALICE, osp.join(run, f))[0]
    m = mount(run, 'allow_other')
    xgm = m.path('SA1_XTD2_XGM', 'DOOCS', 'MAIN:output')
    key = sorted(n for n in os.listdir(xgm) if n.endswith('.npy'))[0]
    ok, r = can_read(ALICE, osp.join(xgm, key))
    assert ok and r.stdout == open(osp.join(xgm, key), 'rb').read(), r.stderr
    det = m.path('SPB_DET_AGIPD1M-1', 'DET', '0CH0:xtdf')
    for p in (osp.join(det, 'image.data.npy'), m.path('run.json'), m.path('trainId.npy')):
        assert can_read(0, p)[0], p
        ok, r = can_read(ALICE, p)
        assert not ok and b'Permission denied' in r.stderr, (p, r.stdout[:40])
    r = as_user(ALICE, 'ls', det)
    assert r.returncode != 0 and b'Permission denied' in r.stderr


def test_external_link_to_a_group_needs_access_to_its_file(tree, mount):
    """An external link to a *group* of bob's private file (its datasets read through the file
    the link is in): alice can neither list that group nor read its datasets, as reading bob's
    file directly; bob can; alice's own datasets beside the link stay readable."""
    src, _ = tree
    secret = osp.join(src, 'bob', 'secret.h5')
    p = osp.join(src, 'alice', 'glink.h5')
    with h5py.File(p, 'w') as f:
        f['mine'] = np.arange(4, dtype='<i4')
        f['theirs'] = h5py.ExternalLink(secret, '/')
        f['rel'] = h5py.ExternalLink('../bob/secret.h5', '/')
    os.chown(p, ALICE, ALICE)
    os.chmod(p, 0o644)
    m = mount(src, 'allow_other')
    for g in ('theirs', 'rel'):
        x = m.path('alice', 'glink.h5', g, 'x.raw')
        ok, r = can_read(BOB, x)
        assert ok and r.stdout == X.tobytes(), (g, r.stderr)
        ok, r = can_read(ALICE, x)
        assert not ok and b'Permission denied' in r.stderr, (g, r.stdout[:40])
        r = as_user(ALICE, 'ls', m.path('alice', 'glink.h5', g))
        assert r.returncode != 0 and b'Permission denied' in r.stderr, g
    ok, r = can_read(ALICE, m.path('alice', 'glink.h5', 'mine.raw'))
    assert ok and r.stdout == np.arange(4, dtype='<i4').tobytes()


_PROBE = r'''
import errno, json, os, sys
def attempt(fn):
    try:
        return fn()
    except OSError as e:
        return errno.errorcode[e.errno]
out = {}
for p in sys.argv[1:]:
    out[p] = {
        'lstat': attempt(lambda: (lambda s: [s.st_mode, s.st_uid, s.st_gid])(os.lstat(p))),
        'open': attempt(lambda: os.close(os.open(p, os.O_RDONLY)) or 'ok'),
        'listdir': attempt(lambda: sorted(os.listdir(p))),
    }
print(json.dumps(out))
'''


def probe(uid, paths):
    """lstat (mode, uid, gid), open and listdir of each path as user `uid`: a value or an errno name."""
    r = as_user(uid, '/usr/bin/python3', '-c', _PROBE, *paths)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_ls_l_shows_mode_and_owner_of_what_a_user_may_not_open(mount):
    """As on any file system, `ls -l` of a directory another user may list shows the mode and
    owner of its entries, also of those they may not open: a root-only (0600) HDF5 file and a
    root-only (0700) directory show to eve through allow_other with the mode and owner that root
    (the daemon's user) sees through the mount, where they showed as `d?????????`. Opening and
    listing them give EACCES, as on the source; the names inside stay hidden (looking them up
    is refused, also after root has looked them up), and a sidecar of the private file stays
    unreadable. A file linked from the private directory to a public one is shown and read."""
    base = tl.make_tmpdir('acc-ls-')
    src = osp.join(base, 'src')
    os.mkdir(src)
    os.chmod(src, 0o755)
    _h5(osp.join(src, 'private.h5'), 0, 0o600)
    _h5(osp.join(src, 'public.h5'), 0, 0o644)
    pdir = _private_dir(src, 'pdir', 0, 0o700)
    _h5(osp.join(pdir, 'inner.h5'), 0, 0o644)
    m = mount(src, 'allow_other')
    # the oracle, first: what the source shows eve directly
    direct = probe(EVE, [osp.join(src, n) for n in ('private.h5', 'pdir', 'pdir/inner.h5')])
    assert isinstance(direct[osp.join(src, 'private.h5')]['lstat'], list)
    assert direct[osp.join(src, 'private.h5')]['open'] == 'EACCES'
    assert direct[osp.join(src, 'pdir')]['listdir'] == 'EACCES'
    assert direct[osp.join(src, 'pdir', 'inner.h5')]['lstat'] == 'EACCES'
    inside = [m.path('private.h5', 'x.npy'), m.path('private.h5', 'x.json'), m.path('pdir', 'inner.h5')]
    for p in inside:  # root first: the kernel caches these entries
        os.lstat(p)
    shown = {n: os.lstat(m.path(n)) for n in ('private.h5', 'public.h5', 'pdir')}
    got = probe(EVE, [m.path(n) for n in shown] + inside)
    for n, st in shown.items():
        assert got[m.path(n)]['lstat'] == [st.st_mode, st.st_uid, st.st_gid], (n, got[m.path(n)])
    assert stat.S_ISDIR(shown['private.h5'].st_mode) and stat.S_IMODE(shown['private.h5'].st_mode) == 0o500
    for n in ('private.h5', 'pdir'):
        assert got[m.path(n)]['listdir'] == 'EACCES', (n, got[m.path(n)])
        assert got[m.path(n)]['open'] == 'EACCES', (n, got[m.path(n)])
    assert got[m.path('public.h5')]['listdir'] == sorted(os.listdir(m.path('public.h5')))
    for p in inside:
        assert got[p] == {'lstat': 'EACCES', 'open': 'EACCES', 'listdir': 'EACCES'}, (p, got[p])
    ok, r = can_read(EVE, m.path('private.h5', 'x.raw'))
    assert not ok and b'Permission denied' in r.stderr
    # what the user sees typing it: no question marks
    r = as_user(EVE, 'ls', '-l', m.path())
    assert r.returncode == 0 and b'?' not in r.stdout, (r.stdout, r.stderr)
