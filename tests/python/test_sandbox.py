"""A file crafted against libhdf5 gets nothing: every helper runs sandboxed (helper/sandbox.h,
core/h5lib/broker.h, docs/architecture.md "The sandbox").

Code is run inside helpers as an exploit would run it: inside a real mount's helper through the
test hook (H5DIRECT_HELPER_FAULT_FILE "probe-ACTION:NAME", helper/test_hook.h), and in a process
that enters the same sandbox through the same function (tests/programs/sandbox_probe.cpp). Each
attempt fails or kills the helper, and the mount reads on. What the helpers hold is read from
/proc, as anyone can check it on a running mount.
"""
import errno
import os
import os.path as osp
import re
import signal
import subprocess
import threading
import time

import h5py
import numpy as np
import pytest

import h5d_testlib as tl
from h5d_testlib import Mount, make_tmpdir
from test_isolation import check_good, write_good

PROBE = os.environ.get('H5DIRECT_SANDBOX_PROBE')
ROOT = os.geteuid() == 0
# Under ASan the helpers' instrumentation needs what the sandbox refuses at exit (LeakSanitizer
# stops the threads with ptrace): tools/test-sanitizers.sh runs the sandbox in those builds too,
# but the kill tests below, which count helper deaths, run in the plain build.
SANITIZED = os.environ.get('H5D_SANITIZED') == '1'


