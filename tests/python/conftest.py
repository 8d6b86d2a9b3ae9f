"""Fixtures for the mount tests: a per-test time limit and mounts that are always unmounted."""
import os
import os.path as osp
import signal
import sys

import pytest

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import h5d_testlib  # noqa: E402

TEST_TIME_LIMIT = int(os.environ.get('H5D_TEST_TIME_LIMIT', '180'))


@pytest.fixture(autouse=True)
def _time_limit():
    """Fails a test that runs longer than TEST_TIME_LIMIT seconds (instead of hanging CTest)."""
    def on_alarm(signum, frame):
        raise TimeoutError(f'test exceeded {TEST_TIME_LIMIT} s')
    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(TEST_TIME_LIMIT)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def mount():
    """mount(src, opts=None, **kw) -> Mount; every mount is unmounted at the end of the test."""
    mounts = []

    def make(src, opts=None, **kw):
        m = h5d_testlib.Mount(src, opts, **kw)
        mounts.append(m)
        return m

    yield make
    for m in mounts:
        m.close()


def pytest_collection_modifyitems(config, items):
    if not h5d_testlib.BIN or not osp.exists(h5d_testlib.BIN):
        skip = pytest.mark.skip(reason='H5DIRECT_BIN (the built mount.h5direct) is not set')
        for item in items:
            if 'mount' in item.nodeid.split('::')[0]:
                item.add_marker(skip)
