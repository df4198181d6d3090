#!/usr/bin/env python3
"""Layout 3 with many topics (issue 49): the Redis time of the sweep's
arming pass and of the all-topics listing (`GET /v1/schedule`), for
several builds of delayq's function library side by side in one
redis-server (registered by `delayq serve`, as bench/script_time.py's
header says), e.g.

    python3 bench/many_topics.py 7070 before=c0ffee123456 after=feed12345678

For each number of topics (TOPICS, default "2000,30000"; one delayed job
each, due ten minutes ahead, pushed with the first build's push) and each
build, ROUNDS times (default 3; the builds' order alternates): one arming
pass from now as the leader's sweep makes it (dispatch calls of LIMIT,
default 1000 as `dispatch_batch`, an hour's horizon, until the watermark
holds no cursor), then PAGES (default 20) first pages of 1 of every
topic's delayed jobs. A call's time is `cmdstat_fcall`'s usec over it (the
script's own run time, its commands included; no network). Prints, per
build: of the least disturbed pass (least Redis time in all) its calls,
median and longest call and its Redis time in all; of all the pages the
median and longest.
"""
import os
import sys

from script_time import Redis, fcall, push

LIMIT = int(os.environ.get("LIMIT", 1000))
PAGES = int(os.environ.get("PAGES", 20))
ROUNDS = int(os.environ.get("ROUNDS", 3))
TOPICS = [int(t) for t in os.environ.get("TOPICS", "2000,30000").split(",")]


def timed(r, cmd):
    r("CONFIG", "RESETSTAT")
    reply = r(*cmd)
    return r.fcall_usec(), reply


def load(r, build, topics):
    r("FLUSHALL")
    r("SET", "{dq}:layout", "3 held")
    due = int(r("TIME")[0]) * 1000 + 600_000
    for start in range(0, topics, 500):
        args = []
        for i in range(start, min(start + 500, topics)):
            args += [f"t-{i:06d}", f"t-{i:06d}", "x" * 64, 30000, 0, due + i, "", 0, "replace", ""]
        push(r, build, args)


def arming_pass(r, build):
    s, us = r("TIME")
    r("SET", "{dq}:armed", int(s) * 1000 + int(us) // 1000)
    times = []
    while True:
        t, _ = timed(r, fcall(build, "dispatch", [LIMIT, 1000, 86_400_000, 3_600_000, 0]))
        times.append(t)
        if ":" not in r("GET", "{dq}:armed"):
            return times
        assert len(times) < 100_000, "the pass never ends"


def pages(r, build):
    times = []
    for _ in range(PAGES):
        t, reply = timed(r, fcall(build, "list", ["schedule", "", "delayed", "-inf", "", 1, 2000]))
        assert reply[4] == "t-000000", f"first page {reply}"
        times.append(t)
    return sorted(times)


def main():
    port = int(sys.argv[1])
    builds = {}
    for a in sys.argv[2:]:
        name, spec = a.split("=")
        version, _, conv = spec.partition(":")
        builds[name] = (version, conv or "trail")
    r = Redis(port)
    for topics in TOPICS:
        load(r, next(iter(builds.values())), topics)
        passes = {n: [] for n in builds}
        listed = {n: [] for n in builds}
        names = list(builds)
        for rnd in range(ROUNDS):
            for name in names if rnd % 2 == 0 else names[::-1]:
                passes[name].append(arming_pass(r, builds[name]))
                listed[name] += pages(r, builds[name])
        for name in names:
            # The least disturbed pass (least Redis time in all).
            arm = min(passes[name], key=sum)
            mid = sorted(arm)[len(arm) // 2]
            page = sorted(listed[name])
            print(
                f"{topics:6d} topics {name:8s} arming pass (limit {LIMIT}): {len(arm)} calls, "
                f"median {mid / 1000:.2f} ms, longest {max(arm) / 1000:.2f} ms, "
                f"{sum(arm) / 1000:.1f} ms in all; "
                f"page of 1: median {page[len(page) // 2]} us, longest {page[-1]} us"
            )


if __name__ == "__main__":
    main()
