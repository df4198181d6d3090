#!/usr/bin/env python3
"""The instructions redis-server runs per job in each phase of a plain
job's life (bench/script_time.py's life: push, dispatch, pop, finish), for
one build's function library, counted by callgrind.

script_time.py measures Redis time, which on a busy machine (compilers on
the other core, a hyperthread's neighbour) moves by 5% and more from run
to run. Two builds whose scripts send the same commands differ only in the
Lua they run, and an instruction count sees that whatever else the machine
does. So, each build in a redis-server of its own under callgrind:

    valgrind --tool=callgrind --callgrind-out-file=/tmp/cg/cg.%p \\
        redis-server --port 7081 --save '' --appendonly no &
    redis-cli -p 7081 -x function load < old-library.lua
    python3 bench/script_instructions.py 7081 <valgrind pid> 876fe1f19553:armed 7

(the library's text: `redis-cli function list withcode`, from a server
each build's `delayq serve` loaded). Counters are zeroed at each phase's
start and dumped at its end (callgrind_control); the first round warms
up and is left out. Prints, per phase, the least and the mean over the
rounds, per job. The environment is script_time.py's (JOBS, BATCH,
LAYOUT, DELAY, ...). A few tenths of a percent move between runs (the
server's cron, Lua's collector): compare builds run alternately.
"""
import glob
import os
import re
import subprocess
import sys

import script_time as st


def main():
    port, pid, build, rounds = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    version, _, conv = build.partition(":")
    out = os.environ.get("CALLGRIND_DIR", "/tmp/cg")
    r = st.Redis(port)

    def control(flag):
        subprocess.run(["callgrind_control", flag, pid], capture_output=True, check=True)

    def last_total():
        dumps = sorted(glob.glob(f"{out}/cg.{pid}.*"), key=os.path.getmtime)
        text = open(dumps[-1]).read()
        return int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1))

    counts, seen = {p: [] for p in st.PHASES}, [0]
    plain_call = st.Redis.__call__

    def call(self, *args):
        # Each phase starts with CONFIG RESETSTAT (script_time.life).
        if args[:2] == ("CONFIG", "RESETSTAT"):
            control("-z")
        return plain_call(self, *args)

    def phase_end(self):
        control("-d")
        counts[st.PHASES[seen[0] % len(st.PHASES)]].append(last_total())
        seen[0] += 1
        return 0

    st.Redis.__call__ = call
    st.Redis.fcall_usec = phase_end
    for rnd in range(rounds):
        plain_call(r, "FLUSHALL")
        if st.LAYOUT:
            plain_call(r, "SET", "{dq}:layout", st.LAYOUT)
        st.life(r, (version, conv or "trail"), rnd)
    print(f"{version}: instructions per job, least and mean over {rounds - 1} rounds")
    for p in st.PHASES:
        xs = counts[p][1:]
        print(f"{p:9s} {min(xs) / st.JOBS:9.0f} {sum(xs) / len(xs) / st.JOBS:9.0f}")


if __name__ == "__main__":
    main()
