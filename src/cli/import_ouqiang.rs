//! `delayq import-ouqiang`: moves the pending jobs of an ouqiang/delay-queue
//! server into delayq, so that switching servers loses none.
//!
//! The Go server keeps, in one Redis database and with no common prefix:
//! a job pool (one string key per job, named by the raw id, holding a
//! MessagePack map: "1" topic, "2" id, "3" due time in Unix seconds, "4" ttr
//! in seconds, "5" body; older builds, without the struct tags, keyed it by
//! field name: Topic, Id, Delay, TTR, Body); buckets (sorted sets `dq_bucket_1..N`, member = id,
//! score = Unix seconds: a delayed job's due time, or a popped job's lease
//! end); ready lists (`dq_queue_<topic>`).
//!
//! Each job found in a bucket or a ready list is pushed to delayq with its
//! topic, body and ttr, due:
//! - now, if it sits in a ready list;
//! - at its lease end, if a bucket entry is later than its own due time (it
//!   was popped and not finished);
//! - at its due time otherwise (entries older than it are left over from a
//!   push that replaced it).
//!
//! Pushes use "keep": a job already in delayq is left as it is, so a re-run
//! (after a crash half way, or to catch up) creates no copies. With
//! `--remove`, each job leaves the old layout right after it has landed in
//! delayq: at every instant it is in one place or both, never in neither.
//! Stop the Go server first: it would keep firing what is still there.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::IsTerminal;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use delayq::{Config, IfExists, NewJob, PushOutcome, Queue};
use redis::aio::MultiplexedConnection;

use super::redis_checks;

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The Go server's Redis, with its database (its `redis.db`, default 1):
    /// redis://HOST:PORT/DB.
    #[arg(long, value_name = "URL")]
    from: String,

    /// Its bucket name pattern (`bucket_name`); %d is the bucket number.
    #[arg(long, default_value = "dq_bucket_%d")]
    bucket_name: String,

    /// Its number of buckets (`bucket_size`).
    #[arg(long, default_value_t = 3)]
    buckets: usize,

    /// Its ready-list name pattern (`queue_name`); %s is the topic.
    #[arg(long, default_value = "dq_queue_%s")]
    queue_name: String,

    /// The delayq Redis to import into, as for `serve`.
    #[arg(long, env = "DELAYQ_REDIS")]
    redis: String,

    /// delayq's key prefix, as for `serve`.
    #[arg(long, env = "DELAYQ_PREFIX", default_value = delayq::defaults::PREFIX)]
    prefix: String,

    /// Count what would be imported; change nothing.
    #[arg(long)]
    dry_run: bool,

    /// Remove each job from the old layout once it is in delayq.
    #[arg(long, conflicts_with = "dry_run")]
    remove: bool,
}

/// How long a reply of the old Redis is waited for. The Redis client's
/// own default is half a second, and an import reads whole ready lists
/// from a server that is often busy in production: giving up half way
/// would leave the operator a run to repeat, not a faster one.
const OLD_REDIS_REPLY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// How long connecting to the old Redis may take.
const OLD_REDIS_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Jobs per round trip.
const BATCH: usize = 500;

/// Where a job id was found in the old layout.
#[derive(Default)]
struct Found {
    /// Bucket name -> score (Unix seconds).
    buckets: Vec<(String, f64)>,
    /// Ready list names.
    ready: Vec<String>,
}

/// A job from the old job pool.
struct OldJob {
    topic: String,
    due_s: i64,
    ttr_s: i64,
    body: String,
}

/// What happened, for the report.
#[derive(Default)]
struct Report {
    imported: u64,
    present: u64,
    /// Reason -> what was skipped for it (each named by id and where
    /// it was found).
    skipped: BTreeMap<String, Vec<String>>,
    removed: u64,
}

/// Skipped ids listed per reason; the rest are counted.
const NAMED: usize = 20;

