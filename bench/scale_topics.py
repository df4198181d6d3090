#!/usr/bin/env python3
"""Many topics and many groups with the service running (issue 54, goal 1):
every Redis call over 2 ms (SLOWLOG over the whole run: loading, firing,
the requests, the serve's own loops), the Redis time of each request the
dashboard, the CLI and a scraper make, and the idle Redis cost, for

- 10 topics with one job each (the peer),
- TOPICS topics (default 100,000) with one job each,
- one topic with GROUPS groups (default 1,000,000), one job each,

each job due within WINDOW seconds (default 10) of the load's end, so the
serve fires them all while the run watches. Needs a `delayq serve` on the
redis-server at PORT with its library registered as VERSION
(`redis-cli -p PORT function list | grep library_name`):

    redis-server --port 7072 --save '' --appendonly no --daemonize yes
    target/release/delayq serve --redis redis://127.0.0.1:7072/ --listen 127.0.0.1:7073 &
    python3 bench/scale_topics.py 7072 http://127.0.0.1:7073 VERSION

"Calls over 2 ms" are the top-level commands SLOWLOG lists (a script
call counts once; Redis 7 also lists the commands a script ran, counted
apart). A request's Redis time is every command's usec in INFO commandstats over
it (network not counted; whatever the serve's loops ran meanwhile is in
it too, so the least of ROUNDS, default 3, is kept). Idle: Redis's CPU
(used_cpu_sys + used_cpu_user) over IDLE seconds (default 20) once every
job is ready, as a share of a core. The overview's `/metrics?redis=false`
is the whole page on a build before it (the query was not read): what the
overview cost then.
"""
import json
import os
import sys
import time
import urllib.parse

from script_time import Redis, fcall, push
from topic_pages import cpu, get, usec

ROUNDS = int(os.environ.get("ROUNDS", 3))
IDLE = float(os.environ.get("IDLE", 20))
WINDOW = float(os.environ.get("WINDOW", 10))
TOPICS = int(os.environ.get("TOPICS", 100_000))
GROUPS = int(os.environ.get("GROUPS", 1_000_000))
PUSH = int(os.environ.get("PUSH", 128))
SCENARIOS = os.environ.get("SCENARIOS", "few,topics,groups").split(",")


def load(r, build, jobs):
    """Pushes `jobs` ((id, topic, group) each) PUSH a call (default 128, as
    the library sends them), due over WINDOW
    seconds after a lead of a few seconds past the load's estimated end."""
    r("SLOWLOG", "RESET")
    now = int(r("TIME")[0]) * 1000
    lead = 5000 + len(jobs) // 50  # the load runs at about 50,000 jobs/s
    due0 = now + lead
    step = WINDOW * 1000 / max(len(jobs), 1)
    for start in range(0, len(jobs), PUSH):
        args = []
        for i in range(start, min(start + PUSH, len(jobs))):
            job_id, topic, group = jobs[i]
            extra = json.dumps({"group": group}) if group else ""
            args += [job_id, topic, "x" * 64, 30000, 0, int(due0 + i * step), "", 0, "replace", extra]
        push(r, build, args)
    left = due0 + WINDOW * 1000 - int(r("TIME")[0]) * 1000
    return due0 + WINDOW * 1000, left


def ready_all(r, base, total, last_due):
    """Waits (bounded) until `total` jobs are ready; the seconds it took
    after the last one fell due."""
    while int(r("TIME")[0]) * 1000 < last_due:
        time.sleep(0.2)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        ready = sum(t["ready"] for t in topic_pages(base))
        if ready >= total:
            return int(r("TIME")[0]) - last_due / 1000
        time.sleep(1)
    raise SystemExit(f"only {ready} of {total} jobs ready after 10 minutes")


def topic_pages(base):
    cursor, out = None, []
    while True:
        v = get(base, "/v1/topics" + (f"?cursor={urllib.parse.quote(cursor)}" if cursor else ""))
        out += list(v["topics"].values())
        cursor = v.get("next_cursor")
        if not cursor:
            return out


