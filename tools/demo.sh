#!/usr/bin/env bash
# The main job on a small generated sample: install what is missing, build, write a sample
# HDF5 file and a small EuXFEL-style run, mount them, read through numpy, compare with h5py,
# unmount. Usage: tools/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# The program (and its helper), and the man page: what `cmake --install build` installs.
cmake --build build -j"$(nproc)" --target mount.h5direct h5direct_man
exec /usr/bin/python3 tools/demo.py "$PWD/build/daemon/mount.h5direct"
