"""Filesystem behaviour of a mount: tree and names, modes mirroring the source, read-only
errors, stats.json, debug logging, laziness, lifecycle (signals, daemon mode, bad arguments)."""
import errno
import json
import os
import os.path as osp
import signal
import subprocess
import time

import h5py
import numpy as np
import pytest

import h5d_testlib as tl


def _h5(path, **kw):
    with h5py.File(path, 'w', **kw) as f:
        f['x'] = np.arange(12, dtype='<u2').reshape(3, 4)
        f.create_group('g')['y'] = np.float32(1.5)
    return path


@pytest.fixture
def srcdir():
    d = tl.make_tmpdir('fs-src-')
    os.mkdir(osp.join(d, 'sub'))
    _h5(osp.join(d, 'sub', 'one.h5'))
    _h5(osp.join(d, 'two.h5'))
    _h5(osp.join(d, 'renamed.bin'), userblock_size=1024)
    with open(osp.join(d, 'notes.txt'), 'w') as f:
        f.write('plain text')
    os.symlink('nowhere.h5', osp.join(d, 'dangling.h5'))
    os.symlink('two.h5', osp.join(d, 'alias.h5'))
    return d


def run(args, timeout=30):
    return subprocess.run([tl.BIN] + args, capture_output=True, text=True, timeout=timeout)


def test_directory_tree(srcdir, mount):
    m = mount(srcdir)
    assert sorted(os.listdir(m.mnt)) == ['.h5direct', 'alias.h5', 'renamed.bin', 'sub', 'two.h5']
    assert sorted(os.listdir(m.path('sub'))) == ['one.h5']
    assert sorted(os.listdir(m.path('two.h5'))) == ['.attrs.json', 'g', 'x.json', 'x.npy', 'x.raw']
    np.testing.assert_array_equal(np.load(m.path('renamed.bin', 'g', 'y.npy')), np.float32(1.5))
    np.testing.assert_array_equal(np.load(m.path('alias.h5', 'x.npy')),
                                  np.arange(12, dtype='<u2').reshape(3, 4))
    assert not osp.exists(m.path('notes.txt'))
    assert not osp.exists(m.path('dangling.h5'))


def test_single_file_source_is_its_root_group(srcdir, mount):
    m = mount(osp.join(srcdir, 'two.h5'))
    assert sorted(os.listdir(m.mnt)) == ['.attrs.json', '.h5direct', 'g', 'x.json', 'x.npy', 'x.raw']
    st = os.stat(m.path('x.npy'))
    assert st.st_size == 4096 + 24  # the header pads the data to a page boundary


def test_modes_and_owners_mirror_the_source(srcdir, mount):
    p = osp.join(srcdir, 'two.h5')
    os.chmod(p, 0o640)
    if os.geteuid() == 0:
        os.chown(p, 1234, 5678)
    m = mount(srcdir)
    d = os.stat(m.path('two.h5'))
    f = os.stat(m.path('two.h5', 'x.npy'))
    g = os.stat(m.path('two.h5', 'g'))
    src = os.stat(p)
    assert oct(d.st_mode & 0o7777) == oct(0o550)
    assert oct(g.st_mode & 0o7777) == oct(0o550)
    assert oct(f.st_mode & 0o7777) == oct(0o440)
    for st in (d, f, g):
        assert (st.st_uid, st.st_gid) == (src.st_uid, src.st_gid)
    sub = os.stat(m.path('sub'))
    assert sub.st_mode & 0o222 == 0


@pytest.mark.skipif(os.geteuid() != 0, reason='needs root to switch users')
def test_default_permissions_with_allow_other(srcdir, mount):
    os.chmod(osp.join(srcdir, 'two.h5'), 0o600)
    os.chmod(osp.join(srcdir, 'sub', 'one.h5'), 0o644)
    for p in (srcdir, osp.join(srcdir, 'sub')):
        os.chmod(p, 0o755)
    m = mount(srcdir, 'allow_other')

    def as_nobody(path):
        return subprocess.run(['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups',
                               'cat', path], capture_output=True, timeout=20)
    r = as_nobody(m.path('sub', 'one.h5', 'x.raw'))
    assert r.returncode == 0 and r.stdout == np.arange(12, dtype='<u2').tobytes()
    r = as_nobody(m.path('two.h5', 'x.raw'))
    assert r.returncode != 0 and b'denied' in r.stderr


