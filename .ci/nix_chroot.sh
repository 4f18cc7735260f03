#!/usr/bin/env sh
# Make, check or refresh a Debian chroot holding that suite's Nix (trixie: 2.26, sid: 2.34) and buildreport
# in a virtual environment (/opt/buildreport), for the recorder tests to run each Nix version.
#
#   sh .ci/nix_chroot.sh SUITE...
#
# Each chroot is kept in $BUILDREPORT_NIX_CACHE/SUITE (default /var/cache/buildreport-nix), made again when
# missing or broken. buildreport is installed in it from a wheel of this checkout, in a virtual environment
# of this checkout's own (/opt/buildreport/<hash of the checkout's folder>: checkouts side by side do not
# replace each other's), again whenever the checkout's sources differ from those last installed. Prints
# "SUITE CHROOT VENV" for each suite. Needs root and debootstrap. Nothing is mounted outside a private mount
# namespace, so no mount outlives the command that needed it (see tests/nix_in_chroot.sh).
set -eu

checkout=$(cd "$(dirname "$0")/.." && pwd)
cache=${BUILDREPORT_NIX_CACHE:-/var/cache/buildreport-nix}
in_chroot="$checkout/tests/nix_in_chroot.sh"

fail() { echo "nix_chroot: $*" >&2; exit 1; }

[ "$#" -gt 0 ] || fail "name the Debian suites to prepare, e.g. trixie sid"
[ "$(id -u)" = 0 ] || fail "making a chroot needs root"
command -v debootstrap >/dev/null 2>&1 || fail "debootstrap is missing (apt-get install debootstrap)"
command -v unshare >/dev/null 2>&1 || fail "unshare is missing (util-linux)"

# The Debian mirror this machine's apt already uses.
mirror() {
    uri=$(grep -h -m1 -E '^URIs:.*/debian/?$' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | head -n1)
    [ -n "$uri" ] || uri=$(grep -h -E '^deb .*/debian/? ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        2>/dev/null | awk '{print $2}' | head -n1)
    echo "${uri:-http://deb.debian.org/debian}"
}

# A hash of everything the wheel is made of: a change reinstalls buildreport in the chroots.
sources_hash() {
    (cd "$checkout" && find buildreport pyproject.toml README.md -type f ! -name '*.pyc' ! -path '*__pycache__*' \
        -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}

# Runs a command inside the chroot (with /proc, /sys, /dev mounted for it only).
inside() { target=$1; shift; unshare --mount --propagation private -- sh "$in_chroot" "$target" "$@"; }

healthy() {
    [ -f "$1/.buildreport-ready" ] && inside "$1" nix --version >/dev/null 2>&1 \
        && inside "$1" python3 -c 'import venv' >/dev/null 2>&1
}

make_chroot() {
    suite=$1 dir=$2
    # Refuse to delete through a mount: nothing should be mounted below a chroot outside a private namespace.
    if grep -q " $dir[/ ]" /proc/mounts || grep -q " $dir.new[/ ]" /proc/mounts; then
        fail "something is mounted below $dir; unmount it first"
    fi
    rm -rf "$dir" "$dir.new"
    started=$(date +%s)
    echo "nix_chroot: making the $suite chroot in $dir from $(mirror) (a few minutes)" >&2
    # debootstrap ends in an error after leaving libdbd-sqlite3-perl (a dependency of nix-bin) unconfigured;
    # apt-get -f install configures it. Any other failure leaves no nix-build behind.
    unshare --mount --propagation private -- debootstrap --variant=minbase \
        --include=nix-bin,python3,python3-venv,openssh-server,openssh-client "$suite" "$dir.new" "$(mirror)" \
        >"$cache/$suite.debootstrap.log" 2>&1 || [ -x "$dir.new/usr/bin/nix-build" ] \
        || fail "debootstrap $suite failed; see $cache/$suite.debootstrap.log"
    inside "$dir.new" env DEBIAN_FRONTEND=noninteractive apt-get -f install -y -qq >>"$cache/$suite.debootstrap.log" 2>&1 \
        || fail "apt-get -f install in the $suite chroot failed; see $cache/$suite.debootstrap.log"
    mkdir -p "$dir.new/etc/nix" "$dir.new/etc/ssl/certs"
    # The tests' own Nix settings: no sandbox, no substituters, builds as root (no nixbld users in a chroot).
    printf '%s\n' 'sandbox = false' 'substituters =' 'experimental-features = nix-command' \
        'build-users-group =' 'keep-build-log = true' >"$dir.new/etc/nix/nix.conf"
    touch "$dir.new/.buildreport-ready"
    mv "$dir.new" "$dir"
    echo "nix_chroot: $suite chroot made in $(( $(date +%s) - started )) s" >&2
}

install_buildreport() {
    dir=$1 want=$2 venv=$3
    [ "$(cat "$dir$venv/.sources" 2>/dev/null)" = "$want" ] && return 0
    started=$(date +%s)
    [ -x "$dir$venv/bin/pip" ] || inside "$dir" python3 -m venv "$venv" || fail "python3 -m venv failed in $dir"
    wheels="$dir$venv/wheels"
    rm -rf "$wheels" && mkdir -p "$wheels"
    python=$checkout/.venv/bin/python
    [ -x "$python" ] || python=python3
    "$python" -m pip wheel --quiet --no-deps --wheel-dir "$wheels" "$checkout" >/dev/null \
        || fail "could not build buildreport's wheel"
    wheel=$venv/wheels/$(basename "$(ls "$wheels"/*.whl)")
    # pip inside the chroot checks certificates against this machine's CA bundle.
    cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/host-ca-certificates.crt"
    cert=/etc/ssl/certs/host-ca-certificates.crt
    inside "$dir" env SSL_CERT_FILE=$cert PIP_CERT=$cert "$venv/bin/pip" install --quiet \
        --disable-pip-version-check --force-reinstall --no-deps "$wheel" \
        && inside "$dir" env SSL_CERT_FILE=$cert PIP_CERT=$cert "$venv/bin/pip" install --quiet \
        --disable-pip-version-check "$wheel" || fail "pip could not install buildreport in $dir"
    echo "$want" >"$dir$venv/.sources"
    echo "nix_chroot: buildreport installed in $dir in $(( $(date +%s) - started )) s" >&2
}

mkdir -p "$cache"
want=$(sources_hash)
venv=/opt/buildreport/$(printf '%s' "$checkout" | sha256sum | cut -c1-12)
for suite in "$@"; do
    case "$suite" in *[!a-z0-9-]*|'') fail "'$suite' is not a Debian suite name" ;; esac
    dir="$cache/$suite"
    # One set-up at a time per suite, whoever runs it.
    exec 9>"$cache/$suite.lock"
    flock 9
    healthy "$dir" || make_chroot "$suite" "$dir"
    healthy "$dir" || fail "the $suite chroot in $dir does not run nix or python; remove it and try again"
    install_buildreport "$dir" "$want" "$venv"
    exec 9>&-
    echo "$suite $dir $venv"
done
