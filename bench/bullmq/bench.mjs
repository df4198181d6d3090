// The BullMQ side of delayq's benchmark. The Rust harness (bench/main.rs)
// starts a redis-server, runs one scenario here with
//   node bench.mjs <scenario> '<options as JSON>'
// and reads one JSON line of results from stdout. Every scenario mirrors the
// delayq one: 36-character ids, 64-byte bodies, jobs removed when done
// (memory: a JSON object of the size given, see bench/memory.rs).
import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';

const [scenario, rawOptions] = process.argv.slice(2);
const o = JSON.parse(rawOptions || '{}');
const connection = { host: '127.0.0.1', port: o.port };
const BODY = 'b'.repeat(64);
const opts = { removeOnComplete: true, removeOnFail: true };
// As bench/common.rs's `id`: 36 characters, or short with --short-ids.
const id = (tag, i) => (o.short_ids ? `${tag}-${i}` : `${tag.padStart(8, '0')}-0000-0000-0000-${String(i).padStart(12, '0')}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A plain connection for INFO, apart from BullMQ's own.
const admin = new IORedis({ ...connection, lazyConnect: true });

async function redisInfo(queue, section, field) {
  const info = await admin.info(section);
  const line = info.split('\r\n').find((l) => l.startsWith(field + ':'));
  return Number(line.split(':')[1]);
}

async function redisCpu(queue) {
  return (await redisInfo(queue, 'cpu', 'used_cpu_sys')) + (await redisInfo(queue, 'cpu', 'used_cpu_user'));
}

// n adds, `inflight` at a time.
async function addMany(queue, tag, n, delay, inflight, data = BODY) {
  let next = 0;
  const lane = async () => {
    while (next < n) {
      const i = next++;
      await queue.add('job', data, { ...opts, delay, jobId: id(tag, i) });
    }
  };
  await Promise.all(Array.from({ length: inflight }, lane));
}

async function addBulk(queue, tag, n, delay, batch, data = BODY) {
  for (let start = 0; start < n; start += batch) {
    const jobs = [];
    for (let i = start; i < Math.min(n, start + batch); i++) {
      jobs.push({ name: 'job', data, opts: { ...opts, delay, jobId: id(tag, i) } });
    }
    await queue.addBulk(jobs);
  }
}

const scenarios = {
  async add_single(queue) {
    await addMany(queue, 'warm', 1000, 3_600_000, o.inflight);
    const t = performance.now();
    await addMany(queue, 'single', o.n, 3_600_000, o.inflight);
    return { jobs_per_s: o.n / ((performance.now() - t) / 1000) };
  },

  async add_bulk(queue) {
    await addBulk(queue, 'warm', 1000, 3_600_000, o.batch);
    const t = performance.now();
    await addBulk(queue, 'bulk', o.n, 3_600_000, o.batch);
    return { jobs_per_s: o.n / ((performance.now() - t) / 1000) };
  },

  // Like for like: o.body is the JSON text delayq stores as the body;
  // BullMQ gets the parsed object and stores its JSON.stringify, the same
  // bytes (checked). Also the encoding of one job's hash. With o.plain:
  // BullMQ's own ids and no options but the delay (not like for like: what
  // a measurement without 36-char ids and removal sees).
  async memory(queue) {
    const data = JSON.parse(o.body);
    if (JSON.stringify(data) !== o.body) throw new Error('the body does not round-trip through JSON');
    const add = async (tag, n, batch) => {
      if (!o.plain) return addBulk(queue, tag, n, 3_600_000, batch, data);
      for (let start = 0; start < n; start += batch) {
        const jobs = [];
        for (let i = start; i < Math.min(n, start + batch); i++) jobs.push({ name: 'job', data, opts: { delay: 3_600_000 } });
        await queue.addBulk(jobs);
      }
    };
    await add('warm', 100, 100);
    const before = await redisInfo(queue, 'memory', 'used_memory');
    await add('mem', o.n, 1000);
    const after = await redisInfo(queue, 'memory', 'used_memory');
    const [one] = await admin.zrange(`bull:${queue.name}:delayed`, -1, -1);
    const key = `bull:${queue.name}:${one}`;
    const stored = await admin.hget(key, 'data');
    if (stored !== o.body) throw new Error(`BullMQ stored ${stored?.length} bytes, not the ${o.body.length} given`);
    const encoding = await admin.call('OBJECT', 'ENCODING', key);
    return { bytes_per_job: (after - before) / o.n, encoding };
  },

  // `jobs` jobs fall due evenly over `spread_ms` while `pending` others wait
  // an hour away; lateness = processing start - (added + delay).
  async lateness(queue) {
    await addBulk(queue, 'far', o.pending, 3_600_000, 1000);
    const late = [];
    const worker = new Worker(queue.name, async (job) => {
      late.push(Date.now() - (job.timestamp + job.opts.delay));
    }, { connection, concurrency: o.concurrency });
    await worker.waitUntilReady();
    const t0 = Date.now();
    const step = o.spread_ms / o.jobs;
    let next = 0;
    const lane = async () => {
      while (next < o.jobs) {
        const i = next++;
        const dueAt = t0 + o.lead_ms + step * i;
        await queue.add('job', BODY, { ...opts, delay: Math.max(0, Math.round(dueAt - Date.now())), jobId: id('due', i) });
      }
    };
    await Promise.all(Array.from({ length: 64 }, lane));
    const deadline = Date.now() + o.lead_ms + o.spread_ms + 30_000;
    while (late.length < o.jobs && Date.now() < deadline) await sleep(50);
    await worker.close();
    return { lateness_ms: late };
  },

  // Redis CPU per add -> fire -> process -> complete, idle subtracted.
  async cpu(queue) {
    const worker = new Worker(queue.name, async () => {}, { connection, concurrency: 64 });
    await worker.waitUntilReady();
    let done = 0;
    worker.on('completed', () => { done++; });
    await sleep(500);
    const idleStart = await redisCpu(queue);
    const idleT = performance.now();
    await sleep(2000);
    const idleRate = (await redisCpu(queue) - idleStart) / ((performance.now() - idleT) / 1000);
    const cpu0 = await redisCpu(queue);
    const t = performance.now();
    await addMany(queue, 'cpu', o.n, 10, 64);
    while (done < o.n) await sleep(5);
    const wall = (performance.now() - t) / 1000;
    const cpu = (await redisCpu(queue)) - cpu0 - idleRate * wall;
    await worker.close();
    return { cpu_us_per_job: (cpu * 1e6) / o.n };
  },

  // K instances on one Redis (bench/sidecars.rs): K Queues adding
  // round-robin and K Workers, each with its own connections, a paced flow.
  async sidecars(queue) {
    const k = o.instances;
    const queues = [queue];
    for (let i = 1; i < k; i++) queues.push(new Queue(queue.name, { connection }));
    const late = new Map();
    const workers = [];
    for (let w = 0; w < k; w++) {
      workers.push(new Worker(queue.name, async (job) => {
        const l = Date.now() - (job.timestamp + job.opts.delay);
        const seen = late.get(job.id);
        if (seen) seen.push(l); else late.set(job.id, [l]);
      }, { connection, concurrency: o.concurrency }));
    }
    await Promise.all(workers.map((w) => w.waitUntilReady()));
    await Promise.all(queues.map((q) => q.waitUntilReady()));
    await sleep(500);
    const idle0 = await redisCpu(queue);
    const it = performance.now();
    await sleep(o.idle_ms);
    const idle = (await redisCpu(queue) - idle0) / ((performance.now() - it) / 1000);
    const connections = await redisInfo(queue, 'clients', 'connected_clients');
    await admin.call('CONFIG', 'RESETSTAT');
    const cpu0 = await redisCpu(queue);
    const t0 = performance.now();
    const every = (o.secs * 1000) / o.jobs;
    const adds = [];
    for (let i = 0; i < o.jobs; i++) {
      const wait = t0 + every * i - performance.now();
      if (wait >= 1) await sleep(wait);
      adds.push(queues[i % k].add('job', BODY, { ...opts, delay: o.delay_ms, jobId: id('side', i) }));
    }
    await Promise.all(adds);
    const deadline = Date.now() + o.delay_ms + 30_000;
    while (late.size < o.jobs && Date.now() < deadline) await sleep(5);
    const wall = (performance.now() - t0) / 1000;
    const cpu = (await redisCpu(queue)) - cpu0 - idle * wall;
    const commandstats = await admin.info('commandstats');
    await sleep(500);
    await Promise.all(workers.map((w) => w.close()));
    await Promise.all(queues.slice(1).map((q) => q.close()));
    const first = [...late.values()].map((l) => l[0]).sort((a, b) => a - b);
    const pct = (p) => first[Math.min(first.length - 1, Math.floor(first.length * p))];
    return {
      cpu_us_per_job: (cpu * 1e6) / o.jobs,
      idle_cpu_pct: idle * 100,
      connections,
      commandstats,
      p50: pct(0.5), p99: pct(0.99), max: first[first.length - 1],
      lost: o.jobs - late.size,
      early: first.filter((l) => l < 0).length,
      twice: [...late.values()].reduce((n, l) => n + l.length - 1, 0),
    };
  },

  // A burst due at one instant (bench/burst.rs): `pending` jobs a day
  // away, then `jobs` added in batches all due `lead_ms` ahead; a Worker
  // completes each. Redis CPU from the instant to the last completion,
  // the idle rate (the Worker waiting before it) subtracted.
  async burst(queue) {
    await addBulk(queue, 'far', o.pending, 86_400_000, o.batch);
    const late = new Map();
    let done = 0;
    let lastDone = 0;
    const worker = new Worker(queue.name, async (job) => {
      const l = Date.now() - (job.timestamp + job.opts.delay);
      const seen = late.get(job.id);
      if (seen) seen.push(l); else late.set(job.id, [l]);
    }, { connection, concurrency: o.concurrency });
    worker.on('completed', () => { done++; lastDone = Date.now(); });
    await worker.waitUntilReady();
    const due = Date.now() + o.lead_ms;
    for (let start = 0; start < o.jobs; start += o.batch) {
      const jobs = [];
      for (let i = start; i < Math.min(o.jobs, start + o.batch); i++) {
        jobs.push({ name: 'job', data: BODY, opts: { ...opts, delay: Math.max(0, due - Date.now()), jobId: id('burst', i) } });
      }
      await queue.addBulk(jobs);
    }
    if (due - Date.now() < 300) throw new Error('the burst took too long to add');
    const c0 = await redisCpu(queue);
    const t0 = Date.now();
    await sleep(due - 5 - Date.now());
    const c1 = await redisCpu(queue);
    const idle = (c1 - c0) / ((Date.now() - t0) / 1000);
    await admin.call('CONFIG', 'RESETSTAT');
    while (done < o.jobs && Date.now() - due < 120_000) await sleep(1);
    const drain = (lastDone - due) / 1000;
    const cpu = (await redisCpu(queue)) - c1 - idle * drain;
    const commandstats = await admin.info('commandstats');
    await sleep(200);
    await worker.close();
    const first = [...late.values()].map((l) => l[0]).sort((a, b) => a - b);
    const pct = (p) => first[Math.min(first.length - 1, Math.floor(first.length * p))];
    return {
      drain_s: drain,
      commandstats,
      cpu_us_per_job: (cpu * 1e6) / o.jobs,
      p50: pct(0.5), p99: pct(0.99),
      lost: o.jobs - late.size,
      early: first.filter((l) => l < 0).length,
      twice: [...late.values()].reduce((n, l) => n + l.length - 1, 0),
    };
  },

  // Groups (bench/groups.rs): a burst of `jobs` due at one instant over
  // `groups` tenants, the first holding `big_share` of them and added
  // first (a flash sale), the rest spread evenly; a Worker at
  // `concurrency` spends `work_ms` on each. Plain BullMQ has no groups:
  // jobs leave in the order they were added. Per group: when its last job
  // was done, from the due instant.
  async groups(queue) {
    const big = Math.round(o.jobs * o.big_share);
    const groupOf = (i) => (i < big ? 0 : 1 + ((i - big) % (o.groups - 1)));
    const doneAt = new Map();
    const late = new Map();
    let done = 0;
    let lastDone = 0;
    const worker = new Worker(queue.name, async (job) => {
      const l = Date.now() - (job.timestamp + job.opts.delay);
      const seen = late.get(job.id);
      if (seen) seen.push(l); else late.set(job.id, [l]);
      if (o.work_ms > 0) await sleep(o.work_ms);
      // The group from the job's place in the burst (its id's last digits), as
      // delayq's side does: both carry the same 64-byte body.
      doneAt.set(groupOf(Number(job.id.slice(-12))), Date.now());
    }, { connection, concurrency: o.concurrency });
    worker.on('completed', () => { done++; lastDone = Date.now(); });
    await worker.waitUntilReady();
    const due = Date.now() + o.lead_ms;
    for (let start = 0; start < o.jobs; start += o.batch) {
      const jobs = [];
      for (let i = start; i < Math.min(o.jobs, start + o.batch); i++) {
        jobs.push({ name: 'job', data: BODY, opts: { ...opts, delay: Math.max(0, due - Date.now()), jobId: id('group', i) } });
      }
      await queue.addBulk(jobs);
    }
    if (due - Date.now() < 300) throw new Error('the burst took too long to add');
    const c0 = await redisCpu(queue);
    const t0 = Date.now();
    await sleep(due - 5 - Date.now());
    const c1 = await redisCpu(queue);
    const idle = (c1 - c0) / ((Date.now() - t0) / 1000);
    while (done < o.jobs && Date.now() - due < 300_000) await sleep(2);
    const drain = (lastDone - due) / 1000;
    const cpu = (await redisCpu(queue)) - c1 - idle * drain;
    await sleep(200);
    await worker.close();
    const first = [...late.values()].map((l) => l[0]);
    const small = [];
    for (const [g, at] of doneAt) if (g !== 0) small.push(at - due);
    return {
      drain_s: drain,
      cpu_us_per_job: (cpu * 1e6) / o.jobs,
      big_done_ms: (doneAt.get(0) ?? NaN) - due,
      small_done_ms: small,
      lost: o.jobs - late.size,
      early: first.filter((l) => l < 0).length,
      twice: [...late.values()].reduce((n, l) => n + l.length - 1, 0),
    };
  },

  // The scale section (bench/scale.rs): the pending set grown stage by
  // stage on one Redis, a day away; per stage the add rate, bytes per job
  // and idle Redis CPU with a Worker waiting; then, at the largest size, the
  // burst and lateness scenarios above on the same queue.
  async scale(queue) {
    // Like for like with delayq's body: the same JSON text (see memory).
    const data = JSON.parse(o.body);
    if (JSON.stringify(data) !== o.body) throw new Error('the body does not round-trip through JSON');
    const stages = [];
    let have = 0;
    for (const size of o.sizes) {
      const n = size - have;
      const before = await redisInfo(queue, 'memory', 'used_memory');
      const c = await redisCpu(queue);
      const t = performance.now();
      if (o.inflight > 0) await addMany(queue, `far${stages.length}`, n, 86_400_000, o.inflight, data);
      else await addBulk(queue, `far${stages.length}`, n, 86_400_000, o.batch, data);
      const secs = (performance.now() - t) / 1000;
      const cpu_us_per_add = (await redisCpu(queue) - c) * 1e6 / n;
      const after = await redisInfo(queue, 'memory', 'used_memory');
      const worker = new Worker(queue.name, async () => {}, { connection, concurrency: 64 });
      await worker.waitUntilReady();
      await sleep(500);
      const c0 = await redisCpu(queue);
      const t0 = performance.now();
      await sleep(o.idle_ms);
      const idle = (await redisCpu(queue) - c0) / ((performance.now() - t0) / 1000);
      await worker.close();
      stages.push({ pending: size, add_per_s: n / secs, bytes_per_job: (after - before) / n, idle_cpu_pct: idle * 100, cpu_us_per_add });
      have = size;
    }
    // The burst and lateness scenarios read `o`: nothing more to preload.
    Object.assign(o, { pending: 0, jobs: o.burst, lead_ms: o.burst_lead_ms, concurrency: 64 });
    const burst = await scenarios.burst(queue);
    Object.assign(o, { jobs: o.late_jobs, spread_ms: o.late_spread_ms, lead_ms: 2000, concurrency: 16 });
    const { lateness_ms } = await scenarios.lateness(queue);
    return { stages, burst, lateness_ms };
  },

  // An idle Worker: one delayed job an hour away, nothing to do; the
  // commands Redis counted over the window (less this side's own INFO),
  // by command.
  async idle(queue) {
    await queue.add('job', BODY, { ...opts, delay: 3_600_000, jobId: id('idle', 0) });
    const worker = new Worker(queue.name, async () => {}, { connection, concurrency: o.concurrency });
    await worker.waitUntilReady();
    const stats = async () => {
      const out = {};
      for (const line of (await admin.info('commandstats')).split('\r\n')) {
        const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line);
        if (m) out[m[1]] = Number(m[2]);
      }
      return out;
    };
    await sleep(o.warm_ms);
    const before = await stats();
    await sleep(o.window_ms);
    const after = await stats();
    // The reading before is counted in the one after.
    if (after.info) after.info -= 1;
    await worker.close();
    const commands = {};
    for (const [k, v] of Object.entries(after)) {
      if (v - (before[k] || 0) > 0) commands[k] = v - (before[k] || 0);
    }
    return { commands };
  },

  // add -> fire -> process -> complete at full speed.
  async e2e(queue) {
    const worker = new Worker(queue.name, async () => {}, { connection, concurrency: o.concurrency });
    await worker.waitUntilReady();
    let done = 0;
    worker.on('completed', () => { done++; });
    const t = performance.now();
    await addMany(queue, 'e2e', o.n, 10, 64);
    while (done < o.n) await sleep(2);
    const secs = (performance.now() - t) / 1000;
    await worker.close();
    return { jobs_per_s: o.n / secs };
  },
};

const queue = new Queue(`bench-${scenario}`, { connection });
try {
  const result = await scenarios[scenario](queue);
  process.stdout.write(JSON.stringify(result) + '\n');
} finally {
  await queue.close();
  admin.disconnect();
}
process.exit(0);