def test_read_only(srcdir, mount):
    m = mount(srcdir)
    p = m.path('two.h5', 'x.npy')
    for mode in ('wb', 'r+b', 'ab'):
        with pytest.raises(OSError) as e:
            open(p, mode)
        assert e.value.errno == errno.EROFS
    attempts = [lambda: os.mkdir(m.path('new')),
                lambda: open(m.path('two.h5', 'new.npy'), 'wb'),
                lambda: os.unlink(p),
                lambda: os.rmdir(m.path('two.h5', 'g')),
                lambda: os.rename(p, m.path('two.h5', 'y.npy')),
                lambda: os.chmod(p, 0o644),
                lambda: os.truncate(p, 0),
                lambda: os.symlink('x', m.path('lnk'))]
    for fn in attempts:
        with pytest.raises(OSError) as e:
            fn()
        assert e.value.errno == errno.EROFS
    np.load(p)  # still readable


def test_stats_json(srcdir, mount):
    m = mount(srcdir)
    s0 = m.stats()
    assert (s0['decode_seconds'] > 0) == (s0['chunks_decoded'] > 0)
    for key in ('bytes_served', 'chunks_decoded', 'decode_seconds', 'decode_buffers', 'cache_hits',
                'cache_misses', 'fallbacks', 'errors', 'error_replies', 'reads'):
        assert key in s0
    data = open(m.path('two.h5', 'x.raw'), 'rb').read()
    assert len(data) == 24
    s1 = m.stats()
    assert s1['bytes_served'] >= s0['bytes_served'] + 24
    assert os.stat(m.path('.h5direct', 'stats.json')).st_mode & 0o222 == 0


def test_statfs(srcdir, mount):
    m = mount(srcdir)
    st = os.statvfs(m.mnt)
    assert st.f_namemax == 255
    assert st.f_flag & os.ST_RDONLY


def test_debug_logs_the_read_path(srcdir, mount):
    m = mount(srcdir, 'debug')
    np.load(m.path('two.h5', 'x.npy'))
    time.sleep(0.1)
    assert 'via direct' in m.log()


def test_name_collisions(mount):
    d = tl.make_tmpdir('names-')
    with h5py.File(osp.join(d, 'c.h5'), 'w') as f:
        f.create_group('a.npy')
        f['a'] = np.arange(3)
        f['b'] = np.arange(4)
        f.create_group('.h5direct')
    m = mount(osp.join(d, 'c.h5'))
    names = sorted(os.listdir(m.mnt))
    assert names == ['.attrs.json', '.h5direct', 'a.npy', 'a~ds.json', 'a~ds.npy', 'a~ds.raw', 'b.json',
                     'b.npy', 'b.raw']
    assert osp.isdir(m.path('a.npy'))
    np.testing.assert_array_equal(np.load(m.path('a~ds.npy')), np.arange(3))
    assert json.load(open(m.path('a~ds.json')))['path'] == '/a'
    assert sorted(os.listdir(m.path('.h5direct'))) == ['log', 'metrics', 'stats.json']


def _open_h5_fds(pid):
    out = []
    for fd in os.listdir(f'/proc/{pid}/fd'):
        try:
            target = os.readlink(f'/proc/{pid}/fd/{fd}')
        except OSError:
            continue
        if target.endswith('.h5'):
            out.append(target)
    return out


def test_lazy_opening(mount):
    d = tl.make_tmpdir('lazy-')
    for i in range(200):
        _h5(osp.join(d, f'f{i:03d}.h5'))
    m = mount(d)
    assert _open_h5_fds(m.proc.pid) == []
    assert len(os.listdir(m.mnt)) == 201
    assert _open_h5_fds(m.proc.pid) == []  # listing reads signatures only
    os.listdir(m.path('f007.h5'))
    opened = _open_h5_fds(m.proc.pid)
    assert all(p.endswith('f007.h5') for p in opened)


