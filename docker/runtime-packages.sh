#!/bin/sh
# Prints the Debian packages that provide the shared libraries the given binaries load (one a
# line, sorted), so that the runtime image installs them with apt (where image scanners and
# `apt-get upgrade` see them) instead of copying files that ldd lists. Run in the build stage:
#   docker/runtime-packages.sh /opt/banyan/bin/* > runtime-packages.txt
# Fails, naming the library, when a library belongs to no package. Libraries the host brings
# (the NVIDIA driver's libcuda, mounted by the container toolkit) are left out.
set -eu
status=0
out=""
libs=$(ldd "$@" | awk '/=> \// {print $3}' | sort -u)
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
