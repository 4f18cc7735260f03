#!/usr/bin/env sh
# Install the Debian packages named as arguments whose command is missing (chromium for the browser tests,
# nix-bin, openssh-server and debootstrap (chroots with newer Nix) for the recorder tests, systemd for the unit
# tests (systemd-analyze verify), postgresql for the PostgreSQL tests, wrk for the benchmark),
# with apt-get when run as root; otherwise say what to install and go on.
missing=""
for package in "$@"; do
    case "$package" in
        nix-bin) command=nix-build ;;
        openssh-server) command=/usr/sbin/sshd ;;
        systemd) command=systemd-analyze ;;
        debootstrap) command=/usr/sbin/debootstrap ;;
        # Debian keeps the server's programs off PATH, in a folder per major version.
        postgresql) command=$(ls /usr/lib/postgresql/*/bin/postgres 2>/dev/null | tail -n 1) ;;
        *) command=$package ;;
    esac
    [ -n "$command" ] && command -v "$command" >/dev/null 2>&1 || missing="$missing $package"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing$missing from Debian's packages" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null && exit 0
    echo "could not install$missing" >&2
    exit 1
fi
echo "missing:$missing. Install with: sudo apt-get install$missing (the browser tests need chromium, the recorder tests nix-bin and openssh-server, the unit tests systemd, the PostgreSQL tests postgresql)" >&2