@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGINT])
def test_signal_unmounts(srcdir, sig):
    mnt = tl.make_tmpdir('mnt-sig-')
    m = tl.Mount(srcdir, mnt=mnt)
    try:
        os.listdir(m.mnt)
        m.proc.send_signal(sig)
        assert m.proc.wait(15) == 0
        assert not osp.ismount(mnt)
    finally:
        m.close()


def test_daemon_mode_returns_after_mount(srcdir):
    mnt = tl.make_tmpdir('mnt-daemon-')
    try:
        r = run([srcdir, mnt], timeout=30)
        assert r.returncode == 0, r.stderr
        assert osp.ismount(mnt)
        assert 'two.h5' in os.listdir(mnt)
    finally:
        tl.unmount(mnt)
    for _ in range(100):
        if not osp.ismount(mnt):
            break
        time.sleep(0.05)
    assert not osp.ismount(mnt)


def test_bad_arguments_fail_before_mounting(srcdir):
    mnt = tl.make_tmpdir('mnt-bad-')
    cases = [
        ([osp.join(srcdir, 'missing.h5'), mnt], 'source'),
        ([osp.join(srcdir, 'notes.txt'), mnt], 'not an HDF5 file'),
        ([srcdir, osp.join(mnt, 'missing')], 'mount point'),
        ([srcdir, osp.join(srcdir, 'notes.txt')], 'not a directory'),
        ([osp.join(srcdir, 'two.h5'), mnt, '-o', 'writable'], 'needs a directory'),
        ([srcdir, mnt, '-o', 'bogus'], "unknown option 'bogus'"),
        ([srcdir, mnt, '-o', 'cache_size=huge'], 'cache_size'),
        ([srcdir], 'missing'),
    ]
    for args, msg in cases:
        r = run(args)
        assert r.returncode != 0, args
        assert msg in r.stderr, (args, r.stderr)
        assert not osp.ismount(mnt)
    # foreground too: no hang, clear message
    r = run([osp.join(srcdir, 'missing.h5'), mnt, '-f'])
    assert r.returncode != 0 and 'No such file' in r.stderr


def test_help_and_version():
    r = run(['--help'])
    assert r.returncode == 0 and 'usage' in r.stdout and 'cache_size' in r.stdout
    r = run(['--version'])
    assert r.returncode == 0 and r.stdout.startswith('h5direct ')


def test_mount_helper_conventions(srcdir, mount):
    # what mount.fuse3 passes for `mount -t fuse.h5direct SRC MNT -o ro,nofail,...`
    m = mount(srcdir, 'ro,dev,suid,nofail,_netdev,default_permissions,fsname=mydata')
    with open('/proc/self/mounts') as f:
        line = [ln for ln in f if f' {m.mnt} ' in ln][0]
    fields = line.split()
    assert fields[0] == 'mydata'
    assert fields[2] == 'fuse.h5direct'
    assert 'ro' in fields[3].split(',')


def mount_read_ahead(m, expected):
    """The mount's read-ahead in sysfs, once the daemon has set it (right after INIT)."""
    dev = os.stat(m.mnt).st_dev
    path = f'/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb'
    for _ in range(100):
        with open(path) as f:
            if int(f.read()) == expected:
                break
        time.sleep(0.05)
    with open(path) as f:
        return int(f.read())


def mount_max_read(m):
    """The request cap the kernel shows for the mount (/proc/self/mounts), or None."""
    with open('/proc/self/mounts') as f:
        opts = [ln.split()[3] for ln in f if f' {m.mnt} ' in ln][0]
    caps = [int(o.split('=')[1]) for o in opts.split(',') if o.startswith('max_read=')]
    return caps[0] if caps else None


