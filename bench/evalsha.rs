//! What the EVALSHA path (Redis 6.2, or a service that refuses FUNCTION)
//! costs Redis beside FCALL: the same scripts, jobs and batches on one
//! redis-server, one queue calling its functions (FCALL) and one whose
//! ACL user may not (so it runs each transition's script by EVALSHA; the
//! script text redefines its helpers on every call). Rounds alternate
//! which goes first; each queue has its own prefix, so neither sees the
//! other's jobs. A round is JOBS plain jobs (36-char ids, 64-byte bodies)
//! pushed 50 a call, popped 50 a call once due and finished 50 a call; its
//! figure is the scripts' Redis time (`cmdstat_fcall` or `cmdstat_evalsha`
//! usec, the commands inside included) per job, the minimum over rounds.
//!
//! ```text
//! cargo run --release --example bench -- --only evalsha
//! ```

use std::time::Duration;

use delayq::{Config, Queue};

use crate::common::{id, new_job};
use crate::Redis;

const JOBS: usize = 2_000;
const BATCH: usize = 50;
const ROUNDS: usize = 7;

/// (calls, usec) of `cmdstat_<name>`.
fn stat(redis: &Redis, name: &str) -> (f64, f64) {
    let mut c = redis.client().get_connection().unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut c)
        .unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{name}:")))
        .unwrap_or("");
    let field = |f: &str| {
        line.split(['|', ',', ':'])
            .find_map(|p| p.strip_prefix(f))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field("calls="), field("usec="))
}

/// One round on `q`: JOBS jobs through their whole life; returns (calls,
/// usec) of `cmd` per job.
async fn round(q: &Queue, redis: &Redis, cmd: &str, r: usize) -> (f64, f64) {
    let (c0, u0) = stat(redis, cmd);
    for from in (0..JOBS).step_by(BATCH) {
        let jobs: Vec<_> = (from..from + BATCH)
            .map(|i| new_job(id(&format!("r{r}"), i), "t", Duration::ZERO))
            .collect();
        for got in q.push_many(&jobs).await.unwrap() {
            got.unwrap();
        }
    }
    let topics = ["t".to_owned()];
    let mut left = JOBS;
    while left > 0 {
        let got = q
            .pop_many(&topics, BATCH, Duration::from_secs(10))
            .await
            .unwrap();
        assert!(!got.is_empty(), "jobs due now were not ready in 10 s");
        left -= got.len();
        let leases: Vec<(&str, &str)> = got
            .iter()
            .map(|d| (d.id.as_str(), d.token.as_str()))
            .collect();
        for r in q.finish_many(&leases).await.unwrap() {
            r.unwrap();
        }
    }
    let (c1, u1) = stat(redis, cmd);
    ((c1 - c0) / JOBS as f64, (u1 - u0) / JOBS as f64)
}

pub(crate) async fn run() {
    let redis = Redis::start_tcp(&[]);
    let _: () = redis
        .cmd(&[
            "ACL",
            "SETUSER",
            "evalsha",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-fcall",
            "-fcall_ro",
        ])
        .await;
    let open = |url: String, prefix: &str| {
        Queue::connect(Config {
            redis: delayq::Redis::Url(url),
            prefix: prefix.into(),
            ..Config::default()
        })
        .unwrap()
    };
    let fcall = open(redis.url(), "f");
    let port = redis.port().expect("a TCP server");
    let evalsha = open(format!("redis://evalsha:pw@127.0.0.1:{port}/"), "e");
    let (mut best_f, mut best_e) = ((f64::MAX, 0.0), (f64::MAX, 0.0));
    // The first round loads the scripts and warms both up: not counted.
    for r in 0..=ROUNDS {
        let (f, e) = if r % 2 == 0 {
            let f = round(&fcall, &redis, "fcall", r).await;
            (f, round(&evalsha, &redis, "evalsha", r).await)
        } else {
            let e = round(&evalsha, &redis, "evalsha", r).await;
            (round(&fcall, &redis, "fcall", r).await, e)
        };
        if r > 0 {
            if f.1 < best_f.0 {
                best_f = (f.1, f.0);
            }
            if e.1 < best_e.0 {
                best_e = (e.1, e.0);
            }
        }
    }
    println!(
        "\nevalsha: the scripts' Redis time per job, the same {JOBS} plain jobs a round \
         (36-char ids, 64-byte bodies, pushed, popped and finished {BATCH} a call) on one \
         redis-server (7.0.15, redis-conf), FCALL beside EVALSHA, {ROUNDS} rounds alternating, \
         the minimum"
    );
    println!("| path | script calls a job | Redis time a job (us) | vs FCALL |");
    println!("|---|---:|---:|---:|");
    println!("| FCALL | {:.2} | {:.2} | 1.00x |", best_f.1, best_f.0);
    println!(
        "| EVALSHA | {:.2} | {:.2} | {:.2}x |",
        best_e.1,
        best_e.0,
        best_e.0 / best_f.0
    );
    fcall.close().await;
    evalsha.close().await;
}
