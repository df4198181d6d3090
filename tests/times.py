#!/usr/bin/env python3
"""The suite's time by module, from the file DELAYQ_TEST_TIMES names.

The suite appends `<start|end> <unix ms> <test>` when a test's
redis-server starts and stops (tests/suite/redis_server.rs). A test runs
from its first server's start to its last one's stop; a module's time is
the sum of its tests' (they overlap: libtest runs several at once). Tests
that start no redis-server are not in the file.

    python3 tests/times.py FILE [TITLE]
"""
import sys
from collections import defaultdict

path = sys.argv[1]
title = sys.argv[2] if len(sys.argv) > 2 else "the suite"
starts, ends = {}, {}
with open(path) as f:
    for line in f:
        parts = line.rstrip("\n").split(" ", 2)
        if len(parts) != 3 or not parts[2]:
            continue
        what, ms, test = parts[0], int(parts[1]), parts[2]
        if what == "start":
            starts[test] = min(starts.get(test, ms), ms)
        elif what == "end":
            ends[test] = max(ends.get(test, ms), ms)
tests = {t: (ends[t] - starts[t]) / 1000 for t in starts if t in ends}
if not tests:
    print(f"time by module ({title}): no test recorded")
    sys.exit(0)
modules = defaultdict(list)
for test, secs in tests.items():
    modules[test.rsplit("::", 1)[0] if "::" in test else "(top)"].append((secs, test))
wall = (max(ends.values()) - min(starts.values())) / 1000
print(f"time by module ({title}; {len(tests)} tests, {wall:.0f} s from first start to last stop;")
print("a module's seconds are its tests' summed, which ran several at once):")
print(f"{'seconds':>8} {'tests':>5}  {'module':<34} slowest test")
for name, runs in sorted(modules.items(), key=lambda m: -sum(s for s, _ in m[1])):
    secs, slowest = max(runs)
    total = sum(s for s, _ in runs)
    print(f"{total:8.1f} {len(runs):5}  {name:<34} {secs:.1f} s {slowest.rsplit('::', 1)[-1]}")