impl Report {
    fn skip(&mut self, why: String, what: String) {
        self.skipped.entry(why).or_default().push(what);
    }
}

/// A skipped job, as the report names it: its id (which is also its key
/// in the old job pool) and the buckets and ready lists that hold it.
fn named(id: &str, found: &Found) -> String {
    let places: Vec<&str> = found
        .buckets
        .iter()
        .map(|(b, _)| b.as_str())
        .chain(found.ready.iter().map(String::as_str))
        .collect();
    format!("id {id:?} (key {id:?}; in {})", places.join(", "))
}

pub async fn run(args: ImportArgs) -> Result<()> {
    if !args.bucket_name.contains("%d") || !args.queue_name.contains("%s") {
        bail!("--bucket-name needs %d and --queue-name needs %s");
    }
    let mut old = redis::Client::open(args.from.as_str())
        .context("--from")?
        .get_multiplexed_async_connection_with_config(
            &redis::AsyncConnectionConfig::new()
                .set_response_timeout(Some(OLD_REDIS_REPLY_TIMEOUT))
                .set_connection_timeout(Some(OLD_REDIS_CONNECT_TIMEOUT)),
        )
        .await
        .with_context(|| {
            format!(
                "cannot reach the old redis at {}",
                redis_checks::redact(&args.from)
            )
        })?;
    let queue = Queue::connect(Config {
        redis: delayq::Redis::Url(args.redis.clone()),
        prefix: args.prefix.clone(),
        // An importer dispatches nothing: the servers do.
        dispatch: false,
        ..Config::default()
    })
    .context("invalid configuration")?;
    redis_checks::connect(&queue, &args.redis).await?;

    let (found, not_lists) = scan(&mut old, &args).await?;
    let ids: Vec<&String> = found.keys().collect();
    let mut report = Report::default();
    for key in not_lists {
        let why = "a key that matches --queue-name but is not a list; left as it is";
        report.skip(why.to_owned(), format!("key {key:?}"));
    }
    let progress = std::io::stderr().is_terminal();
    for (n, chunk) in ids.chunks(BATCH).enumerate() {
        let jobs = read_jobs(&mut old, chunk).await?;
        let mut batch = Vec::new();
        for (id, job) in chunk.iter().zip(jobs) {
            match job.and_then(|j| new_job(id, &j, &found[*id])) {
                Ok(j) => batch.push(j),
                Err(why) => report.skip(why, named(id, &found[*id])),
            }
        }
        if args.dry_run {
            report.imported += batch.len() as u64;
        } else {
            let results = queue.push_many(&batch).await?;
            let mut landed = Vec::new();
            for (job, r) in batch.iter().zip(results) {
                match r {
                    Ok(p) if p.outcome == PushOutcome::Kept => {
                        report.present += 1;
                        landed.push(job.id.as_str());
                    }
                    Ok(_) => {
                        report.imported += 1;
                        landed.push(job.id.as_str());
                    }
                    Err(e) => report.skip(format!("refused: {e}"), named(&job.id, &found[&job.id])),
                }
            }
            if args.remove {
                report.removed += remove(&mut old, &landed, &found).await?;
            }
        }
        if progress {
            eprint!(
                "\rdelayq: {} of {} jobs",
                ((n + 1) * BATCH).min(ids.len()),
                ids.len()
            );
        }
    }
    if progress {
        eprintln!();
    }
    queue.close().await;
    let verb = if args.dry_run {
        "would import"
    } else {
        "imported"
    };
    println!(
        "{verb} {}, already present {}",
        report.imported, report.present
    );
    if args.remove {
        println!("removed from the old layout {}", report.removed);
    }
    for (why, what) in &report.skipped {
        println!("skipped {}: {why}", what.len());
        for w in what.iter().take(NAMED) {
            println!("  {w}");
        }
        if what.len() > NAMED {
            println!("  and {} more", what.len() - NAMED);
        }
    }
    Ok(())
}

