#!/usr/bin/env python3
"""Redis time of each script in a plain job's life, for several builds of
delayq's function library side by side in one redis-server.

Each build registers its library as `delayq_<version>` when `delayq serve`
starts, and libraries of different builds live side by side. So:

    redis-server --port 7070 --save '' --appendonly no --daemonize yes
    timeout 4 OLD/target/release/delayq serve --redis redis://127.0.0.1:7070/ --listen 127.0.0.1:0
    timeout 4 NEW/target/release/delayq serve --redis redis://127.0.0.1:7070/ --listen 127.0.0.1:0
    redis-cli -p 7070 function list | grep -A1 library_name
    python3 bench/script_time.py 7070 300 before=876fe1f19553:lead after=215a1cf8bd62

(876fe1f19553 is 5956616's library, 215a1cf8bd62 that of 8e7d195.) Every
round flushes the data, then for each build in turn (the order alternates
between rounds): JOBS plain jobs (default 400; 36-char ids, 64-byte
bodies) pushed BATCH a call (default 50), dispatched (the sweep), popped
BATCH a call and finished with their lease tokens BATCH a call. The
environment sets JOBS, BATCH, LAYOUT (the storage layout the round runs
in, e.g. 3), DISPATCH (sweep, or events: a dispatch call per job), DELAY
(ms, default 0: every job of a batch due in the same ms, a tie) and STEP
(ms added to the delay per job, default 0; 1: every job its own ms). A phase's time is
`cmdstat_fcall`'s usec over it (the scripts' own run time, commands inside
included; no network, no fsync), per job. The figure per build is the
minimum over the rounds (the least disturbed by anything else on the
machine), and ratios are to the first build named.

Call conventions (the part after the colon):
  lead   the deadline right after the key prefix, 9 push values per job,
         7 values per popped job (builds before the event stream, such as
         5956616)
  trail9 deadline and events setting last, 10 push values per job, 9 values
         per popped job (898bbeb)
  trail  as trail9, but a pop reply has its job count after the header,
         7 values per job, then trace context only for jobs that have it
         (the default)
  again  as trail, with the `again` flag before the job count (builds
         that leave stale entries in ready lists, such as ee6a84e)
  armed  as again, and the dispatch takes a trigger horizon (0 here: it
         arms none) before the waiters' count (builds with trigger keys
         within a horizon, such as f19a454)
  result as armed, and the finish (remove) takes a result retention
         after the windows and 4 values per job, the last its result (""
         here: none; builds with results, issue 53)
"""
import os
import socket
import sys
import time

JOBS, BATCH = int(os.environ.get("JOBS", 400)), int(os.environ.get("BATCH", 50))
# The storage layout every round runs in ({dq}:layout after each flush;
# unset: none, which builds that know layouts read as layout 1). Builds
# from before layouts ignore it.
LAYOUT = os.environ.get("LAYOUT")
# How the jobs fall due: "sweep" (default), one dispatch call that finds
# them all, or "events", one dispatch call per job naming its id, as the
# expired-event subscriber makes them (builds with the armed convention).
DISPATCH = os.environ.get("DISPATCH", "sweep")
# Each job's delay (ms): DELAY + STEP * its number.
DELAY, STEP = int(os.environ.get("DELAY", 0)), int(os.environ.get("STEP", 0))
PHASES = ("push", "dispatch", "pop", "finish")


