#!/usr/bin/env bash
# Installs the Debian packages h5direct needs to build, test and benchmark (idempotent).
# Usage: tools/install-deps.sh [--list]   (--list: print the package names, install nothing;
# tools/check-deps.sh checks that everything the build and the tests use comes from them)
set -euo pipefail
PKGS=(build-essential cmake pkg-config clang libclang-rt-14-dev
      libfuse3-dev fuse3 libhdf5-dev hdf5-tools
      libdeflate-dev libblosc-dev liblz4-dev libzstd-dev zlib1g-dev liblzf-dev
      nlohmann-json3-dev catch2 libseccomp-dev libcap-dev
      python3-numpy python3-h5py python3-hdf5plugin python3-pytest python3-matplotlib python3-distributed python3-dask python3-lz4
      python3-xarray
      hdf5-filter-plugin hdf5-filter-plugin-blosc-serial hdf5-plugin-lzf
      mount util-linux  # mount(8), mountpoint, setpriv: test_mount_safety.py
      rsync             # copies of a mounted tree: test_du_and_copies.py
      linux-perf)       # where a warm read's CPU goes: bench/bench_delivery.py --perf
if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${PKGS[@]}"
  exit 0
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
