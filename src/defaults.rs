//! Every default and bound that more than one place needs, written once:
//! the library's [`Config`](crate::Config), `delayq serve`'s flags, the
//! config file, the scripts (through the generated Lua prelude) and the
//! docs (a test checks docs/configuration.md's flag table against these).

use std::time::Duration;

/// A duration default: the text a flag shows and the value the library
/// takes, one made from the other at compile time.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub text: &'static str,
    pub value: Duration,
}

/// `text` ("<digits><unit>", unit s, m, h or d) as a [`Span`]; anything
/// else fails the build.
const fn span(text: &'static str) -> Span {
    let b = text.as_bytes();
    assert!(b.len() >= 2, "a span is <digits><unit>");
    let mut n: u64 = 0;
    let mut i = 0;
    while i < b.len() - 1 {
        assert!(b[i].is_ascii_digit(), "a span is <digits><unit>");
        n = n * 10 + (b[i] - b'0') as u64;
        i += 1;
    }
    let unit = match b[b.len() - 1] {
        b's' => 1,
        b'm' => 60,
        b'h' => 3600,
        b'd' => 86_400,
        _ => panic!("a span's unit is s, m, h or d"),
    };
    Span {
        text,
        value: Duration::from_secs(n * unit),
    }
}

/// The Redis a queue connects to unless told (the library's
/// [`Config`](crate::Config), `delayq layout`): one server on this host's
/// standard port. (`delayq serve` without `--redis` starts a private
/// redis-server instead.)
pub const REDIS_URL: &str = "redis://127.0.0.1:6379/";
/// Key prefix: every key is `{prefix}:...`.
pub const PREFIX: &str = "dq";
/// Longest key prefix.
pub const MAX_PREFIX_LEN: usize = 64;
/// How long one Redis call may take.
pub const REDIS_TIMEOUT: Span = span("2s");
/// Partitions of a queue, unless told: 1 keeps the keys of a queue that
/// never had partitions. The library and the server agree on a single
/// Redis; on a cluster the server takes [`CLUSTER_PARTITIONS`].
pub const PARTITIONS: usize = 1;
/// Partitions of a queue on a cluster, unless told (the server's default;
/// the library takes [`PARTITIONS`] whatever its Redis): even over 1, 2,
/// 3, 4, 6 or 12 masters.
pub const CLUSTER_PARTITIONS: usize = 12;
/// Most partitions a queue may have.
pub const MAX_PARTITIONS: usize = 1024;
/// Replicas that must have a write before it is acknowledged.
pub const REPLICA_ACKS: usize = 0;
/// Most jobs one dispatch script call moves.
pub const DISPATCH_BATCH: usize = 1000;
/// A delayed job gets its trigger key once due within this (see
/// docs/DESIGN.md, "Trigger keys within a horizon").
pub const TRIGGER_HORIZON: Span = span("1h");
/// The longest trigger horizon: a day.
pub const MAX_TRIGGER_HORIZON: Duration = Duration::from_secs(86_400);
/// Dead letters kept per topic.
pub const DEAD_MAX: usize = 10_000;
/// Dead letters older than this are dropped.
pub const DEAD_MAX_AGE: Span = span("7d");
/// Events a partition's stream keeps unless told: about 60 bytes each
/// (measured, see docs/events.md), so some 6 MB per partition.
pub const EVENTS_KEPT: u64 = 100_000;
/// The most events a partition's stream may keep.
pub const MAX_EVENTS_KEPT: u64 = 100_000_000;
/// The ttr of a job, or of a schedule's ticks, pushed without one: how
/// long a consumer holds it before the attempt counts as failed and the
/// job goes back (a consumer that died gives its job back within it).
pub const TTR: Duration = Duration::from_secs(60);
/// One webhook request may take this long, unless told; then it counts
/// as a failed attempt (its lease outlasts it by a second).
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// Deliveries in flight to one webhook endpoint, unless told: a bound on
/// what delayq asks of a receiver at once.
pub const WEBHOOK_CONCURRENCY: usize = 8;
/// Entries one page of a topic's jobs, its dead letters or what falls due
/// next lists when no limit is given (the API's and the CLI's).
pub const PAGE: usize = 50;
/// Topics one page of `/v1/topics` holds when no limit is given: as many
/// as a page may.
pub const TOPIC_PAGE: usize = 1000;
/// Groups one page of a topic's groups lists when no limit is given.
pub const GROUP_PAGE: usize = 100;
/// Most groups one page may list.
pub const MAX_GROUP_PAGE: usize = 1000;
/// Jobs one page of a tag looks at when no limit is given.
pub const TAG_PAGE: usize = 500;
/// Most jobs one page of a tag may look at (the scripts check it too).
pub const MAX_TAG_PAGE: usize = 1000;
/// A running job's progress: at most this many bytes of JSON.
pub const MAX_PROGRESS_BYTES: usize = 1024;
/// A running job's progress: at most this many levels of arrays and
/// objects, well within what a job read can parse back.
pub const MAX_PROGRESS_DEPTH: usize = 64;
/// A job's result (what its finish carries back): at most this many bytes
/// of JSON, and [`MAX_PROGRESS_DEPTH`] levels of arrays and objects.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;
/// How long a job finished with a result keeps it (a record not listed
/// nor counted) in a topic that keeps no finished records
/// (`keep_finished`): long enough for its pusher to read it.
pub const RESULT_RETENTION: Span = span("24h");
/// How long `GET /v1/jobs/{id}?wait_ms=` may wait for a job's outcome.
pub const MAX_OUTCOME_WAIT: Duration = Duration::from_secs(60);
/// How often an instance reads the jobs its outcome waiters wait on (one
/// read for all of them, none while none wait).
pub const OUTCOME_POLL: Duration = Duration::from_millis(100);
/// Most jobs one instance waits on at once for their outcomes (waiters on
/// one job count once): each poll reads two fields of each, so the
/// instance's Redis cost while waiting stays bounded. A wait on one more
/// is refused (503 `busy`), nothing changed.
pub const MAX_OUTCOME_WAITS: usize = 1_000;
/// One log line of a running job: at most this many bytes.
pub const MAX_LOG_LINE_BYTES: usize = 1024;
/// A job's log keeps its last this many lines (older ones are dropped as
/// new ones come).
pub const LOG_LINES_KEPT: usize = 100;

