#!/usr/bin/env bash
# The package as a user installs it: build the wheel, install it into a fresh virtual environment outside the
# checkout, run `buildreport demo` from there until /healthz answers, stop it with Ctrl-C (SIGINT) and check it
# left no temporary folder. An editable install hides missing package data; this does not.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
pid=""
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" .
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "$work"/dist/buildreport-*.whl
py="$work/venv/bin/python"
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

mkdir "$work/run" "$work/tmp"
cd "$work/run"  # nothing of the checkout is reachable from here
TMPDIR="$work/tmp" "$work/venv/bin/buildreport" demo --port "$port" --workers 1 >"$work/demo.log" 2>&1 &
pid=$!
answered=""
for _ in $(seq 1 120); do
    if "$py" -c "import sys, urllib.request
sys.exit(urllib.request.urlopen('http://127.0.0.1:$port/healthz', timeout=1).status != 200)" 2>/dev/null; then
        answered=1
        break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
done
if [ -z "$answered" ]; then
    echo "wheel smoke: the demo from the installed wheel did not answer" >&2
    cat "$work/demo.log" >&2
    exit 1
fi
token=$(sed -n 's/^token for account acme: //p' "$work/demo.log")
"$py" -c "import sys, urllib.request
request = urllib.request.Request('http://127.0.0.1:$port/builds?limit=1', headers={'Authorization': 'Bearer $token'})
sys.exit(urllib.request.urlopen(request, timeout=5).status != 200)"
kill -INT "$pid"
wait "$pid" || true
pid=""
if grep -q Traceback "$work/demo.log"; then
    echo "wheel smoke: the demo printed a traceback" >&2
    cat "$work/demo.log" >&2
    exit 1
fi
if [ -n "$(ls -A "$work/tmp")" ]; then
    echo "wheel smoke: the demo left $(ls "$work/tmp") in the temporary directory" >&2
    exit 1
fi
echo "wheel smoke: buildreport demo from the installed wheel answered and stopped cleanly"