def requests(topic, group):
    t = urllib.parse.quote(topic, safe="")
    out = [
        ("overview: topics page of 50", "/v1/topics?limit=50"),
        ("overview: upcoming 20", "/v1/schedule?limit=20"),
        ("overview: throughput", "/v1/stats/throughput?resolution=minute"),
        ("overview: /metrics?redis=false", "/metrics?redis=false"),
        ("scrape: /metrics", "/metrics"),
        ("topic page: its counts", f"/v1/topics?topic={t}"),
        ("topic page: ready 50", f"/v1/topics/{t}/jobs?state=ready&limit=50"),
        ("topic page: delayed 50", f"/v1/topics/{t}/jobs?state=delayed&limit=50"),
        ("topic page: dead 50", f"/v1/topics/{t}/jobs?state=dead&limit=50"),
        ("topic page: throughput", f"/v1/stats/throughput?resolution=minute&topic={t}"),
        ("topic page: groups 50", f"/v1/topics/{t}/groups?limit=50"),
        ("schedule page of 50", "/v1/schedule?limit=50"),
        ("instances", "/v1/instances"),
        ("webhooks", "/v1/webhooks"),
        ("recurring", "/v1/recurring"),
    ]
    if group:
        g = urllib.parse.quote(group, safe="")
        out.append(("one group", f"/v1/topics/{t}/groups/{g}"))
    return out


def measure(r, base, topic, group):
    rows = {}
    for _ in range(ROUNDS):
        for name, path in requests(topic, group):
            before, start = usec(r), time.monotonic()
            get(base, path)
            rows.setdefault(name, []).append((usec(r) - before, (time.monotonic() - start) * 1000))
    return {k: min(v) for k, v in rows.items()}


def scenario(r, base, build, name, jobs, topic, group):
    r("FLUSHALL")
    r("SET", "{dq}:layout", "3 held")
    get(base, "/v1/topics?limit=1")
    t0 = time.monotonic()
    last_due, left = load(r, build, jobs)
    loaded = time.monotonic() - t0
    late = ready_all(r, base, len(jobs), last_due)
    rows = measure(r, base, topic, group)
    c0 = cpu(r)
    time.sleep(IDLE)
    idle = (cpu(r) - c0) / IDLE * 100
    slow = r("SLOWLOG", "GET", -1)
    print(f"\n== {name}: {len(jobs)} jobs loaded in {loaded:.1f} s "
          f"({left / 1000:.1f} s before the last fell due); all ready {late:.0f} s after it")
    print(f"   idle Redis {idle:.3f}% of a core")
    # Redis 7 logs a script's own commands too (client "?:0"): their time
    # is in the script call's.
    inner = [e for e in slow if e[4] == "?:0"]
    slow = [e for e in slow if e[4] != "?:0" and e[3][0].upper() != "SLOWLOG"]
    by_cmd = {}
    for e in slow:
        cmd = e[3][0].upper() + (" " + e[3][1] if e[3][0].upper() in ("FCALL", "EVALSHA") else "")
        n, longest = by_cmd.get(cmd, (0, 0))
        by_cmd[cmd] = (n + 1, max(longest, e[2]))
    print(f"   commands inside scripts over 2 ms: {len(inner)} (in the calls below)")
    print(f"   calls over 2 ms: {len(slow)}" + "".join(
        f"\n     {c}: {n}, longest {l / 1000:.1f} ms" for c, (n, l) in sorted(by_cmd.items(), key=lambda kv: -kv[1][1])))
    for k, (us, ms) in rows.items():
        print(f"   {k:32s} Redis {us / 1000:8.2f} ms, wall {ms:8.1f} ms")
    return rows, idle, len(slow)


def main():
    port, base, version = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    r = Redis(port)
    r("CONFIG", "SET", "slowlog-log-slower-than", 2000)
    r("CONFIG", "SET", "slowlog-max-len", 100000)
    build = (version, "trail")
    results = {}
    if "few" in SCENARIOS:
        jobs = [(f"t-{i:06d}", f"t-{i:06d}", None) for i in range(10)]
        results["few"] = scenario(r, base, build, "10 topics, one job each", jobs, "t-000005", None)
    if "topics" in SCENARIOS:
        jobs = [(f"t-{i:06d}", f"t-{i:06d}", None) for i in range(TOPICS)]
        results["topics"] = scenario(r, base, build, f"{TOPICS} topics, one job each", jobs, "t-000005", None)
    if "groups" in SCENARIOS:
        jobs = [(f"g-{i:07d}", "grouped", f"g-{i:07d}") for i in range(GROUPS)]
        results["groups"] = scenario(r, base, build, f"one topic, {GROUPS} groups, one job each", jobs, "grouped", "g-0000005")
    if "few" in results:
        few = results["few"]
        for k in ("topics", "groups"):
            if k in results:
                print(f"\nidle Redis, {k} / 10 topics: {results[k][1] / max(few[1], 1e-9):.2f}x")


if __name__ == "__main__":
    main()
