#!/bin/bash
# boot.sh CACHE_DIR INITRAMFS CONSOLE_LOG DISK...
#
# Why: one qemu boot runs one `ext4sim oracle-guest` batch against the given raw disks
# (/dev/vda, /dev/vdb, ... in argument order). /dev/kvm here is unusable by stock
# kernels, so qemu runs under TCG, in the form checked in TOOLCHAIN.md.
# How: the serial console goes to CONSOLE_LOG; the guest powers off when done.
# Exits non-zero if qemu fails, it outlasts $BOOT_TIMEOUT seconds (default 300), or the
# log has no ORACLE-GUEST-EXIT line (e.g. a kernel panic: panic=-1 + -no-reboot makes
# qemu exit 0).
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: $0 CACHE_DIR INITRAMFS CONSOLE_LOG DISK..." >&2; exit 2; }
cache=$1 initrd=$2 log=$3
shift 3
drives=()
# werror/rerror=report: a host write that fails (a full disk) reaches the guest as EIO
# at once, and ext4sim then reports the full disk; qemu's default would pause the VM
# until the timeout.
for d in "$@"; do drives+=(-drive "file=${d//,/,,},format=raw,if=virtio,cache=unsafe,werror=report,rerror=report"); done

rc=0
timeout "${BOOT_TIMEOUT:-300}" qemu-system-x86_64 -accel tcg,thread=single -cpu max -M q35 \
  -m "${GUEST_MIB:-1024}M" -smp 1 -nodefaults -display none -no-reboot -serial "file:$log" \
  -kernel "$cache/vmlinuz" -initrd "$initrd" \
  -append "console=ttyS0 quiet cryptomgr.notests mitigations=off panic=-1 rdinit=/init" \
  "${drives[@]}" || rc=$?
if [ $rc -eq 124 ]; then echo "boot.sh: timed out (see $log)" >&2; exit 124; fi
if [ $rc -ne 0 ]; then echo "boot.sh: qemu exited $rc (see $log)" >&2; exit $rc; fi
grep -q '^ORACLE-GUEST-EXIT ' "$log" || { echo "boot.sh: guest did not finish (see $log)" >&2; exit 1; }
