#!/bin/sh
# build-initramfs.sh CACHE_DIR GUEST_BIN OUT_CPIO
#
# Why: the qemu oracle boots straight into an initramfs; there is no guest root disk.
# How: stages busybox-static (all applets as /bin symlinks), CACHE_DIR/modules (from
# fetch-kernel.sh), GUEST_BIN as /bin/ext4sim plus every library `ldd` lists for it
# (the ELF interpreter included, at its own path), and an /init that loads the modules,
# waits for /dev/vda, runs `/bin/ext4sim oracle-guest`, prints
# `ORACLE-GUEST-EXIT <status>` and powers off. Writes an uncompressed newc cpio.
set -eu
[ $# -eq 3 ] || { echo "usage: $0 CACHE_DIR GUEST_BIN OUT_CPIO" >&2; exit 2; }
cache=$1 guest=$2
out=$(cd "$(dirname "$3")" && pwd)/$(basename "$3")
[ -s "$cache/modules/ORDER" ] || { echo "$0: run fetch-kernel.sh $cache first" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

mkdir -p "$T/bin" "$T/dev" "$T/proc" "$T/sys" "$T/mnt" "$T/tmp" "$T/modules"
cp /bin/busybox "$T/bin/busybox"
for a in $(/bin/busybox --list); do [ -e "$T/bin/$a" ] || ln -s busybox "$T/bin/$a"; done
cp "$cache/modules/"*.ko "$cache/modules/ORDER" "$T/modules/"

cp "$guest" "$T/bin/ext4sim"
# Debug info only slows the boot; the guest never needs it.
strip --strip-debug "$T/bin/ext4sim" 2>/dev/null || true
if ldd "$guest" >"$T/ldd" 2>&1; then
  if grep -q 'not found' "$T/ldd"; then cat "$T/ldd" >&2; exit 1; fi
  awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' "$T/ldd" |
    while read -r lib; do cp -L --parents "$lib" "$T"; done
fi    # else: a static binary, nothing to copy
rm "$T/ldd"

cat >"$T/init" <<'INIT'
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
while read -r m; do insmod "/modules/$m"; done </modules/ORDER
i=0
while [ ! -b /dev/vda ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -b /dev/vda ] || echo "init: no /dev/vda after 10 s"
/bin/ext4sim oracle-guest
echo "ORACLE-GUEST-EXIT $?"
sync
poweroff -f
INIT
chmod 755 "$T/init"

(cd "$T" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$out"
