"""Generate a small sample, mount it with h5direct, read it through numpy, compare with h5py."""
import os
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

binary = sys.argv[1]
work = tempfile.mkdtemp(prefix="h5direct-demo-")
src = os.path.join(work, "data")
mnt = os.path.join(work, "mnt")
os.makedirs(src)
os.makedirs(mnt)

rng = np.random.default_rng(0)
frames = (rng.normal(1000, 30, size=(64, 512, 128))).astype("<u2")
with h5py.File(os.path.join(src, "sample.h5"), "w") as f:
    f.create_dataset("detector/frames", data=frames, chunks=(1, 512, 128), shuffle=True, compression="gzip",
                     compression_opts=1)
    f.create_dataset("detector/trainId", data=np.arange(10000, 10064, dtype="u8"))
    f["detector/frames"].attrs["units"] = "ADU"

proc = subprocess.Popen([binary, src, mnt, "-f"])
try:
    for _ in range(100):
        if os.path.ismount(mnt):
            break
        time.sleep(0.05)
    else:
        sys.exit("mount did not appear")
    base = os.path.join(mnt, "sample.h5", "detector")
    print("mounted:", sorted(os.listdir(base)))
    t0 = time.time()
    arr = np.load(os.path.join(base, "frames.npy"), mmap_mode="r")
    copy = np.array(arr)
    dt = time.time() - t0
    with h5py.File(os.path.join(src, "sample.h5"), "r") as f:
        ref = f["detector/frames"][()]
    assert copy.shape == ref.shape and copy.dtype == ref.dtype, (copy.shape, copy.dtype)
    assert np.array_equal(copy, ref), "bytes differ"
    print(f"frames.npy {copy.shape} {copy.dtype}: identical to h5py ({copy.nbytes / dt / 1e6:.0f} MB/s through the mount)")
    print(open(os.path.join(base, "frames.json")).read()[:400], "...")
    print("OK")
finally:
    subprocess.call(["fusermount3", "-u", "-z", mnt])
    proc.wait(timeout=10)
