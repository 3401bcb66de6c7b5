#!/usr/bin/env bash
# Builds the kernel's sample mdev drivers (mtty, mdpy, mbochs from samples/vfio-mdev) out of tree for kernel
# version $1, using Debian's linux-source tarball and linux-headers. Output: $2/{mtty,mdpy,mbochs}.ko.
# Cached: a second run with the same version and the same tarball is a no-op.
set -euo pipefail
kver=${1:?kernel version}
out=${2:?output dir}
tarball=$(ls /usr/src/linux-source-*.tar.xz 2>/dev/null | head -1)
[ -n "$tarball" ] || { echo "build-samples: no /usr/src/linux-source-*.tar.xz (apt-get install linux-source)" >&2; exit 1; }
[ -d "/lib/modules/$kver/build" ] || { echo "build-samples: no headers for $kver (apt-get install linux-headers-$kver)" >&2; exit 1; }
stamp="$kver $(stat -c '%s %Y' "$tarball")"
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ] \
   && [ -f "$out/mtty.ko" ] && [ -f "$out/mdpy.ko" ] && [ -f "$out/mbochs.ko" ]; then
  exit 0
fi
rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd)   # kbuild needs an absolute M=
top=$(basename "$tarball" .tar.xz)
tar -xJf "$tarball" -C "$out" --strip-components=3 "$top/samples/vfio-mdev"
rm -f "$out/Makefile"   # the in-tree Makefile keys on CONFIG_SAMPLE_*; our Kbuild replaces it
echo 'obj-m := mtty.o mdpy.o mbochs.o' > "$out/Kbuild"
make -s -C "/lib/modules/$kver/build" M="$out" -j"$(nproc)" modules >"$out/build.log" 2>&1 \
  || { cat "$out/build.log" >&2; echo "build-samples: module build failed" >&2; exit 1; }
echo "$stamp" > "$out/.stamp"
