#!/usr/bin/env python3
"""A burst's dispatch calls, one by one (issue 54): how long each holds
Redis and how many jobs it moves, for several builds of delayq's function
library side by side in one redis-server (registered by `delayq serve`,
as bench/script_time.py's header says), e.g.

    python3 bench/dispatch_calls.py 7074 before=d49665c56788 after=544f2dcbedd3:follow

For each number of topics (TOPICS, default "1,100,20000") and each build,
ROUNDS times (default 2; the builds' order alternates): N jobs (default
20,000; 64-byte bodies, layout 3) pushed 128 a call, due over one second
(so about 20 a millisecond tie) from LEAD ms on (default 3000), then, once all are due, sweep calls until
one moves nothing. A build marked `:follow` gets the limit the service's
sweep gives it (`next_limit` in src/loops/sweep.rs: a quarter of 1,000
to begin, or a sixteenth with `:follow16` as the sweep does since a
call's tail counts in its time, down to what a call moved after one cut
short, doubling after a full one); the others 1,000 a call, as `dispatch_batch`. A call's time is
`cmdstat_fcall`'s usec over it (its own run, network not counted). Prints
per build: calls, median and longest call, jobs a call, Redis us a job.
"""
import os
import sys
import time

from script_time import Redis, fcall, push

N = int(os.environ.get("N", 20000))
ROUNDS = int(os.environ.get("ROUNDS", 2))
TOPICS = [int(t) for t in os.environ.get("TOPICS", "1,100,20000").split(",")]
BATCH = 1000
# How long before the first due time the pushes begin (ms): a job pushed
# after its due time is ready at its push, not the sweep's. A busy machine
# or a build whose push calls stop early needs more than the default.
LEAD = int(os.environ.get("LEAD", 3000))


def next_limit(limit, moved, left):
    if moved * 4 >= limit * 3:
        return min(limit * 2, BATCH)
    if left and moved * 2 < limit:
        return min(max(moved + moved // 4, 16), BATCH)
    return limit


def burst(r, build, follow, topics):
    r("FLUSHALL")
    r("SET", "{dq}:layout", "3 held")
    due = int(r("TIME")[0]) * 1000 + LEAD
    for start in range(0, N, 128):
        args = []
        for i in range(start, min(start + 128, N)):
            args += [f"j-{i:07d}", f"t-{i % topics:06d}", "x" * 64, 30000, 0,
                     due + i * 1000 // N, "", 0, "replace", ""]
        push(r, build, args)
    while int(r("TIME")[0]) * 1000 < due + 1500:
        time.sleep(0.1)
    calls, limit = [], BATCH // follow if follow else int(os.environ.get("LIMIT", BATCH))
    while True:
        r("CONFIG", "RESETSTAT")
        rep = r(*fcall(build, "dispatch", [limit, 1000, 86_400_000, 3_600_000, 0]))
        us = r.fcall_usec()
        if rep[2] == 0:
            return calls
        calls.append((us, rep[2]))
        if follow:
            left = rep[3] >= 0 and rep[3] * 1000 <= rep[1]
            limit = next_limit(limit, rep[2], left)


def main():
    port = int(sys.argv[1])
    builds = {}
    for a in sys.argv[2:]:
        name, spec = a.split("=")
        version, _, mode = spec.partition(":")
        # ":follow" starts at a quarter batch (the sweep before issue 54's
        # tail counting), ":follow16" at a sixteenth (after it).
        builds[name] = ((version, "trail"), {"follow": 4, "follow16": 16}.get(mode, 0))
    r = Redis(port)
    names = list(builds)
    for topics in TOPICS:
        runs = {n: [] for n in names}
        for rnd in range(ROUNDS):
            for name in names if rnd % 2 == 0 else names[::-1]:
                runs[name].append(burst(r, *builds[name], topics))
        for name in names:
            for calls in runs[name]:
                times = sorted(t for t, _ in calls)
                moved = sum(m for _, m in calls)
                print(
                    f"{topics:6d} topics {name:8s}: {len(calls):4d} calls, median {times[len(times) // 2] / 1000:.2f} ms, "
                    f"longest {times[-1] / 1000:.2f} ms, {moved / len(calls):.0f} jobs a call, "
                    f"{sum(times) / moved:.2f} us a job"
                )


if __name__ == "__main__":
    main()
