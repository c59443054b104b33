#!/bin/sh
# fetch-kernel.sh CACHE_DIR
#
# Why: the host kernel refuses ext4 block sizes > 4 KiB; `ext4sim oracle --kernel qemu`
# boots a newer Debian cloud kernel (7.x, from trixie-backports) under qemu/TCG instead.
# How: installs the host tools if missing, then `apt-get download`s the newest 7.x
# cloud-amd64 kernel under a PRIVATE apt state in CACHE_DIR/apt (the system's apt lists,
# cache and sources are not touched; the archive URI is read at run time from the
# machine's own apt sources), unpacks it with `dpkg -x` and leaves:
#   CACHE_DIR/vmlinuz  CACHE_DIR/KVER  CACHE_DIR/config
#   CACHE_DIR/modules/*.ko (decompressed) + CACHE_DIR/modules/ORDER (insmod order)
# Modules: virtio_blk plus its `depends=` closure (the .deb ships no modules.dep, and the
# host has no modinfo, so the field is read from the .ko itself); ext4 is added only if
# the package's config says CONFIG_EXT4_FS=m.
# Signatures: verified normally. The InRelease is checked against the system's
# debian-archive-keyring.gpg (bookworm's package carries the 13/trixie keys), and the
# .debs against its hashes. No override is needed.
# Idempotent: exits at once if CACHE_DIR/KVER, vmlinuz and modules/ORDER exist.
# Exit status: 0 ready; 77 this machine cannot run the qemu kernel at all (qemu or the
# tools cannot be installed, or nothing is cached and the archive cannot be reached);
# anything else is a broken setup (a download or unpack that failed after it started,
# no 7.x kernel in the archive, a full disk): `ext4sim oracle` then fails, never skips.
set -eu
[ $# -eq 1 ] || { echo "usage: $0 CACHE_DIR" >&2; exit 2; }
unavailable() { echo "fetch-kernel: cannot run here: $*" >&2; exit 77; }
mkdir -p "$1"
C=$(cd "$1" && pwd)
cached() { [ -s "$C/KVER" ] && [ -s "$C/vmlinuz" ] && [ -s "$C/modules/ORDER" ]; }

# The archive URI: first non-security entry of the machine's own apt sources.
uri=
if [ -r /etc/apt/sources.list.d/debian.sources ]; then
  uri=$(awk '$1 == "URIs:" && $2 !~ /security/ { print $2; exit }' \
    /etc/apt/sources.list.d/debian.sources)
fi
if [ -z "$uri" ] && [ -r /etc/apt/sources.list ]; then
  uri=$(sed 's/\[[^]]*\]//' /etc/apt/sources.list |
    awk '$1 == "deb" && $2 !~ /security/ { print $2; exit }')
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

# Host tools. --no-remove: never remove installed packages to make room. (These images
# carry qemu-utils from <codename>-backports, which Breaks the stable qemu-system-x86;
# then qemu is taken from backports too, via private lists/cache.)
need=
command -v qemu-system-x86_64 >/dev/null || need="$need qemu-system-x86"
dpkg-query -W -f='${Status}\n' busybox-static 2>/dev/null | grep -q ' installed' \
  || need="$need busybox-static"
command -v xz >/dev/null || need="$need xz-utils"
command -v cpio >/dev/null || need="$need cpio"
if [ -n "$need" ]; then
  command -v apt-get >/dev/null || unavailable "no apt-get to install$need"
  # shellcheck disable=SC2086 # $need is a word list
  if ! { apt-get update && apt-get install -y --no-install-recommends --no-remove $need; }; then
    [ -n "$uri" ] || unavailable "could not install$need, and no archive URI in the apt sources"
    echo "fetch-kernel: retrying with backports" >&2
    bpo=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)-backports
    B=$C/apt-host
    mkdir -p "$B/lists/partial" "$B/cache/archives/partial"
    { cat /etc/apt/sources.list 2>/dev/null || true
      echo "deb [signed-by=$keyring] $uri $bpo main"; } >"$B/sources.list"
    set -- -o Dir::Etc::SourceList="$B/sources.list" -o Dir::State::Lists="$B/lists" \
      -o Dir::Cache="$B/cache"
    # shellcheck disable=SC2086
    { apt-get "$@" update && apt-get "$@" install -y --no-install-recommends --no-remove -t "$bpo" $need; } ||
      unavailable "could not install$need from $uri ($bpo included)"
    rm -rf "$B"
  fi
