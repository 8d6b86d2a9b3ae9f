"""Issue 15: mount semantics that can never hurt the source, hang a reader, or hide why.

mount(8) and fstab mounts are read-only (writes need -o writable); mount points that would make
the daemon read its own mount are refused (or, reached through a symlink, left out); a dead
mount point is refused with the recovery; SIGTERM with files open detaches the mount and serves
them until they are closed; every source entry left out is logged; -o log=FILE; stats.json
counts every error reply; the FUSE options users know are accepted; --help matches usage.md.
"""
import errno
import json
import os
import os.path as osp
import re
import shutil
import signal
import stat
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest

import h5d_testlib as tl

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def run(args, timeout=30, **kw):
    return subprocess.run([tl.BIN] + args, capture_output=True, text=True, timeout=timeout, **kw)


def wait_for(pred, timeout=20):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def mounted(path):
    """Whether a mount sits at `path`, from /proc/self/mountinfo (a stat of a mount whose daemon
    is stuck would hang)."""
    return any(ln.split()[4] == path for ln in open('/proc/self/mountinfo'))


def abort_connection(mnt):
    """Ends a mount that may hang (fuse control filesystem), then detaches it."""
    devs = [ln.split()[2] for ln in open('/proc/self/mountinfo') if ln.split()[4] == mnt]
    if devs and not os.path.isdir('/sys/fs/fuse/connections/' + devs[-1].split(':')[1]):
        subprocess.run(['mount', '-t', 'fusectl', 'none', '/sys/fs/fuse/connections'],
                       capture_output=True)
    for dev in devs:
        try:
            with open(f'/sys/fs/fuse/connections/{dev.split(":")[1]}/abort', 'w') as f:
                f.write('1')
        except OSError:
            pass
    tl.unmount(mnt)


@pytest.fixture
def srcdir():
    d = tl.make_tmpdir('src-safety-')
    with h5py.File(osp.join(d, 'a.h5'), 'w') as f:
        f['x'] = np.arange(100000, dtype='<u4')
        f['g/y'] = np.arange(12, dtype='<f8').reshape(3, 4)
    with open(osp.join(d, 'notes.txt'), 'w') as f:
        f.write('not hdf5\n')
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def mntdir():
    d = tl.make_tmpdir('mnt-safety-')
    yield d
    if mounted(d):
        abort_connection(d)
    try:
        os.rmdir(d)
    except OSError:
        pass


@pytest.fixture
def h5direct_on_path():
    """mount.fuse3 runs `h5direct SOURCE MNT -o rw,...` with a fixed PATH (/usr/local/sbin first):
    the built program is linked there for the test unless an h5direct is installed already."""
    installed = shutil.which('h5direct', path='/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin')
    link = '/usr/local/sbin/h5direct'
    made = False
    if not installed:
        os.makedirs('/usr/local/sbin', exist_ok=True)
        os.symlink(tl.BIN, link)
        made = True
    yield
    if made:
        os.unlink(link)


def assert_read_only_mount(srcdir, mnt):
    assert wait_for(lambda: osp.ismount(mnt))
    assert 'a.h5' in os.listdir(mnt)
    np.testing.assert_array_equal(np.load(osp.join(mnt, 'a.h5', 'x.npy')), np.arange(100000))
    before = sorted(os.listdir(srcdir))
    with pytest.raises(OSError) as e:
        os.mkdir(osp.join(mnt, 'oops.h5'))
    assert e.value.errno == errno.EROFS
    assert sorted(os.listdir(srcdir)) == before
    opts = [ln.split()[3] for ln in open('/proc/mounts') if ln.split()[1] == mnt]
    assert opts and 'ro' in opts[-1].split(','), opts


# ---- writes need -o writable, never rw ------------------------------------------------------------

@pytest.mark.skipif(not shutil.which('mount.fuse3'), reason='mount.fuse3 (fuse3) is not installed')
def test_mount_t_fuse_h5direct_is_read_only(srcdir, mntdir, h5direct_on_path):
    """mount(8) passes -o rw on every mount: that must not make it writable."""
    r = subprocess.run(['mount', '-t', 'fuse.h5direct', srcdir, mntdir], capture_output=True,
                       text=True, timeout=30)
    try:
        assert r.returncode == 0, r.stderr
        assert_read_only_mount(srcdir, mntdir)
    finally:
        tl.unmount(mntdir)