@pytest.mark.skipif(os.geteuid() != 0, reason='readahead_kb needs root')
@pytest.mark.parametrize('opts', ['readahead_kb=1024', 'readahead_kb=1024,splice=0', 'readahead_kb=3000'])
def test_readahead_kb_in_whole_requests(srcdir, mount, opts):
    """readahead_kb as asked, rounded up to whole requests when they are capped (splice=1: a
    window of 1 MiB would otherwise take a request of 964 KiB and one of 60 KiB)."""
    asked = int(opts.split(',')[0].split('=')[1])
    m = mount(srcdir, opts)
    cap = mount_max_read(m)
    if 'splice=0' in opts:
        assert cap is None or cap >= asked * 1024, cap
    elif int(open('/proc/sys/fs/pipe-max-size').read()) <= 1 << 20:
        assert cap is not None and cap % 4096 == 0 and cap < 1 << 20, cap  # a 1 MiB reply cannot fit
    cap_kb = cap // 1024 if cap and cap < asked * 1024 else None
    expected = -(-asked // cap_kb) * cap_kb if cap_kb else asked
    got = mount_read_ahead(m, expected)
    assert got == expected and got >= asked, (got, expected, cap, m.log())
    if cap_kb:
        assert got % cap_kb == 0 and got - cap_kb < asked


def test_config_file(srcdir, mount):
    cfg = osp.join(tl.make_tmpdir('cfg-'), 'h5d.json')
    with open(cfg, 'w') as f:
        json.dump({'threads': 2, 'cache_size': '64M', 'debug': True}, f)
    m = mount(srcdir, f'config={cfg}')
    np.load(m.path('two.h5', 'x.npy'))
    time.sleep(0.1)
    assert 'via direct' in m.log()


def test_corrupt_chunk_is_eio_and_logged_once(mount):
    d = tl.make_tmpdir('corrupt-')
    p = osp.join(d, 'bad.h5')
    tl.write_corrupt_chunk_file(p)
    m = mount(p)
    with pytest.raises(OSError) as e:
        open(m.path('z.raw'), 'rb').read()
    assert e.value.errno == errno.EIO
    lines = [ln for ln in m.log().splitlines() if 'error' in ln and '/z' in ln]
    assert lines, m.log()
    assert 'bad.h5' in lines[0] and 'chunk' in lines[0]
    # the daemon goes on serving
    np.testing.assert_array_equal(np.load(m.path('good.npy')), np.arange(1000))
    z = np.load(m.path('z.npy'), mmap_mode='r')
    np.testing.assert_array_equal(z[:10000], np.arange(10000))
    assert m.stats()['error_replies']['EIO'] >= 1


def test_concurrent_readers(mount):
    import threading
    d = tl.make_tmpdir('conc-')
    p = osp.join(d, 'c.h5')
    data = (np.arange(400 * 128 * 64, dtype='<u2') % 777).reshape(400, 128, 64)
    with h5py.File(p, 'w') as f:
        f.create_dataset('x', data=data, chunks=(4, 128, 64), compression='gzip', shuffle=True)
    m = mount(p)
    path = m.path('x.raw')
    expected = data.tobytes()
    errors = []

    def reader(seed):
        rng = np.random.default_rng(seed)
        try:
            fd = os.open(path, os.O_RDONLY)
            for _ in range(60):
                off = int(rng.integers(0, len(expected)))
                ln = int(rng.integers(1, 300000))
                if os.pread(fd, ln, off) != expected[off:off + ln]:
                    errors.append((off, ln))
            os.close(fd)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert open(path, 'rb').read() == expected


def _throwaway_user():
    """uid, gid of the user h5dtest (created without a home if absent)."""
    import pwd
    try:
        pw = pwd.getpwnam('h5dtest')
    except KeyError:
        subprocess.run(['useradd', '-M', '-U', 'h5dtest'], check=True, capture_output=True, timeout=30)
        pw = pwd.getpwnam('h5dtest')
    return pw.pw_uid, pw.pw_gid


@pytest.mark.skipif(os.geteuid() != 0, reason='needs root to create and switch users')
def test_permissions_owner_group_other_with_allow_other(srcdir, mount):
    """With allow_other: the source's owner, group and mode decide who reads (a group member
    reads a 0640 file, others get EACCES), a directory without x for others cannot be entered,
    and nobody can write (EROFS or EACCES, never a write)."""
    uid, gid = _throwaway_user()
    two = osp.join(srcdir, 'two.h5')
    one = osp.join(srcdir, 'sub', 'one.h5')
    os.chown(two, 0, gid)
    os.chmod(two, 0o640)
    os.chmod(one, 0o644)
    os.chmod(osp.join(srcdir, 'sub'), 0o750)  # group root: h5dtest may not enter
    os.chmod(srcdir, 0o755)
    m = mount(srcdir, 'allow_other')
    st = os.stat(m.path('two.h5', 'x.raw'))
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, gid, 0o440)

    def as_user(u, g, *cmd, groups='--init-groups'):
        ids = [f'--reuid={u}', f'--regid={g}', groups] if groups == '--clear-groups' else \
              [f'--reuid={u}', f'--regid={g}', f'--groups={g}']
        return subprocess.run(['setpriv'] + ids + list(cmd), capture_output=True, timeout=20)
    x = np.arange(12, dtype='<u2').tobytes()
    r = as_user(uid, gid, 'cat', m.path('two.h5', 'x.raw'))           # group member: reads
    assert r.returncode == 0 and r.stdout == x, r.stderr
    r = as_user(65534, 65534, 'cat', m.path('two.h5', 'x.raw'), groups='--clear-groups')
    assert r.returncode != 0 and b'Permission denied' in r.stderr      # other: EACCES
    r = as_user(uid, gid, 'ls', m.path('sub'))                          # dir 0550 root:root
    assert r.returncode != 0 and b'Permission denied' in r.stderr
    r = as_user(uid, gid, 'sh', '-c', f'echo x > {m.path("two.h5", "x.raw")}')
    assert r.returncode != 0
    assert b'Read-only file system' in r.stderr or b'Permission denied' in r.stderr
    r = as_user(uid, gid, 'touch', m.path('two.h5', 'new'))
    assert r.returncode != 0
    # root (the mounting user) reads everything, writes nothing
    assert open(m.path('sub', 'one.h5', 'x.raw'), 'rb').read() == x
    with pytest.raises(OSError) as e:
        open(m.path('two.h5', 'x.raw'), 'r+b')
    assert e.value.errno == errno.EROFS


