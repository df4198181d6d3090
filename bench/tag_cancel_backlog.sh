#!/usr/bin/env bash
# bench/tag_cancel_backlog.sh BIN REDIS_PORT HTTP_PORT: the Redis time of
# one tag cancel of the 1,000 oldest jobs of a 100,000-job ready backlog
# (SLOWLOG), with the delayq binary BIN serving on HTTP_PORT in front of a
# redis-server it starts on REDIS_PORT (no persistence); needs curl and
# python3. Everything it starts is stopped when it ends.
set -euo pipefail
bin=$1; port=$2; hport=$3
dir=$(mktemp -d)
redis-server --port $port --save '' --appendonly no --dir $dir --daemonize yes --notify-keyspace-events Ex >/dev/null
trap 'redis-cli -p $port shutdown nosave >/dev/null 2>&1; kill $pid 2>/dev/null; rm -rf $dir' EXIT
$bin serve --redis redis://127.0.0.1:$port --listen 127.0.0.1:$hport >/dev/null 2>&1 & pid=$!
for i in $(seq 1 50); do curl -sf http://127.0.0.1:$hport/healthz >/dev/null && break; sleep 0.2; done
python3 - $hport <<'PY'
import json, sys, urllib.request
port = sys.argv[1]
def post(path, body):
    r = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(r).read()
n = 0
for b in range(100):
    jobs = []
    for i in range(1000):
        j = {"id": f"j{n:06d}", "topic": "orders", "body": "x", "delay_ms": 0}
        if n < 1000: j["tags"] = ["promo"]
        jobs.append(j); n += 1
    post("/v1/jobs/batch", {"jobs": jobs})
PY
until [ "$(redis-cli -p $port hget '{dq}:count' ready:orders)" = "100000" ]; do sleep 0.2; done
redis-cli -p $port config set slowlog-log-slower-than 0 >/dev/null; redis-cli -p $port slowlog reset >/dev/null
curl -s -XPOST -H 'Content-Type: application/json' -d '{"limit":1000}' http://127.0.0.1:$hport/v1/tags/promo/cancel | head -c 200; echo
redis-cli -p $port slowlog get 20 | python3 -c '
import sys
lines=[l.strip() for l in sys.stdin]
# entries: id, time, duration, args...; print durations of FCALLs
for i,l in enumerate(lines):
    if l.lower()=="fcall" and "tag_cancel" in lines[i+1]:
        print("tag_cancel script: %s us" % lines[i-1])
'
