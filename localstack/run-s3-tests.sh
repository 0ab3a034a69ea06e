#!/usr/bin/env bash
# Run zvf's S3 tests (pytest -m s3) against a LocalStack S3 started here, without Docker.
#
#   localstack/run-s3-tests.sh [--smoke-only | --no-smoke | --serve] [--] [pytest args...]
#
# Builds (once) a Python 3.13 venv for LocalStack under the cache dir, starts LocalStack S3 on a
# free port of 127.0.0.1, runs localstack/smoke.py, then pytest -m s3 from the repo root with the
# repo's .venv, and always stops LocalStack on exit. The exit code is pytest's.
#
# Environment (all optional):
#   ZVF_LOCALSTACK_CACHE    cache dir       (default ${XDG_CACHE_HOME:-$HOME/.cache}/zvf-localstack)
#   ZVF_LOCALSTACK_PYTHON   interpreter for the LocalStack venv (default: python3.13)
#   ZVF_LOCALSTACK_PORT     port to bind on 127.0.0.1 (default: a free one)
#   ZVF_LOCALSTACK_TIMEOUT  seconds to wait for readiness (default 60)
#   ZVF_LOCALSTACK_DEBUG=1  verbose LocalStack log
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
cache="${ZVF_LOCALSTACK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zvf-localstack}"
venv="$cache/venv"
reqs="$here/requirements.txt"
timeout_s="${ZVF_LOCALSTACK_TIMEOUT:-60}"

mode=tests
smoke=1
while [ $# -gt 0 ]; do
  case "$1" in
    --smoke-only) mode=smoke; shift ;;
    --no-smoke) smoke=0; shift ;;
    --serve) mode=serve; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) break ;;
  esac
done

say() { printf '[localstack] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 2; }
now() { date +%s.%N 2>/dev/null || date +%s; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# --- the repo's own venv (runs smoke.py and pytest) -------------------------------------------
repo_py="$repo/.venv/bin/python"
if [ "$mode" != serve ] && [ ! -x "$repo_py" ]; then
  die "$repo/.venv is missing. Create it first (see the README's test bootstrap), e.g.:
    cd '$repo' && python3 -m venv .venv && .venv/bin/pip install -e '.[test]'"
fi

# --- the LocalStack venv ----------------------------------------------------------------------
find_python() {
  if [ -n "${ZVF_LOCALSTACK_PYTHON:-}" ]; then echo "$ZVF_LOCALSTACK_PYTHON"; return; fi
  local minor root cand
  for minor in 13; do
    if command -v pyenv >/dev/null 2>&1 && root="$(pyenv root 2>/dev/null)"; then
      # newest installed 3.<minor>.<patch> first
      for cand in $(ls "$root/versions" 2>/dev/null | grep -E "^3\.$minor\.[0-9]+$" | sort -t. -k3,3nr); do
        cand="$root/versions/$cand/bin/python3.$minor"
        if [ -x "$cand" ]; then echo "$cand"; return; fi
      done
    fi
    if cand="$(command -v "python3.$minor" 2>/dev/null)" && "$cand" -c '' 2>/dev/null; then
      echo "$cand"; return
    fi
  done
  return 1
}

stamp_of() {  # what the venv was built from: the pins (not comments) + interpreter version
  { grep -v -E '^[[:space:]]*(#|$)' "$reqs"; "$1" -c 'import sys; print(sys.version)'; } \
    | cksum | cut -d' ' -f1
}

ensure_venv() {
  local py want
  py="$(find_python)" || die "no Python 3.13 found via 'pyenv root' or PATH; the pinned LocalStack
    needs Python >= 3.13. Install one (e.g. 'pyenv install 3.13') or set ZVF_LOCALSTACK_PYTHON."
  "$py" -c 'import sys; sys.exit(sys.version_info < (3, 13))' 2>/dev/null \
    || die "$py is not a working Python >= 3.13 (the pinned LocalStack needs it)"
  want="$(stamp_of "$py")"
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.zvf-stamp" 2>/dev/null)" = "$want" ]; then
    return
  fi
  mkdir -p "$cache"
  say "creating LocalStack venv in $venv with $py (takes about a minute, once)"
  local t0; t0="$(now)"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check -r "$reqs" \
      >"$cache/pip-install.log" 2>&1; then
    tail -n 30 "$cache/pip-install.log" >&2
    rm -rf "$venv"
    die "pip install -r $reqs failed (full log: $cache/pip-install.log)"
  fi
  echo "$want" > "$venv/.zvf-stamp"
  say "venv ready in $(since "$t0") s"
}

if command -v flock >/dev/null 2>&1; then
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  flock 9
  ensure_venv
  flock -u 9
  exec 9>&-
else
  ensure_venv
fi
ls_py="$venv/bin/python"

# --- start LocalStack -------------------------------------------------------------------------
work="$(mktemp -d "${TMPDIR:-/tmp}/zvf-localstack.XXXXXX")"
ls_pid=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM HUP
  if [ -n "$ls_pid" ] && kill -0 "$ls_pid" 2>/dev/null; then
    # LocalStack runs in its own session (setsid), so its group id is its pid.
    kill -TERM -- "-$ls_pid" 2>/dev/null || kill -TERM "$ls_pid" 2>/dev/null || true
    # It normally exits within 0.5-3.5 s. Its shutdown stops its asyncio loop from another
    # thread without waking it, so now and then it idles forever after closing its socket;
    # state is throw-away (PERSISTENCE=0, temp dir), so SIGKILL after a grace period is safe.
    local i t0; t0="$(now)"
    for i in $(seq 60); do kill -0 "$ls_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$ls_pid" 2>/dev/null; then
      say "LocalStack still running 6 s after SIGTERM (known shutdown hang); sending SIGKILL"
      kill -KILL -- "-$ls_pid" 2>/dev/null || kill -KILL "$ls_pid" 2>/dev/null || true
    fi
    wait "$ls_pid" 2>/dev/null || true
    say "LocalStack stopped ($(since "$t0") s)"
  fi
  if [ -f "$work/localstack.log" ] && [ "${keep_log:-0}" = 1 ]; then
    cp "$work/localstack.log" "$cache/last-localstack.log" 2>/dev/null \
      && say "LocalStack log kept in $cache/last-localstack.log"
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# The service catalog LocalStack builds on first start (~2.5 s) is kept across runs.
fsroot="$work/fs"
mkdir -p "$fsroot/var/lib/localstack" "$cache/ls-cache" "$work/tmp"
ln -s "$cache/ls-cache" "$fsroot/var/lib/localstack/cache"

free_port() {  # $1 = wanted port or 0; prints it if it can be bound on 127.0.0.1
  "$ls_py" -c 'import socket, sys; s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))
print(s.getsockname()[1])' "$1" 2>/dev/null
}

start_localstack() {  # $1 = port; sets ls_pid
  local launcher=()
  command -v setsid >/dev/null 2>&1 && launcher=(setsid)
  # A clean environment: LocalStack reads many variables, none of the caller's should leak in.
  # OVERRIDE_IN_DOCKER=0 keeps it in host mode (otherwise, inside any container, it writes to
  # /var/lib/localstack); the two SKIP/DISABLE settings stop its only outbound calls.
  env -i PATH="$PATH" HOME="$HOME" LANG=C.UTF-8 TMPDIR="$work/tmp" \
    XDG_CACHE_HOME="$cache/xdg-cache" \
    SERVICES=s3 EAGER_SERVICE_LOADING=1 PERSISTENCE=0 \
    GATEWAY_LISTEN="127.0.0.1:$1" GATEWAY_SERVER=hypercorn DNS_ADDRESS=0 \
    OVERRIDE_IN_DOCKER=0 FILESYSTEM_ROOT="$fsroot" \
    SKIP_SSL_CERT_DOWNLOAD=1 DISABLE_EVENTS=1 \
    DEBUG="${ZVF_LOCALSTACK_DEBUG:-0}" \
    "${launcher[@]}" "$ls_py" -m localstack.runtime.main >"$work/localstack.log" 2>&1 </dev/null &
  ls_pid=$!
}

wait_ready() {  # $1 = port; 0 ready, 1 process died, 2 timed out
  "$ls_py" - "$1" "$ls_pid" "$timeout_s" <<'EOF'
import json, os, sys, time, urllib.request
port, pid, limit = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
url = f"http://127.0.0.1:{port}/_localstack/health"
end = time.monotonic() + limit
while time.monotonic() < end:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        sys.exit(1)
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            if json.load(r).get("services", {}).get("s3") in ("running", "available"):
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.1)
sys.exit(2)
EOF
}

