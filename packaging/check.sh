#!/usr/bin/env bash
# The Debian package as an operator meets it: build it with cargo-deb,
# install it with dpkg, check the systemd unit with `systemd-analyze verify`,
# run the installed binary with the unit's own command line and environment
# twice (against a redis-server of our own as DELAYQ_REDIS, then the unit's
# default: no DELAYQ_REDIS, delayq's private redis-server in the data
# directory, as an unprivileged user), push and pop through each with curl,
# stop it, and remove the package. Nothing is left running or installed,
# also when a step fails. Needs root (dpkg); CI runs it after ./dev test.
#
# Not checked here, as it needs systemd as PID 1 (a container has none):
# the user DynamicUser makes, the StateDirectory systemd creates for it,
# ProtectSystem and the rest of the sandboxing, and the SystemCallFilter
# (`systemd-analyze verify` reads the unit, it does not run it). The
# default run stands in with a user of no privileges (nobody, no groups,
# no new privileges, umask 0077) and a data directory of mode 0700 owned
# by it.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "package-check: $*" >&2; }
fail() {
  say "FAILED: $*"
  exit 1
}

[ "$(id -u)" -eq 0 ] || fail "needs root (dpkg -i); run it with sudo"
if dpkg-query -W -f='${Status}' delayq 2>/dev/null | grep -q 'install ok installed'; then
  fail "a delayq package is installed already; this check would replace and remove it"
fi

missing=()
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]} from the distribution's packages"
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi
command -v cargo-deb >/dev/null 2>&1 || cargo install cargo-deb --locked

work=$(mktemp -d)
delayq_pid=""
redis_pid=""
installed=""
cleanup() {
  local rc=$?
  if [ -n "$delayq_pid" ] && kill -0 "$delayq_pid" 2>/dev/null; then
    kill -KILL "$delayq_pid" 2>/dev/null || true
    wait "$delayq_pid" 2>/dev/null || true
  fi
  # A delayq killed leaves its private redis-server running.
  if [ -S "$work/private/redis.sock" ]; then
    redis-cli -s "$work/private/redis.sock" shutdown nosave >/dev/null 2>&1 || true
  fi
  if [ -n "$redis_pid" ] && kill -0 "$redis_pid" 2>/dev/null; then
    kill -KILL "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  if [ -n "$installed" ]; then
    dpkg --purge delayq >/dev/null 2>&1 || true
  fi
  if [ $rc -ne 0 ] && [ -f "$work/delayq.log" ]; then
    say "delayq's log:"
    tail -n 40 "$work/delayq.log" >&2 || true
  fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Build. The release build takes minutes on a small machine.
started=$(date +%s)
deb=$(cargo deb --output target/debian/ | tail -n 1)
[ -f "$deb" ] || fail "cargo deb did not name a package file (got: $deb)"
say "built $deb ($(du -h "$deb" | cut -f1)) in $(($(date +%s) - started)) s"

installed=yes
dpkg -i "$deb"
[ -x /usr/bin/delayq ] || fail "/usr/bin/delayq not installed"
say "installed binary: $(du -h /usr/bin/delayq | cut -f1)"
unit=$(dpkg -L delayq | grep '/systemd/system/delayq\.service$' | head -n 1)
[ -n "$unit" ] || fail "the package has no delayq.service"

# Configuration: both files are conffiles; the secrets file is root's only.
conffiles=$(dpkg-query -W -f='${Conffiles}' delayq)
for f in /etc/delayq/delayq.toml /etc/delayq/delayq.env; do
  echo "$conffiles" | grep -q " $f " || fail "$f is not a conffile"
done
mode=$(stat -c '%a %U' /etc/delayq/delayq.env)
[ "$mode" = "600 root" ] || fail "/etc/delayq/delayq.env is $mode, not 600 root"

# The unit: systemd's own check, then the settings that make it a service.
systemd-analyze verify "$unit"
for line in DynamicUser=yes StateDirectory=delayq NoNewPrivileges=yes \
  ProtectSystem=strict ProtectHome=yes PrivateTmp=yes Restart=on-failure \
  Environment=DELAYQ_DATA_DIR=/var/lib/delayq \
  EnvironmentFile=/etc/delayq/delayq.env; do
  grep -qx "$line" "$unit" || fail "$unit lacks $line"
done

# The delayq started as $delayq_pid (its stdout in $work/stdout): it
# listens, answers /healthz with the installed version, refuses a push
# without the token, pushes, pops and finishes a job, and stops cleanly on
# SIGTERM, as systemd stops it.
exercise() {
  local what=$1 addr="" base code health want popped lease status auth
  for _ in $(seq 1 600); do
    addr=$(sed -n 's/^delayq listening on //p' "$work/stdout" || true)
    [ -n "$addr" ] && break
    kill -0 "$delayq_pid" 2>/dev/null || fail "delayq exited at start ($what)"
    sleep 0.1
  done
  [ -n "$addr" ] || fail "delayq did not listen within 60 s ($what)"
  base="http://$addr"
  say "the unit's command line serves $base ($what): $exec_start"

  health=$(curl -fsS "$base/healthz")
  want=$(/usr/bin/delayq --version | sed 's/^delayq //')
  echo "$health" | grep -q "\"version\":\"$want\"" || fail "/healthz says $health, not version $want"

  auth=(-H "Authorization: Bearer $token")
  code=$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/jobs" -d '{"topic":"pkg-check"}')
  [ "$code" = 401 ] || fail "a push without the token got $code, not 401"
  code=$(curl -s -o "$work/push" -w '%{http_code}' "${auth[@]}" "$base/v1/jobs" \
    -d '{"id":"pkg-1","topic":"pkg-check","body":"hello from the package"}')
  [ "$code" = 201 ] || fail "push got $code: $(cat "$work/push")"
  popped=$(curl -fsS "${auth[@]}" "$base/v1/pop" -d '{"topics":["pkg-check"],"wait_ms":10000}')
  echo "$popped" | grep -q '"id":"pkg-1"' || fail "pop got $popped"
  echo "$popped" | grep -q '"body":"hello from the package"' || fail "pop got $popped"
  lease=$(echo "$popped" | grep -o '"token":"[^"]*"' | head -n 1 | cut -d'"' -f4)
  code=$(curl -s -o /dev/null -w '%{http_code}' "${auth[@]}" "$base/v1/jobs/pkg-1/finish" \
    -d "{\"token\":\"$lease\"}")
  [ "$code" = 204 ] || fail "finish got $code"
  say "pushed, popped and finished a job ($what)"

  # Stop as systemd does (SIGTERM): a clean exit.
  kill -TERM "$delayq_pid"
  status=0
  wait "$delayq_pid" || status=$?
  delayq_pid=""
  [ "$status" -eq 0 ] || fail "delayq exited with $status on SIGTERM ($what)"
}

# Run the unit's command line with the unit's environment, as systemd would,
# against a redis-server of our own (on a socket: no port to race for).
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
[ -n "$exec_start" ] || fail "no ExecStart in $unit"
redis-server --port 0 --unixsocket "$work/redis.sock" --dir "$work" \
  --save "" --appendonly no >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 100); do
  redis-cli -s "$work/redis.sock" ping 2>/dev/null | grep -q PONG && break
  sleep 0.1