@pytest.mark.skipif(not shutil.which('mount.fuse3'), reason='mount.fuse3 (fuse3) is not installed')
def test_fstab_defaults_line_is_read_only(srcdir, mntdir, h5direct_on_path):
    with open('/etc/fstab') as f:
        saved = f.read()
    try:
        with open('/etc/fstab', 'a') as f:
            f.write(f'\n{srcdir} {mntdir} fuse.h5direct defaults,nofail,cache_size=64M 0 0\n')
        r = subprocess.run(['mount', mntdir], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert_read_only_mount(srcdir, mntdir)
    finally:
        tl.unmount(mntdir)
        with open('/etc/fstab', 'w') as f:
            f.write(saved)
    with open('/etc/fstab') as f:
        assert f.read() == saved


def test_rw_means_nothing_and_writable_writes(srcdir, mount):
    # a file as SOURCE with rw (as mount(8) passes it) used to fail with "-o rw needs a directory"
    m = mount(osp.join(srcdir, 'a.h5'), 'rw')
    np.testing.assert_array_equal(np.load(m.path('x.npy')), np.arange(100000))
    m2 = mount(srcdir, 'rw')
    assert_read_only_mount(srcdir, m2.mnt)
    m3 = mount(srcdir, 'writable')
    os.mkdir(m3.path('new.h5'))
    assert h5py.is_hdf5(osp.join(srcdir, 'new.h5'))
    r = run([srcdir, tl.make_tmpdir('mnt-rw-'), '-o', 'ro,writable'])
    assert r.returncode != 0 and 'contradict' in r.stderr, r.stderr
    r = run([srcdir, tl.make_tmpdir('mnt-rw-'), '-o', 'write_compression=gzip'])
    assert r.returncode != 0 and 'writable' in r.stderr, r.stderr
    r = run([srcdir, tl.make_tmpdir('mnt-rw-'), '-o', 'writable,write_compression=gzip,write_level=22'])
    assert r.returncode != 0 and 'out of range' in r.stderr, r.stderr


# ---- mount points that would make the daemon read its own mount -----------------------------------

def test_mount_points_in_or_over_the_source_are_refused(srcdir):
    deep = osp.join(srcdir, 'a', 'b', 'c')
    os.makedirs(deep)
    os.makedirs(osp.join(srcdir, 'mnt'))
    outside = tl.make_tmpdir('mnt-over-')
    os.makedirs(osp.join(outside, 'src'))
    cases = [
        ([srcdir, srcdir], 'is the source'),
        ([srcdir, osp.join(srcdir, 'mnt')], 'inside the source'),
        ([srcdir, deep], 'inside the source'),
        ([osp.join(srcdir, 'a'), osp.join(srcdir, 'a', 'b')], 'inside the source'),
        ([osp.join(outside, 'src'), outside], 'under the mount point'),
        ([srcdir, osp.join(srcdir, 'a', '..', 'mnt')], 'inside the source'),
    ]
    try:
        for args, msg in cases:
            r = run(args, timeout=20)
            assert r.returncode != 0, (args, r.stderr)
            assert msg in r.stderr, (args, r.stderr)
            assert not mounted(osp.normpath(args[1]))
    finally:
        for args, _ in cases:
            if mounted(osp.normpath(args[1])):
                abort_connection(osp.normpath(args[1]))
    shutil.rmtree(outside)


def test_mounted_or_nonempty_mount_point_refused_unless_nonempty(srcdir, mount):
    m = mount(srcdir)
    full = tl.make_tmpdir('mnt-full-')
    open(osp.join(full, 'keep.txt'), 'w').close()
    try:
        r = run([srcdir, m.mnt], timeout=20)
        assert r.returncode != 0 and 'already a mount point' in r.stderr, r.stderr
        # the way out is to unmount (and how, busy or not), not -o nonempty, which would stack
        # a second daemon over the first
        assert f'fusermount3 -u {m.mnt}' in r.stderr and f'fusermount3 -u -z {m.mnt}' in r.stderr, r.stderr
        assert 'nonempty' not in r.stderr, r.stderr
        assert len([ln for ln in open('/proc/mounts') if ln.split()[1] == m.mnt]) == 1
        r = run([srcdir, full], timeout=20)
        assert r.returncode != 0 and 'not empty' in r.stderr, r.stderr
    finally:
        for d in (m.mnt, m.mnt, full):
            if osp.ismount(d) and d == full:
                tl.unmount(d)
        if len([ln for ln in open('/proc/mounts') if ln.split()[1] == m.mnt]) > 1:
            tl.unmount(m.mnt)
    m2 = mount(srcdir, 'nonempty', mnt=full)
    assert 'a.h5' in os.listdir(m2.mnt)


def test_symlink_to_the_mount_point_is_left_out_and_ls_ends(srcdir, mntdir):
    """A symlink in the source that leads to the mount point (or under it) is never looked up:
    listing the mount ends, and the link is left out with a log line."""
    os.symlink(mntdir, osp.join(srcdir, 'loop'))
    os.symlink(osp.join(mntdir, 'a.h5'), osp.join(srcdir, 'loop2'))
    m = tl.Mount(srcdir, mnt=mntdir)
    try:
        for cmd in (['ls', '-la', mntdir], ['find', mntdir, '-maxdepth', '3']):
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                abort_connection(mntdir)  # a reader stuck in D state cannot be killed otherwise
                p.kill()
                p.wait(20)
                pytest.fail(f'{cmd} did not end within 20 s')
            assert p.returncode == 0, p.stderr.read()
        names = os.listdir(mntdir)
        assert 'loop' not in names and 'loop2' not in names and 'a.h5' in names, names
        log = m.log()
        assert re.search(r'left out \S*/loop: .*mount point', log), log
        assert re.search(r'left out \S*/loop2: .*mount point', log), log
    finally:
        abort_connection(mntdir)
        m.close()


def test_dead_mount_point_refused_with_recovery(srcdir, mntdir):
    m = tl.Mount(srcdir, mnt=mntdir)
    try:
        m.proc.kill()
        m.proc.wait(10)
        r = run([srcdir, mntdir], timeout=20)
        assert r.returncode != 0
        assert 'dead mount' in r.stderr and f'fusermount3 -u -z {mntdir}' in r.stderr, r.stderr
    finally:
        m.close()
    assert not osp.ismount(mntdir)


# ---- signals with files open ----------------------------------------------------------------------

READER = r'''
import mmap, os, sys, time
import numpy as np
path = sys.argv[1]
a = np.load(path, mmap_mode='r')
print('mapped', flush=True)
sys.stdin.readline()           # the daemon is signalled meanwhile
ok = bool((a == np.arange(a.size, dtype=a.dtype)).all())
print('ok' if ok else 'bad', flush=True)
sys.stdin.readline()
del a
print('closed', flush=True)
'''


@pytest.mark.parametrize('sig', [signal.SIGTERM, signal.SIGINT])
def test_signal_with_a_mapped_file_detaches_and_serves_it(srcdir, mntdir, sig):
    m = tl.Mount(srcdir, mnt=mntdir)
    reader = subprocess.Popen([sys.executable, '-c', READER, osp.join(mntdir, 'a.h5', 'x.npy')],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == 'mapped'
        m.proc.send_signal(sig)
        assert wait_for(lambda: not osp.ismount(mntdir)), 'the mount was not detached'
        # it says how many: the mapping's file, and np.load's first open until its release arrives
        assert wait_for(lambda: re.search(r'with [12] files? open', m.log())), m.log()
        assert m.proc.poll() is None, 'the daemon exited with a file mapped'
        assert 'lazy unmount' in m.log()
        reader.stdin.write('\n')
        reader.stdin.flush()
        assert reader.stdout.readline().strip() == 'ok'   # every page read after the signal
        reader.stdin.write('\n')
        reader.stdin.flush()
        assert reader.stdout.readline().strip() == 'closed'
        assert reader.wait(10) == 0
        assert m.proc.wait(20) == 0, m.log()            # gone once the last file is closed
    finally:
        if reader.poll() is None:
            reader.kill()
        m.close()


def test_second_signal_stops_at_once(srcdir, mntdir):
    """After the lazy unmount, a second signal ends the daemon: open files then get ENOTCONN."""
    m = tl.Mount(srcdir, mnt=mntdir)
    fd = os.open(osp.join(mntdir, 'a.h5', 'x.raw'), os.O_RDONLY)
    try:
        m.proc.send_signal(signal.SIGTERM)
        assert wait_for(lambda: not mounted(mntdir)), 'the mount was not detached'
        assert os.pread(fd, 8, 4 * 1000) == np.arange(1000, 1002, dtype='<u4').tobytes()
        assert m.proc.poll() is None
        m.proc.send_signal(signal.SIGTERM)
        assert m.proc.wait(20) == 0
        with pytest.raises(OSError) as e:
            os.pread(fd, 8, 4 * 50000)
        assert e.value.errno == errno.ENOTCONN
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
        m.close()


# ---- logging --------------------------------------------------------------------------------------

def test_log_file_when_daemonized(srcdir, mntdir):
    logf = osp.join(tl.make_tmpdir('log-'), 'h5direct.log')
    r = run([srcdir, mntdir, '-o', f'log={logf}'])
    try:
        assert r.returncode == 0, r.stderr
        assert wait_for(lambda: osp.ismount(mntdir))
        os.listdir(mntdir)
        with pytest.raises(OSError):
            open(osp.join(mntdir, 'a.h5', 'nope.npy'))
        assert wait_for(lambda: 'notes.txt: not an HDF5 file' in open(logf).read()), open(logf).read()
        text = open(logf).read()
        assert 'serving ' + srcdir in text
    finally:
        tl.unmount(mntdir)
    assert wait_for(lambda: 'unmounted' in open(logf).read())
    r = run([srcdir, mntdir, '-o', 'log=/nonexistent/dir/x.log'])
    assert r.returncode != 0 and 'log file' in r.stderr, r.stderr
    assert not osp.ismount(mntdir)


def test_no_syslog_warns_before_daemonizing(srcdir, mntdir):
    """The warning names where the recent lines are: this mount's .h5direct/log, not a
    placeholder."""
    if osp.exists('/dev/log'):
        pytest.skip('this machine has a syslog socket')
    r = run([srcdir, mntdir])
    try:
        assert r.returncode == 0, r.stderr
        assert 'no syslog' in r.stderr and 'log=FILE' in r.stderr, r.stderr
        log = osp.join(osp.realpath(mntdir), '.h5direct', 'log')
        assert log in r.stderr and 'MNT/' not in r.stderr, r.stderr
        # the file it names is there and holds the daemon's lines
        assert 'serving ' + osp.realpath(srcdir) in open(log).read()
    finally:
        tl.unmount(mntdir)


def test_left_out_entries_are_logged_once(srcdir, mount):
    os.symlink('/nonexistent/target.h5', osp.join(srcdir, 'dangling.h5'))
    os.mkfifo(osp.join(srcdir, 'pipe'))
    m = mount(srcdir)
    assert sorted(os.listdir(m.mnt)) == ['.h5direct', 'a.h5']
    os.listdir(m.mnt)
    log = m.log()
    for name, why in [('notes.txt', 'not an HDF5 file'), ('dangling.h5', 'dangling symlink'),
                      ('pipe', 'neither a regular file nor a directory')]:
        lines = [ln for ln in log.splitlines() if f'left out {osp.join(srcdir, name)}:' in ln]
        assert len(lines) == 1 and why in lines[0], (name, log)


def drop_dac(cmd):
    """The command as root without the capabilities that bypass file permissions."""
    caps = '-dac_override,-dac_read_search'
    return ['setpriv', '--inh-caps', caps, '--bounding-set', caps] + cmd


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which('setpriv'), reason='needs root and setpriv')
def test_unreadable_entries_logged_and_unreadable_source_refused(srcdir, mntdir):
    secret = osp.join(srcdir, 'secret.h5')
    shutil.copy(osp.join(srcdir, 'a.h5'), secret)
    os.chown(secret, 12345, 12345)
    os.chmod(secret, 0o600)
    p = subprocess.Popen(drop_dac([tl.BIN, srcdir, mntdir, '-f']), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for(lambda: osp.ismount(mntdir))
        assert sorted(os.listdir(mntdir)) == ['.h5direct', 'a.h5']
    finally:
        tl.unmount(mntdir)
        out = p.communicate(timeout=20)[0]
    assert re.search(r'left out \S*secret\.h5: the daemon cannot open it \(Permission denied\)', out), out
    locked = tl.make_tmpdir('src-locked-')
    os.chown(locked, 12345, 12345)
    os.chmod(locked, 0o700)
    r = subprocess.run(drop_dac([tl.BIN, locked, mntdir, '-f']), capture_output=True, text=True,
                       timeout=20)
    assert r.returncode != 0 and 'cannot be listed' in r.stderr, r.stderr
    assert not osp.ismount(mntdir)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which('setpriv'), reason='needs root and setpriv')
def test_root_only_option_refused_for_a_user(srcdir, mntdir):
    """readahead_kb=N writes sysfs, which only root may: a user's mount refuses it up front (it
    used to mount and only warn in the log)."""
    for d in (srcdir, mntdir):
        os.chmod(d, 0o755)
    os.chmod(osp.join(srcdir, 'a.h5'), 0o644)
    user = ['setpriv', '--reuid', '65534', '--regid', '65534', '--clear-groups']
    r = subprocess.run(user + [tl.BIN, srcdir, mntdir, '-o', 'readahead_kb=1024'],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode != 0 and 'readahead_kb=1024 needs root' in r.stderr, r.stderr
    assert not mounted(mntdir)


def test_errors_counts_every_error_reply_by_class(srcdir, mount):
    """stats.json errors (always 0 before) counts every error reply, in total and by class."""
    tl.write_corrupt_chunk_file(osp.join(srcdir, 'bad.h5'))
    m = mount(srcdir)
    assert m.stats()['errors']['total'] == 0
    for _ in range(2):
        fd = os.open(m.path('bad.h5', 'z.raw'), os.O_RDONLY)
        with pytest.raises(OSError) as e:
            os.pread(fd, 4096, 3 * 40000)
        assert e.value.errno == errno.EIO
        os.close(fd)
    s = m.stats()
    assert s['errors']['io'] == s['error_replies']['EIO'] >= 1
    assert s['errors']['total'] == sum(s['error_replies'].values()) >= 1


# ---- FUSE options ---------------------------------------------------------------------------------

def test_common_fuse_options(srcdir, mount):
    m = mount(srcdir, 'uid=1234,gid=4321,umask=027,attr_timeout=0.5,entry_timeout=0,kernel_cache,'
                      'max_threads=4,max_idle_threads=2')
    st = os.stat(m.path('a.h5', 'x.npy'))
    assert (st.st_uid, st.st_gid) == (1234, 4321)
    assert stat.S_IMODE(st.st_mode) == 0o640 & 0o555   # 0666 & ~027, no write bits
    assert stat.S_IMODE(os.stat(m.path('a.h5')).st_mode) == 0o750 & 0o555
    np.testing.assert_array_equal(np.load(m.path('a.h5', 'x.npy')), np.arange(100000))
    m2 = mount(osp.join(srcdir, 'a.h5'), extra_args=['-s'])
    np.testing.assert_array_equal(np.load(m2.path('g', 'y.npy')), np.arange(12.).reshape(3, 4))
    r = run([srcdir, tl.make_tmpdir('mnt-o-'), '-o', 'threds=2'])
    assert r.returncode != 0 and "did you mean 'threads'" in r.stderr, r.stderr
    r = run([srcdir, tl.make_tmpdir('mnt-o-'), '-o', 'prefetch_max=0'])
    assert r.returncode != 0 and 'prefetch_max' in r.stderr, r.stderr


# ---- --help, docs and install ---------------------------------------------------------------------

def test_install_puts_h5direct_on_users_path(tmp_path):
    build = osp.dirname(osp.dirname(tl.BIN))
    prefix = str(tmp_path / 'usr')
    r = subprocess.run(['cmake', '--install', build, '--prefix', prefix], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for p in ('bin/h5direct', 'sbin/mount.h5direct'):
        v = subprocess.run([osp.join(prefix, p), '--version'], capture_output=True, text=True)
        assert v.returncode == 0 and 'h5direct' in v.stdout, (p, v.stderr)
    assert 'usage: h5direct ' in subprocess.run([osp.join(prefix, 'bin', 'h5direct'), '--help'],
                                                capture_output=True, text=True).stdout
    # the docs tell users to run the name that is on their PATH
    usage = open(osp.join(ROOT, 'docs', 'usage.md')).read()
    assert '\nh5direct SOURCE MOUNTPOINT' in usage
    readme = open(osp.join(ROOT, 'README.md')).read()
    assert not re.search(r'^\s*mount\.h5direct ', readme, re.M), 'README runs mount.h5direct'


def test_long_run_scan_logs_progress(mount):
    """Opening a run of hundreds of files logged nothing; at info level it says how far it got."""
    import euxfel_mock as xm
    run_dir = osp.join(tl.make_tmpdir('run-progress-'), 'r0338')
    w = xm.RunWriter(run_dir, keep_data=False)
    src = xm.xgm_instrument('SA1_XTD2_XGM/XGM/DOOCS')
    n_files = 230
    for seq in range(n_files):
        w.write_file('DA01', seq, [src], [10000 + 2 * seq, 10001 + 2 * seq])
    m = mount(run_dir)
    names = os.listdir(m.mnt)
    assert names, names
    log = m.log()
    assert f'opening {n_files} files' in log, log
    assert f'opened 100 of {n_files} files' in log, log
    assert f'opened 200 of {n_files} files' in log, log
    assert f'opened all {n_files} files' in log, log
    shutil.rmtree(osp.dirname(run_dir))
