"""Shared by the benchmark scripts: a FUSE daemon started in the foreground and always unmounted.

Mount(cmd, mnt) runs `cmd` (which mounts at `mnt` and stays in the foreground), waits until
`mnt` is a mount point, and close() unmounts it lazily and reaps the daemon, even when the
benchmark fails. mount_h5direct() builds the command line of mount.h5direct.
"""
import atexit
import os
import os.path as osp
import subprocess
import sys
import tempfile
import time


def h5direct_cmd(binary, src, mnt, opts=None):
    return [binary, src, mnt, '-f'] + (['-o', opts] if opts else [])


class Mount:
    def __init__(self, cmd, mnt, timeout=30, stderr=subprocess.DEVNULL, remove_mnt=False):
        self.mnt = mnt
        self.remove_mnt = remove_mnt
        self.t_start = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=stderr)
        while not osp.ismount(mnt):
            if self.proc.poll() is not None or time.monotonic() - self.t_start > timeout:
                why = 'timeout'
                if self.proc.poll() is not None:
                    why = f'exit status {self.proc.returncode}'
                    if self.proc.stderr:
                        why += ': ' + self.proc.stderr.read().decode(errors='replace')
                self.close()
                sys.exit(f'{cmd[0]} did not mount {mnt} ({why})')
            time.sleep(0.005)
        self.t_mounted = time.monotonic() - self.t_start

    def peak_rss_mb(self):
        with open(f'/proc/{self.proc.pid}/status') as f:
            for line in f:
                if line.startswith('VmHWM'):
                    return int(line.split()[1]) / 1024

    def cpu_seconds(self):
        """utime + stime of the daemon (all threads) and of its HDF5 helper processes (live
        ones, and reaped ones through the daemon's cutime + cstime), from /proc: robust to
        other load."""
        def fields(pid):
            with open(f'/proc/{pid}/stat') as f:
                return f.read().rsplit(')', 1)[1].split()
        d = fields(self.proc.pid)
        ticks = sum(int(x) for x in d[11:15])
        for entry in os.listdir('/proc'):
            if not entry.isdigit() or int(entry) == self.proc.pid:
                continue
            try:
                c = fields(entry)
            except OSError:
                continue
            if int(c[1]) == self.proc.pid:  # ppid
                ticks += int(c[11]) + int(c[12])
        return ticks / os.sysconf('SC_CLK_TCK')

    def close(self):
        subprocess.run(['fusermount3', '-u', '-z', self.mnt], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.remove_mnt:
            try:
                os.rmdir(self.mnt)
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_all(path, buf):
    """Reads the file into `buf` with read() calls of 1 MiB; returns the bytes read."""
    with open(path, 'rb', buffering=0) as f:
        mv = memoryview(buf)
        pos = 0
        while pos < len(mv):
            n = f.readinto(mv[pos:pos + (1 << 20)])
            if not n:
                break
            pos += n
    return pos


def mount_h5direct(binary, src, opts=None, mnt=None, workdir=None, stderr=subprocess.DEVNULL):
    """mount.h5direct SRC at `mnt`, or at a new directory under `workdir` (removed at close)."""
    fresh = mnt is None
    if fresh:
        mnt = tempfile.mkdtemp(prefix='mnt-', dir=workdir)
    return Mount(h5direct_cmd(binary, src, mnt, opts), mnt, stderr=stderr, remove_mnt=fresh)


# Free page reporting (virtio-balloon): a VM that hands the guest's freed memory back to its host
# at once makes every page the guest touches again fault in the host (~10 us per 4 KiB page
# measured here, docs/benchmarks.md): 210 MB of fresh memory then costs 0.2-0.5 s, and a pass
# through FUSE (the page cache of the file plus the reader's array) touches twice what h5py's
# pass does. A real node keeps its freed pages. hold_freed_pages() keeps them for `ms` (the
# guest's min_free_ms) until the program ends; reporting_state() says what the run measured.
PAGE_REPORTING = '/sys/module/page_reporting/parameters'
MIN_FREE_MS = osp.join(PAGE_REPORTING, 'min_free_ms')


def reporting_state():
    try:
        with open(MIN_FREE_MS) as f:
            ms = int(f.read())
    except (OSError, ValueError):
        return 'no free page reporting'
    return f'freed pages reported to the host after {ms} ms (min_free_ms)'


def hold_freed_pages(ms=60000):
    """Sets min_free_ms (root) until exit; returns False when there is nothing to set."""
    try:
        with open(MIN_FREE_MS) as f:
            old = f.read().strip()
        with open(MIN_FREE_MS, 'w') as f:
            f.write(str(ms))
    except OSError:
        return False

    def restore():
        with open(MIN_FREE_MS, 'w') as f:
            f.write(old)
    atexit.register(restore)
    return True
