#!/usr/bin/env python3
"""`GET /v1/topics`, `/metrics` and the dashboard's topic reads at 100,000
topics against 10 (issue 54): the Redis time of each request (all
commands' usec in INFO commandstats over it, network not counted), its
wall time, and the calls over 2 ms (SLOWLOG) over the whole run. Needs a
`delayq serve` on the redis-server at PORT, its library registered as
VERSION (`redis-cli -p PORT function list | grep library_name`):

    redis-server --port 7072 --save '' --appendonly no --daemonize yes
    target/release/delayq serve --redis redis://127.0.0.1:7072/ --listen 127.0.0.1:7073 &
    python3 bench/topic_pages.py 7072 http://127.0.0.1:7073 VERSION

For each number of topics (TOPICS, default "10,100000"; one delayed job
each, due ten minutes ahead, layout 3, pushed 500 a call by the library's
push), ROUNDS times (default 3; the least Redis time is kept): the first
page of 100 and of 1000, every page of 1000 one after another, one topic
by name (`?topic=`), and a `/metrics` scrape. Then IDLE seconds (default
10) of the server at rest: Redis's CPU (used_cpu_sys + used_cpu_user) in
that time. Ratios are of 100,000 topics to 10, in the same run.
"""
import json
import os
import sys
import time
import urllib.request

from many_topics import load
from script_time import Redis

ROUNDS = int(os.environ.get("ROUNDS", 3))
IDLE = float(os.environ.get("IDLE", 10))
TOPICS = [int(t) for t in os.environ.get("TOPICS", "10,100000").split(",")]


def usec(r):
    total = 0
    for line in r("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            total += int(line.split("usec=")[1].split(",")[0])
    return total


def cpu(r):
    info = dict(
        line.split(":", 1) for line in r("INFO", "cpu").splitlines() if ":" in line
    )
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def get(base, path):
    with urllib.request.urlopen(base + path, timeout=120) as resp:
        body = resp.read()
    return json.loads(body) if path.startswith("/v1") else body


def measured(r, base, paths):
    """Redis us and wall ms of GETs of `paths` one after another, and the
    last reply."""
    before, start = usec(r), time.monotonic()
    reply = None
    for p in paths:
        reply = get(base, p)
    return usec(r) - before, (time.monotonic() - start) * 1000, reply


def all_pages(r, base):
    before, start, pages, cursor = usec(r), time.monotonic(), 0, None
    while True:
        v = get(base, "/v1/topics" + (f"?cursor={cursor}" if cursor else ""))
        pages += 1
        cursor = v.get("next_cursor")
        if not cursor:
            return usec(r) - before, (time.monotonic() - start) * 1000, pages


def main():
    port, base, version = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    r = Redis(port)
    r("CONFIG", "SET", "slowlog-log-slower-than", 2000)
    r("CONFIG", "SET", "slowlog-max-len", 100000)
    results = {}
    for topics in TOPICS:
        load(r, (version, "trail"), topics)
        get(base, "/v1/topics?limit=1")
        r("SLOWLOG", "RESET")
        rows = {}
        for _ in range(ROUNDS):
            for name, paths in [
                ("first page of 100", ["/v1/topics?limit=100"]),
                ("first page of 1000", ["/v1/topics"]),
                ("one topic by name", ["/v1/topics?topic=t-000005"]),
                ("/metrics", ["/metrics"]),
            ]:
                us, ms, _ = measured(r, base, paths)
                rows.setdefault(name, []).append((us, ms, 1))
            rows.setdefault("every page of 1000", []).append(all_pages(r, base))
        slow = r("SLOWLOG", "GET", -1)
        c0 = cpu(r)
        time.sleep(IDLE)
        idle = (cpu(r) - c0) / IDLE * 100
        results[topics] = ({k: min(v) for k, v in rows.items()}, slow, idle)
        longest = max((e[2] for e in slow), default=0)
        print(
            f"{topics:6d} topics: {len(slow)} calls over 2 ms (longest {longest / 1000:.1f} ms); "
            f"idle Redis {idle:.2f}% of a core"
        )
        for name, (us, ms, pages) in results[topics][0].items():
            extra = f", {pages} pages" if pages > 1 else ""
            print(f"  {name:20s} Redis {us / 1000:8.2f} ms, wall {ms:8.1f} ms{extra}")
    if len(TOPICS) == 2:
        (few, many) = TOPICS
        print(f"ratios {many} topics / {few}:")
        for name in results[few][0]:
            a, b = results[many][0][name], results[few][0][name]
            print(f"  {name:20s} Redis {a[0] / max(b[0], 1):6.1f}x")
        print(f"  idle Redis cost       {results[many][2] / max(results[few][2], 1e-9):6.2f}x")


if __name__ == "__main__":
    main()
