#!/bin/sh
# The process boundary as a build check (core/CMakeLists.txt): the daemon neither links nor calls
# libhdf5, which runs only in its helper processes (core/h5lib/metadata.h).
#   check-no-hdf5.sh program FILE             FILE (mount.h5direct) needs no libhdf5: neither its
#                                             own NEEDED entries (readelf -d) nor what ldd loads
#   check-no-hdf5.sh archive FILE [EXEMPT...] no object file of the static library FILE but the
#                                             EXEMPT ones (names such as writer.cpp.o) refers
#                                             to a libhdf5 symbol (H5...)
# Exit status 1, naming what links or calls libhdf5, when the boundary is crossed.
set -eu
mode=$1
file=$2
shift 2
[ -e "$file" ] || { echo "check-no-hdf5: $file: no such file" >&2; exit 2; }
case $mode in
program)
  bad=$( { readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; ldd "$file" | awk '{print $1}'; } |
        grep -i 'libhdf5' | sort -u || true)
  if [ -n "$bad" ]; then
    echo "check-no-hdf5: $file links libhdf5 ($(echo $bad)): the daemon must not (core/h5lib/metadata.h)" >&2
    exit 1
  fi
  # Must have been able to look: an empty dependency list would pass anything.
  readelf -d "$file" | grep -q '(NEEDED)' || { echo "check-no-hdf5: $file: no dynamic section read" >&2; exit 2; }
  ;;
archive)
  # nm -A: "archive:member: symbol" lines; undefined libhdf5 symbols are H5<letter>... functions
  # and H5..._g globals (H5T_NATIVE_INT_g, H5P_CLS_..._ID_g).
  bad=$(nm -A -u "$file" | awk '{print $1, $NF}' | grep -E ' H5[A-Za-z_]' || true)
  for exempt in "$@"; do
    bad=$(printf '%s\n' "$bad" | grep -v ":$exempt: " || true)
  done
  if [ -n "$bad" ]; then
    echo "check-no-hdf5: object files of $file call libhdf5 (only the helper-side library may):" >&2
    printf '%s\n' "$bad" | sed 's/^[^:]*://' | sort -u | head -50 >&2
    exit 1
  fi
  nm -A "$file" >/dev/null || exit 2
  ;;
*)
  echo "usage: check-no-hdf5.sh program FILE | archive FILE [EXEMPT...]" >&2
  exit 2
  ;;
esac