t0="$(now)"
ready=""
for attempt in 1 2 3; do
  # (LocalStack says "Ready." even when its gateway could not bind, so check the port first.)
  port="$(free_port "${ZVF_LOCALSTACK_PORT:-0}")" \
    || die "port ${ZVF_LOCALSTACK_PORT:-?} on 127.0.0.1 is in use (ZVF_LOCALSTACK_PORT)"
  start_localstack "$port"
  rc=0; wait_ready "$port" || rc=$?
  if [ "$rc" = 0 ]; then ready=1; break; fi
  keep_log=1
  if [ "$rc" = 2 ]; then die "LocalStack not ready on 127.0.0.1:$port after ${timeout_s} s"; fi
  wait "$ls_pid" 2>/dev/null || true
  ls_pid=""
  say "LocalStack exited during start-up (attempt $attempt, port $port); last log lines:"
  tail -n 15 "$work/localstack.log" >&2 || true
  [ -n "${ZVF_LOCALSTACK_PORT:-}" ] && break
done
[ -n "$ready" ] || die "could not start LocalStack"
keep_log=0
endpoint="http://127.0.0.1:$port"
say "LocalStack S3 ready at $endpoint in $(since "$t0") s (pid $ls_pid)"

export ZVF_TEST_S3_ENDPOINT="$endpoint" ZVF_TEST_S3_ACCESS_KEY=test ZVF_TEST_S3_SECRET_KEY=test

if [ "$mode" = serve ]; then
  say "serving until Ctrl-C. In another shell:"
  say "  export ZVF_TEST_S3_ENDPOINT=$endpoint ZVF_TEST_S3_ACCESS_KEY=test ZVF_TEST_S3_SECRET_KEY=test"
  wait "$ls_pid" || true
  ls_pid=""
  keep_log=1
  die "LocalStack exited"
fi

cd "$repo"
if [ "$smoke" = 1 ]; then
  if ! "$repo_py" "$here/smoke.py"; then
    keep_log=1
    die "smoke check failed against $endpoint; not running pytest"
  fi
fi
[ "$mode" = smoke ] && exit 0

say "running: pytest -m s3 $*"
rc=0
"$repo_py" -m pytest -m s3 "$@" || rc=$?
if [ "$rc" = 5 ]; then say "pytest collected no test marked s3 (exit 5)"; fi
exit "$rc"