class Redis:
    """A minimal RESP client: enough for FCALL, INFO and FLUSHALL."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.rd = self.sock.makefile("rb")

    @staticmethod
    def encode(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def read(self):
        line = self.rd.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.rd.read(n + 2)[:-2].decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")

    def pipeline(self, cmds):
        self.sock.sendall(b"".join(self.encode(c) for c in cmds))
        return [self.read() for _ in cmds]

    def __call__(self, *args):
        return self.pipeline([args])[0]

    def fcall_usec(self):
        for line in self("INFO", "commandstats").splitlines():
            if line.startswith("cmdstat_fcall:"):
                return int(line.split("usec=")[1].split(",")[0])
        return 0


def fcall(build, script, args):
    version, conv = build
    head = ["FCALL", f"dq_{script}_{version}", 1, "{dq}:schedule", "{dq}:"]
    if conv == "lead":
        return head + [0] + args
    return head + args + [0, 0]


def push(r, build, args, per_job=10):
    """One push call of many jobs (`per_job` arguments each, no dedup), and
    another for the jobs after the last a call pushed when it ran out of
    time (PARTIAL, status 8, from issue 54 on: its results the first
    jobs', three fields each)."""
    while args:
        reply = r(*fcall(build, "push", args))
        if reply[0] != 8:
            return
        args = args[(len(reply) - 1) // 3 * per_job :]


def life(r, build, rnd):
    """One plain life of JOBS jobs: Redis time per job of each phase."""
    version, conv = build
    extra = [] if conv == "lead" else [""]
    per_job = 7 if conv == "lead" else 9
    out = {}

    def phase(name, cmds):
        r("CONFIG", "RESETSTAT")
        replies = r.pipeline(cmds)
        out[name] = r.fcall_usec() / JOBS
        return replies

    pushes = []
    for start in range(0, JOBS, BATCH):
        args = []
        for i in range(start, start + BATCH):
            job_id = f"{rnd:08d}-aaaa-bbbb-cccc-{i:012d}"
            args += [job_id, "orders", "x" * 64, 30000, DELAY + STEP * i, -1, "", 0, "replace"] + extra
        pushes.append(fcall(build, "push", args))
    phase("push", pushes)
    # Delays count from the next ms: all due after this.
    time.sleep(0.005 + (DELAY + STEP * JOBS) / 1000)
    horizon = [0] if conv in ("armed", "result") else []
    if DISPATCH == "events":
        ids = [f"{rnd:08d}-aaaa-bbbb-cccc-{i:012d}" for i in range(JOBS)]
        phase("dispatch", [fcall(build, "dispatch", [1, 1000, 86400000] + horizon + [0, i]) for i in ids])
    else:
        # Calls until one moves nothing (from issue 54 on, a call stops
        # after about a millisecond).
        r("CONFIG", "RESETSTAT")
        while r(*fcall(build, "dispatch", [1000, 1000, 86400000] + horizon + [0]))[2] > 0:
            pass
        out["dispatch"] = r.fcall_usec() / JOBS
    pops = [fcall(build, "pop", [BATCH, 1 << 20, f"n{k}", "", "orders"]) for k in range(JOBS // BATCH)]
    finishes, got = [], 0
    for reply in phase("pop", pops):
        if conv in ("trail", "again", "armed", "result"):
            at = 6 if conv in ("again", "armed", "result") else 5
            jobs = reply[at + 1 : at + 1 + 7 * reply[at]]
            per_job = 7
        else:
            jobs = reply[5:]
        got += len(jobs) // per_job
        with_result = conv == "result"
        args = [0, 0, 86400000] if with_result else [0, 0]
        for j in range(0, len(jobs), per_job):
            args += [jobs[j], "lease", jobs[j + 3]] + ([""] if with_result else [])
        finishes.append(fcall(build, "remove", args))
    assert got == JOBS, f"{version}: {got} of {JOBS} jobs popped"
    for reply in phase("finish", finishes):
        assert all(status == 0 for status in reply[1::3]), f"{version}: a finish refused"
    return out


def main():
    port, rounds = int(sys.argv[1]), int(sys.argv[2])
    builds = {}
    for a in sys.argv[3:]:
        name, spec = a.split("=")
        version, _, conv = spec.partition(":")
        builds[name] = (version, conv or "trail")
    names = list(builds)
    r = Redis(port)
    times = {n: {p: [] for p in PHASES} for n in names}
    for rnd in range(rounds):
        for name in names if rnd % 2 == 0 else names[::-1]:
            r("FLUSHALL")
            if LAYOUT:
                r("SET", "{dq}:layout", LAYOUT)
            for p, us in life(r, builds[name], rnd).items():
                times[name][p].append(us)
    base = {p: min(times[names[0]][p]) for p in PHASES}
    print(f"Redis time per job (us), minimum over {rounds} rounds; ratio to {names[0]}")
    for name in names:
        cells = [f"{p} {min(times[name][p]):5.2f} ({min(times[name][p]) / base[p]:.3f})" for p in PHASES]
        total = sum(min(times[name][p]) for p in PHASES)
        print(f"{name:10s} " + "  ".join(cells) + f"  total {total:5.2f} ({total / sum(base.values()):.3f})")


if __name__ == "__main__":
    main()