fi

cached && exit 0
[ -n "$uri" ] || unavailable "no kernel cached in $C and no archive URI in the apt sources"
command -v apt-get >/dev/null || unavailable "no kernel cached in $C and no apt-get to fetch one"
# A full disk is a broken setup, not a machine that cannot fetch: say so before apt does.
free_mib=$(($(df -Pk "$C" | awk 'NR == 2 { print $4 }') / 1024))
[ "$free_mib" -ge 512 ] || { echo "$0: $C has $free_mib MiB free; fetching the kernel needs about 512 MiB" >&2; exit 1; }

A=$C/apt
mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$C/debs"
echo "deb [signed-by=$keyring] $uri trixie-backports main" >"$A/sources.list"
apt_private() {
  "$@" -o Dir::Etc::SourceList="$A/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o Dir::State::Lists="$A/lists" -o Dir::Cache="$A/cache" -o APT::Sandbox::User=root
}
# An archive that cannot be reached at all means this machine cannot fetch; any failure
# after it answered is a broken setup.
apt_private apt-get -q update || unavailable "no kernel cached in $C and $uri cannot be reached"

kver=$(apt_private apt-cache pkgnames linux- |
  sed -n 's/^linux-\(image\|binary\)-\(7\.[0-9.]*+[^-]*-cloud-amd64\)$/\2/p' | sort -uV | tail -n 1)
[ -n "$kver" ] || { echo "$0: no 7.x cloud-amd64 kernel in trixie-backports" >&2; exit 1; }
pkgs=
for p in image binary modules base; do
  apt_private apt-cache show "linux-$p-$kver" >/dev/null 2>&1 && pkgs="$pkgs linux-$p-$kver"
done
echo "fetch-kernel: KVER=$kver packages:$pkgs"
# shellcheck disable=SC2086 # $pkgs is a word list
(cd "$C/debs" && apt_private apt-get -q download $pkgs)

R=$C/root
rm -rf "$R" "$C/modules"
mkdir -p "$R" "$C/modules"
for p in $pkgs; do dpkg -x "$C/debs/${p}_"*.deb "$R"; done
M=$R/usr/lib/modules/$kver
[ -f "$M/vmlinuz" ] || M=$R/boot    # older, unsplit packaging
cp "$M/vmlinuz"* "$C/vmlinuz"
cp "$R/usr/lib/modules/$kver/config" "$C/config" 2>/dev/null || cp "$R/boot/config-$kver" "$C/config"

# Post-order walk over `depends=`, so dependencies come first in ORDER.
want=virtio_blk
grep -q '^CONFIG_EXT4_FS=m' "$C/config" && want="$want ext4"
add() {
  grep -qx "$1.ko" "$C/modules/ORDER" 2>/dev/null && return 0
  f=$(find "$R/usr/lib/modules/$kver/kernel" -name "$1.ko*" | head -n 1)
  [ -z "$f" ] && f=$(find "$R/usr/lib/modules/$kver/kernel" -name "$(echo "$1" | tr _ -).ko*" | head -n 1)
  [ -n "$f" ] || { echo "$0: module $1 not found" >&2; exit 1; }
  case $f in *.xz) xz -dc "$f" ;; *) cat "$f" ;; esac >"$C/modules/$1.ko"
  for d in $(tr '\0' '\n' <"$C/modules/$1.ko" | sed -n 's/^depends=//p' | head -n 1 | tr , ' '); do
    add "$(echo "$d" | tr - _)"
  done
  echo "$1.ko" >>"$C/modules/ORDER"
}
: >"$C/modules/ORDER"
for m in $want; do add "$m"; done
rm -rf "$R"
echo "$kver" >"$C/KVER"
echo "fetch-kernel: $C ready ($(tr '\n' ' ' <"$C/modules/ORDER"))"
