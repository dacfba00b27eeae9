#!/bin/sh
# Prints the Debian packages that provide the shared libraries the given binaries load (one a
# line, sorted), so that the runtime image installs them with apt (where image scanners and
# `apt-get upgrade` see them) instead of copying files that ldd lists. Run in the build stage:
#   docker/runtime-packages.sh /opt/banyan/bin/* > runtime-packages.txt
#   docker/runtime-packages.sh BIN... --dlopen LIB...
# Libraries after --dlopen are ones the binaries open at run time, which ldd cannot see (the CUDA
# backend opens cuBLAS on first use: engine/cuda/cublas_loader.h); each counts, with what it loads.
# Fails, naming the library, when a library belongs to no package. Libraries the host brings
# (the NVIDIA driver's libcuda, mounted by the container toolkit) are left out.
set -eu
status=0
out=""
bins=""
opened=""
while [ $# -gt 0 ]; do
  if [ "$1" = --dlopen ]; then
    shift
    opened="$*"
    break
  fi
  bins="$bins $1"
  shift
done
# shellcheck disable=SC2086  # word splitting of the path lists is intended
libs=$( { ldd $bins $opened | awk '/=> \// {print $3}'; for l in $opened; do echo "$l"; done; } |
  sort -u)
for lib in $libs; do
  case "$lib" in */libcuda.so*|*/libnvidia-*) continue ;; esac
  real=$(readlink -f "$lib")
  pkg=""
  # Debian 12 merges /lib into /usr/lib, but dpkg records the path each package shipped.
  for candidate in "$lib" "$real" "${real#/usr}" "/usr$lib"; do
    pkg=$(dpkg-query -S "$candidate" 2>/dev/null | head -n1 | cut -d: -f1) && [ -n "$pkg" ] && break
  done
  if [ -z "$pkg" ]; then
    echo "runtime-packages: no Debian package provides $lib ($real)" >&2
    status=1
  else
    out="$out$pkg
"
  fi
done
printf '%s' "$out" | sort -u
exit $status
