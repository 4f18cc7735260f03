#!/bin/sh
# Run COMMAND inside the chroot DIR, with the chroot's own PATH, in the caller's folder:
#
#   unshare --mount --propagation private -- sh tests/nix_in_chroot.sh DIR COMMAND [ARG...]
#
# Always started in a private mount namespace (unshare above): the bind mounts made here (/proc, /sys, /dev,
# /dev/pts, and the temporary folder at the same path so that files are the same on both sides) exist for
# COMMAND only, and the kernel drops them when its last process ends, whatever way it ends; the machine's
# own mounts never change. Every step execs the next, so COMMAND keeps this script's pid and gets its signals.
set -eu
dir=$1
shift
for part in proc sys dev dev/pts; do
    mount --bind "/$part" "$dir/$part"
done
tmp=${TMPDIR:-/tmp}
tmp=${tmp%/}
mkdir -p "$dir$tmp"
mount --bind "$tmp" "$dir$tmp"
# A log folder given as the chroot's, seen from outside, is the chroot's own folder inside.
case "${NIX_LOG_DIR:-}" in "$dir"/*) NIX_LOG_DIR=${NIX_LOG_DIR#"$dir"}; export NIX_LOG_DIR ;; esac
# The caller's folder, when the chroot sees it (the temporary folder); else the chroot's root.
case "$PWD/" in "$tmp"/*) here=$PWD ;; *) here=/ ;; esac
unset PYTHONPATH PYTHONHOME VIRTUAL_ENV
exec chroot "$dir" /usr/bin/env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/sh -c 'cd "$1" && shift && exec "$@"' sh "$here" "$@"