/// Where `delayq serve` listens.
pub const LISTEN: &str = "127.0.0.1:9277";
/// Where the client commands look for the server: [`LISTEN`] over http.
pub const SERVER: &str = "http://127.0.0.1:9277";
/// The private redis-server's data directory.
pub const DATA_DIR: &str = ".delayq";
/// How long the compatible `/pop` holds a request (the original holds
/// about 178 s).
pub const POP_TIMEOUT: Span = span("178s");
/// Most open client connections.
pub const MAX_CONNECTIONS: usize = 16_384;
/// A partition leader's shortest term, taken while a job is due within
/// it: how late a due job may fire when its leader is killed (the scripts
/// never cut a term shorter than this from now).
pub const LEADER_TERM_MIN: Duration = Duration::from_millis(2000);
/// A leader's longest term, taken while nothing is due sooner (also how
/// long an idle sweep sleeps at most).
pub const LEADER_TERM_MAX: Duration = Duration::from_secs(60);
/// How often a waiting pop looks at Redis on its own while ready notices
/// flow: a backstop for a notice whose publish failed (one look stands for
/// every pop waiting on the same topics).
pub const WAIT_BACKSTOP: Duration = Duration::from_secs(300);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_their_text() {
        for s in [
            REDIS_TIMEOUT,
            DEAD_MAX_AGE,
            POP_TIMEOUT,
            TRIGGER_HORIZON,
            RESULT_RETENTION,
        ] {
            assert_eq!(crate::duration::parse_duration(s.text), Ok(s.value));
        }
        assert_eq!(DEAD_MAX_AGE.value, Duration::from_secs(7 * 86_400));
    }

    #[test]
    fn the_client_looks_where_the_server_listens() {
        assert_eq!(SERVER, format!("http://{LISTEN}"));
    }
}
