"""The main job on a small generated sample: write an HDF5 file and a small European XFEL run,
mount them with h5direct, read through numpy, compare with h5py / the generator's expected
arrays, unmount. Usage: demo.py PATH/TO/mount.h5direct"""
import json
import os
import shutil
import os.path as osp
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

HERE = osp.dirname(osp.abspath(__file__))
binary = sys.argv[1]
work = tempfile.mkdtemp(prefix="h5direct-demo-")
src = osp.join(work, "data")
mnt = osp.join(work, "mnt")
os.makedirs(src)
os.makedirs(mnt)

# 1. A plain HDF5 file: detector-like frames, one per chunk, shuffle+deflate.
rng = np.random.default_rng(0)
frames = rng.normal(1000, 30, size=(64, 512, 128)).astype("<u2")
with h5py.File(osp.join(src, "sample.h5"), "w") as f:
    f.create_dataset("detector/frames", data=frames, chunks=(1, 512, 128), shuffle=True,
                     compression="gzip", compression_opts=1)
    f.create_dataset("detector/trainId", data=np.arange(10000, 10064, dtype="u8"))
    f["detector/frames"].attrs["units"] = "ADU"

# 2. A small EuXFEL run (2 AGIPD modules + slow data) from the test generator, which also
#    writes the arrays EXtra-data would return for every key.
subprocess.run([sys.executable, osp.join(HERE, "..", "tests", "python", "euxfel_mock.py"),
                osp.join(work, "gen"), "--modules", "2", "--small-images"], check=True,
               stdout=subprocess.DEVNULL)
os.rename(osp.join(work, "gen", "raw"), osp.join(src, "raw"))
expected_dir = osp.join(work, "gen", "expected")
expected = json.load(open(osp.join(expected_dir, "expected.json")))

proc = subprocess.Popen([binary, src, mnt, "-f"])
try:
    for _ in range(200):
        if osp.ismount(mnt):
            break
        time.sleep(0.05)
    else:
        sys.exit("the mount did not appear")
    print(f"mounted {src} at {mnt}")

    base = osp.join(mnt, "sample.h5", "detector")
    print("sample.h5/detector:", sorted(os.listdir(base)))
    t0 = time.time()
    arr = np.load(osp.join(base, "frames.npy"), mmap_mode="r")
    copy = np.array(arr)
    dt = time.time() - t0
    del arr
    assert copy.dtype == frames.dtype and copy.shape == frames.shape and np.array_equal(copy, frames), "bytes differ"
    print(f"  frames.npy {copy.shape} {copy.dtype}: identical to h5py ({copy.nbytes / dt / 1e6:.0f} MB/s)")
    side = json.load(open(osp.join(base, "frames.json")))
    print(f"  frames.json: layout={side['layout']} chunks={side['chunks']} "
          f"filters={[x['name'] for x in side['filters']]} read_path={side.get('read_path')}")

    run = osp.join(mnt, "raw", "r0338")
    print("raw/r0338:", sorted(os.listdir(run)))
    checked = 0
    for k in expected["keys"]:
        if not k["is_array"]:
            continue
        path = osp.join(run, *k["source"].split("/"), k["key"] + ".npy")
        got = np.load(path)
        want = np.load(osp.join(expected_dir, k["data"]))
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=got.dtype.kind == "f"), path
        checked += 1
    print(f"  {checked} keys of the run identical to EXtra-data's arrays, e.g.")
    k0 = next(k for k in expected["keys"] if k["is_array"] and k["key"] == "image.data")
    p = osp.join(run, *k0["source"].split("/"), "image.data")
    a = np.load(p + ".npy", mmap_mode="r")
    print(f"  {p}.npy {a.shape} {a.dtype}; train IDs in {json.load(open(p + '.json'))['train_ids']}")
    del a
    det = osp.join(run, "SPB_DET_AGIPD1M-1")
    info = json.load(open(osp.join(det, "detector.json")))
    assert info.get("usable"), info
    stacked = np.load(osp.join(det, "image.data.npy"), mmap_mode="r")
    print(f"  detector {info['detector_class']} modules {[x['module'] for x in info['modules']]}: image.data.npy {stacked.shape} "
          f"{stacked.dtype} (AGIPD1M(run)['image.data'].ndarray())")
    del stacked
    print("OK")
finally:
    subprocess.call(["fusermount3", "-u", "-z", mnt])
    proc.wait(timeout=20)
    shutil.rmtree(work, ignore_errors=True)