def kernel_has_landlock():
    """landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) > 0, as the daemon asks."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    nr = {'x86_64': 444, 'aarch64': 444}.get(os.uname().machine)
    return nr is not None and libc.syscall(nr, None, ctypes.c_size_t(0), ctypes.c_uint32(1)) > 0


def status_of(pid):
    out = {}
    with open(f'/proc/{pid}/status') as f:
        for line in f:
            k, _, v = line.partition(':')
            out[k] = v.strip()
    return out


def children(pid, name):
    """Pids of the processes whose parent is `pid` and whose command is `name`."""
    out = []
    for d in os.listdir('/proc'):
        if not d.isdigit():
            continue
        try:
            with open(f'/proc/{d}/stat') as f:
                st = f.read()
        except OSError:
            continue
        comm = st[st.index('(') + 1:st.rindex(')')]
        ppid = int(st[st.rindex(')') + 2:].split()[1])
        if ppid == pid and comm == name:
            out.append(int(d))
    return out


def assert_sandboxed(pid, as_root):
    # A helper enters its sandbox before it reads its first request; one seen just as it was
    # started (a restart after a probe killed the last) gets a moment to get there.
    deadline = time.monotonic() + 3
    s = status_of(pid)
    while s['Seccomp'] != '2' and time.monotonic() < deadline:
        time.sleep(0.02)
        s = status_of(pid)
    assert s['NoNewPrivs'] == '1', s
    assert s['Seccomp'] == '2', s  # a filter
    assert int(s['CapEff'], 16) == 0 and int(s['CapPrm'], 16) == 0 and int(s['CapAmb'], 16) == 0, s
    if as_root:
        assert s['Uid'].split() == ['65534'] * 4 and s['Gid'].split() == ['65534'] * 4, s
        assert int(s['CapBnd'], 16) == 0, s
        assert s['Groups'] == '', s


@pytest.fixture
def src():
    tmp = make_tmpdir('sbx-')
    os.makedirs(osp.join(tmp, 'src'))
    good = write_good(osp.join(tmp, 'src', 'good.h5'), 1)
    write_good(osp.join(tmp, 'src', 'victim.h5'), 2)
    return tmp, good


def test_helpers_hold_every_layer_and_the_mount_says_so(src):
    tmp, good = src
    m = Mount(osp.join(tmp, 'src'))
    try:
        check_good(m.path('good.h5'), good)
        helpers = children(m.proc.pid, 'h5direct-helper')
        assert helpers, 'no helper process found'
        for pid in helpers:
            assert_sandboxed(pid, ROOT)
        log = m.log()
        line = re.search(r'sandbox: (.*)', log).group(1)
        for layer in ['no_new_privs', 'not dumpable', 'capabilities dropped', 'seccomp', 'limits']:
            assert layer in line, line
        if kernel_has_landlock():
            assert re.search(r'landlock ABI \d+', line), line
        assert 'missing' not in line or not kernel_has_landlock(), line
        st = m.stats()['hdf5_helper']
        assert st['sandbox']['seccomp'] == 1 and st['sandbox']['no_new_privs'] == 1, st
        assert st['sandbox']['landlock'] == int(kernel_has_landlock()), st
        assert st['sandbox_report'].startswith('no_new_privs'), st
        assert st['broker_opens'] >= 1, st
        with open(m.path('.h5direct', 'metrics')) as f:
            metrics = f.read()
        assert 'h5direct_hdf5_helper_sandbox_layer{layer="seccomp"} 1' in metrics
        if ROOT:
            # The daemon gave up what serving does not use: reading sources, ending helpers,
            # unmounting.
            d = status_of(m.proc.pid)
            kept = 1 << 2 | 1 << 5 | 1 << 21  # cap_dac_read_search, cap_kill, cap_sys_admin
            assert int(d['CapEff'], 16) == kept and int(d['CapPrm'], 16) == kept, d
            assert 'daemon privileges: capabilities cap_dac_read_search,cap_kill,cap_sys_admin=ep' in log
    finally:
        m.close()


# What code injected into a helper tries, and how the sandbox answers: refused (the call fails,
# the request gets its error) or killed (the filter ends the helper, naming the call).
REFUSED = {
    'open=/etc/shadow': 'the broker: outside the source, not HDF5',
    'rawopen=/etc/shadow': 'the filter and Landlock',
    'open=SECRET': 'the broker: a file outside the source, not HDF5',
    'open=PRIVATE': "the broker: an HDF5 file outside the source that the served file's owner may not read",
    'rawopen=GOOD': 'even a file of the source: never by path',
    'socket': 'no sockets',
}
KILLED = {
    'write=GOOD': 'openat',
    'create=NEW': 'openat',
    'exec': 'execve',
    'fork': 'clone',
    'ptrace': 'ptrace',
    'signal': 'kill',
    'mmapexec': 'mmap',
}


@pytest.mark.skipif(SANITIZED, reason='helpers under ASan: see SANITIZED above')
@pytest.mark.parametrize('action', sorted(REFUSED) + sorted(KILLED))
def test_code_injected_into_a_helper_gets_nothing_and_the_mount_reads_on(src, action):
    tmp, good = src
    secret = osp.join(tmp, 'secret.txt')  # outside the source: a user's notes
    with open(secret, 'w') as f:
        f.write('not for the helpers')
    private = osp.join(tmp, 'private.h5')  # outside the source: an HDF5 file only its owner reads
    write_good(private, 3)
    os.chmod(private, 0o600)
    probe = (action.replace('SECRET', secret).replace('PRIVATE', private)
             .replace('GOOD', osp.join(tmp, 'src', 'good.h5')).replace('NEW', osp.join(tmp, 'src', 'planted.h5')))
    before = tl.pread_all(osp.join(tmp, 'src', 'good.h5'))
    control = osp.join(tmp, 'fault')
    with open(control, 'w') as f:
        f.write(f'probe-{probe}:victim.h5')
    m = Mount(osp.join(tmp, 'src'), opts='hdf5_timeout=5',
              env=dict(os.environ, H5DIRECT_HELPER_FAULT_FILE=control))
    try:
        with pytest.raises(OSError) as e:
            os.listdir(m.path('victim.h5'))
        assert e.value.errno == errno.EIO
        log = m.log()
        assert f'probe {probe}: done' not in log, log
        if action in REFUSED:
            assert f'probe {probe}: refused' in log, log
        else:
            assert f'made a system call its sandbox refuses ({KILLED[action]})' in log, log
            assert 'victim.h5' in log
        if probe.startswith('open='):
            assert 'asked to open ' + probe[5:] + ': refused' in log, log
        # Nothing planted, nothing changed, the daemon alive, every other file read whole.
        assert not osp.exists(osp.join(tmp, 'src', 'planted.h5'))
        assert tl.pread_all(osp.join(tmp, 'src', 'good.h5')) == before
        assert m.proc.poll() is None and osp.ismount(m.mnt)
        check_good(m.path('good.h5'), good)
        for pid in children(m.proc.pid, 'h5direct-helper'):
            assert_sandboxed(pid, ROOT)
    finally:
        with open(control, 'w') as f:
            f.write('')
        m.close()


@pytest.mark.skipif(not PROBE, reason='H5DIRECT_SANDBOX_PROBE not set (run through ctest)')
@pytest.mark.parametrize('as_user', [False, True] if ROOT else [False])
def test_the_sandbox_entered_through_the_helpers_function(as_user):
    """Each attempt in a fresh process that entered the read helper's sandbox (as root: it also
    leaves uid 0; as an ordinary user: the same layers but the uid)."""
    tmp = make_tmpdir('sbxprobe-')
    target = osp.join(tmp, 'mine.h5')
    write_good(target)
    os.chmod(target, 0o666)
    pre = ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups'] if as_user else []

    def run(*args):
        return subprocess.run(pre + [PROBE] + list(args), capture_output=True, text=True, timeout=30)

    expect = {  # action -> 'refused' | signal killed by
        ('open', target): 'refused', ('open', '/etc/shadow'): 'refused', ('write', target): signal.SIGSYS,
        ('create', osp.join(tmp, 'new')): signal.SIGSYS, ('socket',): 'refused', ('exec',): signal.SIGSYS,
        ('fork',): signal.SIGSYS, ('ptrace', str(os.getpid())): signal.SIGSYS,
        ('signal', str(os.getpid())): signal.SIGSYS, ('mmapexec',): signal.SIGSYS,
    }
    for args, want in expect.items():
        r = run(*args)
        if want == 'refused':
            assert r.returncode == 0 and r.stdout.startswith('refused'), (args, r)
        else:
            assert r.returncode == -want, (args, r)
            assert 'refused system call' in r.stderr, (args, r)
    assert not osp.exists(osp.join(tmp, 'new'))
    # What a helper needs still works: threads, and a descriptor opened before (the broker's).
    r = run('thread')
    assert r.returncode == 1 and r.stdout.startswith('done'), r
    r = run('hdf5', target)
    assert r.returncode == 1 and 'HDF5 signature' in r.stdout, r
    r = run('status')
    assert r.returncode == 0, r
    lines = dict(line.split(':', 1) for line in r.stdout.splitlines() if ':' in line)
    assert lines['NoNewPrivs'].strip() == '1' and lines['Seccomp'].strip() == '2', r.stdout
    assert int(lines['CapEff'], 16) == 0 and int(lines['CapPrm'], 16) == 0, r.stdout
    if ROOT:
        assert lines['Uid'].split() == ['65534'] * 4, r.stdout
    if kernel_has_landlock():
        assert re.search(r'landlock ABI \d+', r.stderr), r.stderr


def test_vds_and_external_links_outside_the_mounted_tree_read_as_h5py():
    """The broker gives what the daemon itself reads: VDS sources and external link targets in a
    directory beside the mounted one."""
    tmp = make_tmpdir('sbxvds-')
    src, other = osp.join(tmp, 'src'), osp.join(tmp, 'other')
    os.makedirs(src)
    os.makedirs(other)
    rng = np.random.default_rng(7)
    parts = []
    for i in range(3):
        p = osp.join(other, f'part{i}.h5')
        a = rng.integers(0, 60000, (20, 16)).astype('<u2')
        with h5py.File(p, 'w') as f:
            f.create_dataset('data', data=a, chunks=(5, 16), compression='gzip')
        parts.append(a)
    layout = h5py.VirtualLayout(shape=(60, 16), dtype='<u2')
    for i in range(3):
        layout[i * 20:(i + 1) * 20] = h5py.VirtualSource(osp.join(other, f'part{i}.h5'), 'data', shape=(20, 16))
    with h5py.File(osp.join(src, 'vds.h5'), 'w') as f:
        f.create_virtual_dataset('stack', layout)
        f['linked'] = h5py.ExternalLink(osp.join(other, 'part1.h5'), '/data')
        f['group_link'] = h5py.ExternalLink(osp.join(other, 'part2.h5'), '/')
    m = Mount(src)
    try:
        with h5py.File(osp.join(src, 'vds.h5'), 'r') as f:
            want_stack = f['stack'][()]
            want_linked = f['linked'][()]
            want_group = f['group_link/data'][()]
        assert np.array_equal(want_stack, np.concatenate(parts))
        assert np.array_equal(np.load(m.path('vds.h5', 'stack.npy')), want_stack)
        assert np.array_equal(np.load(m.path('vds.h5', 'linked.npy')), want_linked)
        assert np.array_equal(np.load(m.path('vds.h5', 'group_link', 'data.npy')), want_group)
        assert 'refused' not in m.log(), m.log()
    finally:
        m.close()


def test_strict_mounts_on_this_kernel_and_off_is_a_warning(src):
    tmp, good = src
    if kernel_has_landlock():
        m = Mount(osp.join(tmp, 'src'), opts='sandbox=strict')
        try:
            check_good(m.path('good.h5'), good)
            for pid in children(m.proc.pid, 'h5direct-helper'):
                assert_sandboxed(pid, ROOT)
        finally:
            m.close()
    m = Mount(osp.join(tmp, 'src'), opts='sandbox=off')
    try:
        check_good(m.path('good.h5'), good)
        assert 'warning: sandbox: off' in m.log()
        for pid in children(m.proc.pid, 'h5direct-helper'):
            assert status_of(pid)['Seccomp'] == '0'
        assert m.stats()['hdf5_helper']['sandbox_report'] == 'off'
    finally:
        m.close()


def test_sigterm_ends_the_daemon_within_2_s_while_a_request_is_stuck_in_a_helper(src):
    tmp, good = src
    control = osp.join(tmp, 'fault')
    with open(control, 'w') as f:
        f.write('hang:victim.h5')
    m = Mount(osp.join(tmp, 'src'), opts='hdf5_timeout=60',
              env=dict(os.environ, H5DIRECT_HELPER_FAULT_FILE=control))
    result = {}

    def list_victim():
        try:
            os.listdir(m.path('victim.h5'))
            result['err'] = None
        except OSError as e:
            result['err'] = e.errno

    try:
        check_good(m.path('good.h5'), good)
        th = threading.Thread(target=list_victim)
        th.start()
        time.sleep(1)
        assert th.is_alive(), 'the request did not hang in the helper'
        t0 = time.monotonic()
        m.proc.send_signal(signal.SIGTERM)
        m.proc.wait(timeout=10)
        took = time.monotonic() - t0
        assert took < 2, f'the daemon took {took:.1f} s to end'
        th.join(10)
        assert not th.is_alive() and result['err'] is not None, result
    finally:
        m.close()


@pytest.mark.skipif(not ROOT, reason='a writable mount of files created as root')
def test_writer_processes_are_sandboxed_and_write(src):
    tmp, _ = src
    out = make_tmpdir('sbxw-')
    m = Mount(out, opts='writable')
    try:
        os.mkdir(m.path('new.h5'))
        a = np.lib.format.open_memmap(m.path('new.h5', 'x.npy'), mode='w+', dtype='<u2', shape=(64, 32))
        a[:] = np.arange(64 * 32, dtype='<u2').reshape(64, 32)
        a.flush()
        del a
        writers = [p for p in children(m.proc.pid, 'h5direct-helper')
                   if '--writer' in open(f'/proc/{p}/cmdline').read().split('\0')]
        assert writers, 'no writer process found'
        for pid in writers:
            assert_sandboxed(pid, ROOT)
    finally:
        m.close()
    with h5py.File(osp.join(out, 'new.h5'), 'r') as f:
        assert np.array_equal(f['x'][()], np.arange(64 * 32, dtype='<u2').reshape(64, 32))