done
redis-cli -s "$work/redis.sock" ping | grep -q PONG || fail "redis-server did not start"

mkdir -m 700 "$work/state"
: >"$work/stdout"
token=check-$RANDOM$RANDOM
(
  set -a
  # The unit's Environment= lines, then its EnvironmentFile, as systemd
  # reads them; then what stands in for this machine: our Redis, a free
  # port, a state directory, a token.
  eval "$(sed -n 's/^Environment=//p' "$unit")"
  # shellcheck disable=SC1091
  . /etc/delayq/delayq.env
  [ "$DELAYQ_DATA_DIR" = /var/lib/delayq ] || exit 3
  DELAYQ_DATA_DIR=$work/state
  DELAYQ_REDIS=redis+unix://$work/redis.sock
  DELAYQ_LISTEN=127.0.0.1:0
  DELAYQ_AUTH_TOKEN=$token
  set +a
  cd "$work/state"
  # shellcheck disable=SC2086 # the unit's command line, split as systemd does
  exec $exec_start
) >"$work/stdout" 2>"$work/delayq.log" &
delayq_pid=$!

exercise "DELAYQ_REDIS: a redis-server of our own"
kill -TERM "$redis_pid"
wait "$redis_pid" || true
redis_pid=""

# The unit's default: DELAYQ_REDIS unset, so delayq starts its private
# redis-server (the package's recommended redis-server) on a socket in the
# data directory, as the unprivileged user the unit runs as.
private=$work/private
mkdir -m 700 "$private"
chown nobody:nogroup "$private"
chmod 711 "$work" # the user reaches its directory, lists nothing else
: >"$work/stdout"
(
  set -a
  eval "$(sed -n 's/^Environment=//p' "$unit")"
  # shellcheck disable=SC1091
  . /etc/delayq/delayq.env
  [ -z "${DELAYQ_REDIS:-}" ] || exit 3
  DELAYQ_DATA_DIR=$private
  DELAYQ_LISTEN=127.0.0.1:0
  DELAYQ_AUTH_TOKEN=$token
  set +a
  cd "$private"
  umask 0077
  # shellcheck disable=SC2086 # the unit's command line, split as systemd does
  exec setpriv --reuid="$(id -u nobody)" --regid="$(id -g nobody)" --clear-groups \
    --no-new-privs $exec_start
) >"$work/stdout" 2>"$work/delayq.log" &
delayq_pid=$!
exercise "no DELAYQ_REDIS: its private redis-server, as nobody"
grep -q "private redis-server started" "$work/delayq.log" ||
  fail "delayq did not say it started its private redis-server"
[ -z "$(find "$private" ! -user nobody)" ] ||
  fail "files in the data directory not the unit's user's: $(find "$private" ! -user nobody)"
if redis-cli -s "$private/redis.sock" ping >/dev/null 2>&1; then
  fail "the private redis-server outlived delayq"
fi

dpkg -r delayq
[ ! -e /usr/bin/delayq ] || fail "dpkg -r left /usr/bin/delayq"
[ ! -e "$unit" ] || fail "dpkg -r left $unit"
dpkg --purge delayq
installed=""
[ ! -e /etc/delayq/delayq.env ] || fail "dpkg --purge left /etc/delayq/delayq.env"
say "ok: the package built, installed, served a push and a pop on a Redis of its own and on its private one as an unprivileged user, stopped cleanly and was removed"