/// Every job id in the buckets and ready lists; and the keys that match
/// the ready lists' pattern but are not lists.
async fn scan(
    old: &mut MultiplexedConnection,
    args: &ImportArgs,
) -> Result<(HashMap<String, Found>, Vec<String>)> {
    let mut found: HashMap<String, Found> = HashMap::new();
    for b in 1..=args.buckets {
        let bucket = args.bucket_name.replace("%d", &b.to_string());
        let mut cursor = 0u64;
        loop {
            let (next, items): (u64, Vec<(String, f64)>) = redis::cmd("ZSCAN")
                .arg(&bucket)
                .arg(cursor)
                .arg("COUNT")
                .arg(1000)
                .query_async(old)
                .await
                .with_context(|| format!("reading {bucket}"))?;
            for (id, score) in items {
                found
                    .entry(id)
                    .or_default()
                    .buckets
                    .push((bucket.clone(), score));
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    let pattern = glob_escape(&args.queue_name).replace("%s", "*");
    let mut lists = HashSet::new();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(old)
            .await?;
        lists.extend(keys);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut not_lists = Vec::new();
    for list in lists {
        // Costs what it returns: the list's ids.
        let ids: Vec<String> = match redis::cmd("LRANGE")
            .arg(&list)
            .arg(0)
            .arg(-1)
            .query_async(old)
            .await
        {
            Ok(ids) => ids,
            // A key of the Go server's database that only looks like a
            // ready list: not its to import, and no reason to stop.
            Err(e) if e.code() == Some("WRONGTYPE") => {
                not_lists.push(list);
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("reading {list}")),
        };
        for id in ids {
            found.entry(id).or_default().ready.push(list.clone());
        }
    }
    Ok((found, not_lists))
}

/// The jobs behind `ids`, or why each is skipped.
async fn read_jobs(
    old: &mut MultiplexedConnection,
    ids: &[&String],
) -> Result<Vec<Result<OldJob, String>>> {
    let mut cmd = redis::cmd("MGET");
    for id in ids {
        cmd.arg(id.as_str());
    }
    let values: Vec<Option<Vec<u8>>> = cmd.query_async(old).await?;
    Ok(values
        .into_iter()
        .map(|v| match v {
            None => Err("no job behind the entry (finished or deleted)".to_owned()),
            Some(bytes) => decode(&bytes),
        })
        .collect())
}

/// The Go server's MessagePack job map, or why it cannot be imported.
/// Its keys are "1" to "5" (the struct tags), or the field names Topic,
/// Id, Delay, TTR, Body in any case (builds before the tags).
fn decode(bytes: &[u8]) -> Result<OldJob, String> {
    let format = || "not a job in the Go server's format".to_owned();
    let value = rmpv::decode::read_value(&mut &bytes[..]).map_err(|_| format())?;
    let map = value.as_map().ok_or_else(format)?;
    const NAMES: [(&str, &str); 5] = [
        ("1", "topic"),
        ("2", "id"),
        ("3", "delay"),
        ("4", "ttr"),
        ("5", "body"),
    ];
    let field = |k: &str| {
        let name = NAMES
            .iter()
            .find(|(n, _)| *n == k)
            .map_or(k, |(_, name)| name);
        map.iter()
            .find(|(key, _)| {
                key.as_str()
                    .is_some_and(|key| key == k || key.eq_ignore_ascii_case(name))
            })
            .map(|(_, v)| v)
    };
    // Go strings hold any bytes; delayq bodies are text. A body that is not
    // is kept where it is, never imported empty.
    let not_text = || "body is not UTF-8 text; left in the old layout".to_owned();
    let body = match field("5") {
        None | Some(rmpv::Value::Nil) => String::new(),
        Some(rmpv::Value::String(s)) => s.as_str().ok_or_else(not_text)?.to_owned(),
        Some(rmpv::Value::Binary(b)) => String::from_utf8(b.clone()).map_err(|_| not_text())?,
        Some(_) => return Err(format()),
    };
    let field = |k: &str| field(k).ok_or_else(format);
    Ok(OldJob {
        topic: field("1")?.as_str().ok_or_else(format)?.to_owned(),
        due_s: field("3")?.as_i64().ok_or_else(format)?,
        ttr_s: field("4")?.as_i64().ok_or_else(format)?,
        body,
    })
}

/// The delayq job for an old one, due as the module doc says; or why it
/// cannot be imported.
fn new_job(id: &str, job: &OldJob, found: &Found) -> Result<NewJob, String> {
    let due_s = if !found.ready.is_empty() {
        0 // a past time means now
    } else {
        let later = found
            .buckets
            .iter()
            .map(|(_, s)| *s as i64)
            .filter(|s| *s >= job.due_s)
            .min();
        match later {
            // Its own due time, or a lease end past it.
            Some(s) => s,
            None => job.due_s,
        }
    };
    // Checked: a time past year 9999 is refused, not wrapped into one
    // that is due at once.
    let due_ms = (due_s.max(0))
        .checked_mul(1000)
        .filter(|ms| *ms <= delayq::job::MAX_DUE_AT_MS)
        .ok_or_else(|| {
            format!(
                "due time {due_s} s is past what delayq takes (year 9999); left in the old layout"
            )
        })?;
    Ok(NewJob {
        id: id.to_owned(),
        topic: job.topic.trim().to_owned(),
        body: job.body.clone(),
        due_at_ms: Some(due_ms),
        ttr: Duration::from_secs(job.ttr_s.clamp(1, 86_400) as u64),
        if_exists: IfExists::Keep,
        ..NewJob::default()
    })
}

/// Takes landed jobs out of the old layout: bucket entries, ready-list
/// entries, then the job key.
async fn remove(
    old: &mut MultiplexedConnection,
    ids: &[&str],
    found: &HashMap<String, Found>,
) -> Result<u64> {
    if ids.is_empty() {
        // Nothing landed (a re-run finds only entries with no job behind
        // them): an empty pipeline is no command at all to Redis.
        return Ok(0);
    }
    let mut pipe = redis::pipe();
    for id in ids {
        let f = &found[*id];
        for (bucket, _) in &f.buckets {
            pipe.cmd("ZREM").arg(bucket).arg(*id).ignore();
        }
        for list in &f.ready {
            pipe.cmd("LREM").arg(list).arg(0).arg(*id).ignore();
        }
        pipe.cmd("DEL").arg(*id).ignore();
    }
    let _: () = pipe.query_async(old).await?;
    Ok(ids.len() as u64)
}

fn glob_escape(s: &str) -> String {
    s.chars()
        .flat_map(|c| match c {
            '*' | '?' | '[' | ']' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(due_s: i64) -> OldJob {
        OldJob {
            topic: "t".into(),
            due_s,
            ttr_s: 60,
            body: String::new(),
        }
    }

    #[test]
    fn due_times_follow_the_old_layout() {
        let at = |found: Found| new_job("x", &job(1000), &found).unwrap().due_at_ms;
        let bucket = |s: f64| ("b".to_owned(), s);
        // Delayed: its own due time.
        assert_eq!(
            at(Found {
                buckets: vec![bucket(1000.0)],
                ready: vec![]
            }),
            Some(1_000_000)
        );
        // Popped: the lease end.
        assert_eq!(
            at(Found {
                buckets: vec![bucket(1060.0)],
                ready: vec![]
            }),
            Some(1_060_000)
        );
        // A left-over entry from before a replacement does not count.
        assert_eq!(
            at(Found {
                buckets: vec![bucket(500.0), bucket(1000.0)],
                ready: vec![]
            }),
            Some(1_000_000)
        );
        // Ready: now.
        assert_eq!(
            at(Found {
                buckets: vec![],
                ready: vec!["q".into()]
            }),
            Some(0)
        );
    }
}