def _wait_unmounted(mnt, seconds=15):
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if not osp.ismount(mnt):
            return True
        time.sleep(0.05)
    return False


def test_auto_unmount_after_kill_9(srcdir):
    """-o auto_unmount: when the daemon is killed (SIGKILL, no cleanup), the mount point is
    released by fusermount3's watcher."""
    mnt = tl.make_tmpdir('mnt-auto-')
    m = tl.Mount(srcdir, 'auto_unmount', mnt=mnt)
    try:
        assert 'two.h5' in os.listdir(mnt)
        m.proc.kill()
        m.proc.wait(10)
        if not _wait_unmounted(mnt, 30):
            helpers = subprocess.run(['ps', '-eo', 'pid,ppid,stat,cmd'], capture_output=True,
                                     text=True).stdout
            mounts = [ln for ln in open('/proc/mounts') if mnt in ln]
            raise AssertionError('auto_unmount did not release the mount point: '
                                 f'{mounts} {[h for h in helpers.splitlines() if "fusermount" in h]}')
        assert os.listdir(mnt) == []
    finally:
        m.close()


def test_crashed_daemon_recovery(srcdir):
    """Without auto_unmount, a killed daemon leaves a dead mount (ENOTCONN); the recovery that
    docs/usage.md gives (fusermount3 -u -z MNT) releases it and a new mount works."""
    mnt = tl.make_tmpdir('mnt-crash-')
    m = tl.Mount(srcdir, mnt=mnt)
    try:
        fd = os.open(osp.join(mnt, 'two.h5', 'x.raw'), os.O_RDONLY)
        m.proc.kill()
        m.proc.wait(10)
        with pytest.raises(OSError) as e:
            os.listdir(mnt)
        assert e.value.errno == errno.ENOTCONN
        with pytest.raises(OSError):
            os.pread(fd, 24, 0)
        try:
            os.close(fd)  # the descriptor is released; flush reports ENOTCONN
        except OSError as e:
            assert e.errno == errno.ENOTCONN
        r = subprocess.run(['fusermount3', '-u', '-z', mnt], capture_output=True, timeout=20)
        assert r.returncode == 0, r.stderr
        assert _wait_unmounted(mnt)
        m2 = tl.Mount(srcdir, mnt=mnt)
        try:
            assert open(osp.join(mnt, 'two.h5', 'x.raw'), 'rb').read() == \
                np.arange(12, dtype='<u2').tobytes()
        finally:
            m2.close()
    finally:
        m.close()
