//! `delayq doctor`: each check's verdict on a redis-server set up right
//! (redis-conf/) and on ones set up wrong in one way each.

use std::collections::HashMap;

use crate::common::delayq_run;
use crate::redis_server::RedisServer;

/// One check as doctor --json gives it.
#[derive(Debug)]
pub(crate) struct Row {
    pub check: String,
    /// The cluster master it is about; empty for a server's or the
    /// cluster-wide checks.
    pub node: String,
    pub verdict: String,
    pub found: String,
    pub fix: String,
}

/// Runs `doctor ARGS --json`: (exit success, its checks in order).
pub(crate) fn doctor_rows(args: &[&str]) -> (bool, Vec<Row>) {
    let mut all = vec!["doctor", "--json"];
    all.extend_from_slice(args);
    // Neither Redis from the environment: clap counts a set variable, an
    // empty one too, as the flag given.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_delayq"))
        .args(&all)
        .env_remove("DELAYQ_REDIS")
        .env_remove("DELAYQ_REDIS_CLUSTER")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "doctor --json printed no JSON ({e}): {text}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let rows = doc["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let s = |f: &str| c[f].as_str().unwrap_or_default().to_owned();
            Row {
                check: s("check"),
                node: s("node"),
                verdict: s("verdict"),
                found: s("found"),
                fix: s("fix"),
            }
        })
        .collect();
    (out.status.success(), rows)
}

/// Runs doctor --redis URL --json: (exit success, check name -> (verdict, found, fix)).
pub(crate) fn doctor(
    url: &str,
    extra: &[&str],
) -> (bool, HashMap<String, (String, String, String)>) {
    let mut args = vec!["--redis", url];
    args.extend_from_slice(extra);
    let (passed, rows) = doctor_rows(&args);
    let checks = rows
        .into_iter()
        .map(|r| (r.check, (r.verdict, r.found, r.fix)))
        .collect();
    (passed, checks)
}

fn verdict(checks: &HashMap<String, (String, String, String)>, name: &str) -> String {
    checks
        .get(name)
        .unwrap_or_else(|| panic!("no {name} check in {checks:?}"))
        .0
        .clone()
}

/// Every check the doctor runs on a reachable server.
const ALL: [&str; 12] = [
    "tls",
    "engine",
    "scripting",
    "eviction",
    "persistence",
    "memory",
    "round trip",
    "replicas",
    "cluster",
    "events",
    "acl",
    "storage layout",
];

/// Every verdict ok; the round trip's depends on the machine's load (a
/// warn above 10 ms), so only its figure is asserted.
fn assert_all_ok(checks: &HashMap<String, (String, String, String)>) {
    for name in ALL.iter().filter(|n| **n != "round trip") {
        assert_eq!(verdict(checks, name), "ok", "{name}: {:?}", checks[*name]);
    }
    assert!(checks["round trip"].1.starts_with("median of 5 PINGs"));
}

#[tokio::test]
async fn a_server_set_up_right_passes_every_check_and_is_left_as_it_was() {
    let r = RedisServer::start();
    let (passed, checks) = doctor(&r.url(), &[]);
    assert_all_ok(&checks);
    assert!(passed);
    assert!(
        checks["engine"].1.starts_with("Redis 7"),
        "{:?}",
        checks["engine"]
    );
    assert!(checks["persistence"].1.contains("appendfsync always"));
    assert!(checks["acl"].1.starts_with("ACL DRYRUN"));
    // Doctor's canary and probe keys are gone, and no function was loaded.
    assert_eq!(r.cmd::<i64>(&["DBSIZE"]).await, 0);
    let libraries: Vec<redis::Value> = r.cmd(&["FUNCTION", "LIST"]).await;
    assert!(libraries.is_empty());
}

#[tokio::test]
async fn text_output_is_one_line_per_check() {
    let r = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let out = delayq_run(&["doctor", "--redis", &r.url()], &[("DELAYQ_REDIS", "")]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), ALL.len(), "{text}");
    // Each finding starts in the same column, after the longest name
    // ("storage layout") and two spaces.
    let column = |line: &str| {
        let name = ALL.iter().find(|n| line[6..].starts_with(*n)).unwrap();
        let rest = &line[6 + name.len()..];
        6 + name.len() + (rest.len() - rest.trim_start().len())
    };
    for line in text.lines() {
        assert_eq!(column(line), 6 + "storage layout".len() + 2, "{text}");
    }
    let eviction = text.lines().find(|l| l.contains("eviction")).unwrap();
    assert!(eviction.starts_with("fail"), "{eviction}");
    assert!(
        eviction.contains("fix: set maxmemory-policy noeviction"),
        "{eviction}"
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 check failed"));
}

#[tokio::test]
async fn expired_events_off_is_a_warning_naming_the_setting() {
    let r = RedisServer::start_with(&["--notify-keyspace-events", ""]);
    let (passed, checks) = doctor(&r.url(), &["--events-wait", "1s"]);
    assert_eq!(verdict(&checks, "events"), "warn", "{:?}", checks["events"]);
    assert!(checks["events"].2.contains("notify-keyspace-events Ex"));
    // Only a warning: the sweep still fires jobs on time.
    assert!(passed);
}

#[tokio::test]
async fn an_evicting_policy_fails_and_a_volatile_one_passes() {
    let r = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let (passed, checks) = doctor(&r.url(), &[]);
    assert_eq!(verdict(&checks, "eviction"), "fail");
    assert!(!passed);
    let r = RedisServer::start_with(&["--maxmemory-policy", "volatile-ttl"]);
    let (passed, checks) = doctor(&r.url(), &[]);
    assert_eq!(verdict(&checks, "eviction"), "ok");
    assert!(checks["eviction"].1.contains("trigger keys carry TTLs"));
    assert!(passed);
}

#[tokio::test]
async fn no_aof_fails_without_snapshots_and_warns_with_them() {
    // redis-conf/ has no save rules: without AOF nothing is kept.
    let r = RedisServer::start_with(&["--appendonly", "no"]);
    let (passed, checks) = doctor(&r.url(), &[]);
    assert_eq!(verdict(&checks, "persistence"), "fail");
    assert!(!passed);
    let r = RedisServer::start_with(&["--appendonly", "no", "--save", "3600 1"]);
    let (passed, checks) = doctor(&r.url(), &[]);
    assert_eq!(verdict(&checks, "persistence"), "warn");
    assert!(checks["persistence"].1.contains("RDB snapshots only"));
    assert!(passed);
}

#[tokio::test]
async fn a_user_lacking_a_category_fails_the_acl_check_naming_it() {
    let r = RedisServer::start();
    // Allowed ACL DRYRUN (it has @admin): asked.
    r.cmd::<()>(&[
        "ACL",
        "SETUSER",
        "noscript",
        "on",
        ">pw",
        "~*",
        "&*",
        "+@all",
        "-@scripting",
    ])
    .await;
    let (passed, checks) = doctor(&r.url_as("noscript", "pw"), &[]);
    assert_eq!(verdict(&checks, "acl"), "fail", "{:?}", checks["acl"]);
    assert!(checks["acl"].1.starts_with("ACL DRYRUN"));
    // FCALL refused: the EVALSHA path's commands are the ones asked, and
    // granted one by one (@scripting holds FUNCTION FLUSH and SCRIPT FLUSH).
    assert!(checks["acl"].1.contains("evalsha"), "{:?}", checks["acl"]);
    assert!(checks["acl"].2.contains("+evalsha +script|load"));
    assert!(!checks["acl"].2.contains("@scripting"));
    assert!(!passed);
    // No @admin: no DRYRUN and no CONFIG; each command is tried instead.
    r.cmd::<()>(&[
        "ACL", "SETUSER", "nohash", "on", ">pw", "~*", "&*", "+@all", "-@admin", "-@hash",
    ])
    .await;
    let (passed, checks) = doctor(&r.url_as("nohash", "pw"), &[]);
    assert_eq!(verdict(&checks, "acl"), "fail", "{:?}", checks["acl"]);
    assert!(checks["acl"].1.starts_with("tried"));
    assert!(checks["acl"].1.contains("hset (@hash)"));
    assert!(checks["acl"].1.contains("config|get"));
    assert!(checks["acl"].2.contains("+@hash"), "{:?}", checks["acl"]);
    assert!(!checks["acl"].2.contains("@admin"), "{:?}", checks["acl"]);
    assert!(!passed);
    // What CONFIG would have said is a warn, not a crash.
    assert_eq!(verdict(&checks, "persistence"), "ok");
    assert!(checks["persistence"].1.contains("CONFIG GET refused"));
    // The tried writes left nothing.
    assert_eq!(r.cmd::<i64>(&["DBSIZE"]).await, 0);
}

/// The README's least-privilege user passes: SCAN, left out of it on
/// purpose (only `delayq layout --hold 1` and `import-ouqiang` walk the
/// keys), is a warning naming what needs it, and its fix grants `+scan`,
/// not `+@keyspace` (FLUSHALL, FLUSHDB, RENAME).
#[tokio::test]
async fn the_readmes_acl_user_passes_with_a_warning_that_scan_is_for_layout_and_import() {
    let r = RedisServer::start();
    let mut setuser = vec!["ACL".to_owned()];
    setuser.extend(crate::security::acl::readme_acl_line("pw"));
    crate::security::acl::set_acl_user(&r, &setuser).await;
    let (passed, checks) = doctor(&r.url_as("delayq", "pw"), &[]);
    let (v, found, fix) = &checks["acl"];
    assert_eq!(v, "warn", "{:?}", checks["acl"]);
    assert!(found.contains("scan"), "{found}");
    assert!(found.contains("delayq layout --hold 1"), "{found}");
    assert!(found.contains("import-ouqiang"), "{found}");
    assert!(fix.contains("+scan"), "{fix}");
    assert!(!fix.contains('@'), "{fix}");
    assert!(passed, "{checks:?}");
}

/// A refused command that delayq needs alone is granted alone: the fix
/// never names a category for it (@keyspace holds FLUSHALL, @dangerous
/// much more), through ACL DRYRUN and through trying each command.
#[tokio::test]
async fn the_acl_fix_grants_single_commands_not_their_categories() {
    let r = RedisServer::start();
    let deny = ["-del", "-pexpire", "-pexpireat", "-time", "-info"];
    for (user, admin) in [("dryrun", "+@admin"), ("tried", "-@admin")] {
        let mut setuser = vec![
            "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", admin,
        ];
        setuser.extend(deny);
        r.cmd::<()>(&setuser).await;
        let (passed, checks) = doctor(&r.url_as(user, "pw"), &[]);
        let (v, found, fix) = &checks["acl"];
        assert_eq!(v, "fail", "{user}: {:?}", checks["acl"]);
        assert!(found.starts_with(if admin == "+@admin" {
            "ACL DRYRUN"
        } else {
            "tried"
        }));
        for command in ["del", "pexpire", "pexpireat", "time", "info"] {
            assert!(found.contains(command), "{user}: {found}");
            assert!(fix.contains(&format!("+{command}")), "{user}: {fix}");
        }
        assert!(!fix.contains('@'), "{user}: {fix}");
        assert!(!passed);
    }
}

#[tokio::test]
async fn a_password_is_used_and_a_wrong_one_is_a_failed_connection() {
    let r = RedisServer::start_with_password("s3cret", &[]);
    let (passed, checks) = doctor(&r.url(), &[]);
    assert_all_ok(&checks);
    assert!(passed);
    let wrong = r.url().replace("s3cret", "wrong");
    let (passed, checks) = doctor(&wrong, &[]);
    assert_eq!(verdict(&checks, "connection"), "fail");
    assert!(checks["connection"].2.contains("password"));
    assert!(!checks["connection"].1.contains("wrong"), "password shown");
    assert!(!passed);
}

/// The TLS check tries the handshake: a certificate this machine does not
/// trust, or a missing client certificate, is a fail naming the flag that
/// fixes it (not an ok from the URL's scheme beside a failed connection).
#[tokio::test]
async fn tls_is_tried_and_an_untrusted_or_missing_certificate_fails_naming_the_flag() {
    let certs = crate::tls::Certs::make();
    let ca = certs.path("ca.crt").to_str().unwrap().to_owned();
    let r = certs.server("no");
    // The system's roots do not know the test's CA.
    let (passed, checks) = doctor(&r.url(), &[]);
    assert_eq!(verdict(&checks, "tls"), "fail", "{:?}", checks["tls"]);
    assert!(
        checks["tls"].1.contains("certificate"),
        "{:?}",
        checks["tls"]
    );
    assert!(
        checks["tls"].2.contains("--redis-ca"),
        "{:?}",
        checks["tls"]
    );
    assert!(!passed);
    let (passed, checks) = doctor(&r.url(), &["--redis-ca", &ca]);
    assert_eq!(verdict(&checks, "tls"), "ok", "{:?}", checks["tls"]);
    assert!(checks["tls"].1.contains("certificate checked"));
    assert!(passed, "{checks:?}");
    let (_, checks) = doctor(&r.url(), &["--redis-insecure"]);
    assert_eq!(verdict(&checks, "tls"), "warn", "{:?}", checks["tls"]);

    // A server that asks for a client certificate.
    let r = certs.server("yes");
    let (passed, checks) = doctor(&r.url(), &["--redis-ca", &ca]);
    assert_eq!(verdict(&checks, "tls"), "fail", "{:?}", checks["tls"]);
    assert!(
        checks["tls"].2.contains("--redis-cert"),
        "{:?}",
        checks["tls"]
    );
    assert!(!passed);
    let (cert, key) = (certs.path("client.crt"), certs.path("client.key"));
    let (passed, checks) = doctor(
        &r.url(),
        &[
            "--redis-ca",
            &ca,
            "--redis-cert",
            cert.to_str().unwrap(),
            "--redis-key",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(verdict(&checks, "tls"), "ok", "{:?}", checks["tls"]);
    assert!(passed, "{checks:?}");
}

/// doctor and serve take the same TLS flags, said the same way.
#[test]
fn doctor_and_serve_take_the_same_tls_flags() {
    let help = |cmd: &str| -> Vec<String> {
        let out = delayq_run(&[cmd, "--help"], &[]);
        let text = String::from_utf8(out.stdout).unwrap();
        // Each flag's help, from its line to the next flag's.
        let mut flags = Vec::new();
        let mut current: Option<String> = None;
        for line in text.lines() {
            let t = line.trim();
            if t.starts_with("--") || t.starts_with("-h,") {
                flags.extend(current.take());
                if t.starts_with("--redis-") && !t.starts_with("--redis-cluster") {
                    current = Some(t.split_whitespace().collect::<Vec<_>>().join(" "));
                }
            } else if let Some(c) = &mut current {
                for word in t.split_whitespace() {
                    c.push(' ');
                    c.push_str(word);
                }
            }
        }
        flags.extend(current);
        flags.retain(|f| !f.starts_with("--redis-sentinel") && !f.starts_with("--redis-timeout"));
        flags
    };
    let (doctor, serve) = (help("doctor"), help("serve"));
    for flag in [
        "--redis-ca",
        "--redis-cert",
        "--redis-key",
        "--redis-insecure",
    ] {
        assert!(
            doctor.iter().any(|f| f.starts_with(flag)),
            "doctor lacks {flag}: {doctor:?}"
        );
    }
    let tls = |flags: Vec<String>| -> Vec<String> {
        flags
            .into_iter()
            .filter(|f| !f.starts_with("--redis <") && !f.starts_with("--redis-timeout"))
            .collect()
    };
    assert_eq!(tls(doctor), tls(serve));
}

/// The checks doctor runs on each master of a cluster.
const PER_MASTER: [&str; 9] = [
    "engine",
    "scripting",
    "eviction",
    "persistence",
    "memory",
    "round trip",
    "replicas",
    "events",
    "acl",
];

/// `doctor --redis-cluster` checks every master (its settings, expired
/// events and ACL: each master has its own) and reads the storage layout
/// through the master of each key's slot, beside a queue spread over the
/// three; pointed at one node with --redis, it says to give
/// --redis-cluster rather than failing on MOVED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_checked_on_every_master_with_redis_cluster_and_named_without_it() {
    use crate::redis_cluster::{addr, node_config, TestCluster};
    let cluster = TestCluster::start_with(3, 0, &node_config());
    let seeds = cluster.seeds();
    // A queue of 6 partitions, spread over the masters.
    let q = delayq::Queue::connect(delayq::Config {
        redis: delayq::Redis::Cluster(seeds.clone()),
        partitions: 6,
        ..delayq::Config::default()
    })
    .unwrap();
    let job = delayq::NewJob {
        id: "a".into(),
        topic: "t".into(),
        delay: std::time::Duration::from_secs(3600),
        ttr: std::time::Duration::from_secs(30),
        ..delayq::NewJob::default()
    };
    crate::common::retried("a push", || q.push(&job)).await;
    q.close().await;

    let (passed, rows) = doctor_rows(&["--redis-cluster", &seeds.join(",")]);
    let masters: Vec<String> = cluster.nodes.iter().map(addr).collect();
    for name in PER_MASTER {
        let on: Vec<&Row> = rows.iter().filter(|r| r.check == name).collect();
        let mut nodes: Vec<String> = on.iter().map(|r| r.node.clone()).collect();
        nodes.sort();
        let mut want = masters.clone();
        want.sort();
        assert_eq!(nodes, want, "{name}: {rows:#?}");
        if name != "round trip" {
            for r in on {
                assert_eq!(r.verdict, "ok", "{r:?}");
            }
        }
    }
    for name in ["tls", "cluster", "storage layout"] {
        let on: Vec<&Row> = rows.iter().filter(|r| r.check == name).collect();
        assert_eq!(on.len(), 1, "{name}: {rows:#?}");
        assert_eq!(on[0].verdict, "ok", "{:?}", on[0]);
        assert!(on[0].node.is_empty(), "{:?}", on[0]);
    }
    let layout = rows.iter().find(|r| r.check == "storage layout").unwrap();
    assert!(
        layout.found.contains("every running instance reads it"),
        "{layout:?}"
    );
    assert!(passed, "{rows:#?}");
    // Each master's canary was its own (no MOVED), and none is left.
    for n in &cluster.nodes {
        let left: Vec<String> = n.cmd(&["KEYS", "*doctor*"]).await;
        assert!(left.is_empty(), "{left:?}");
    }

    // Layout 3 in every partition and an instance that reads only 1: the
    // layout check reads each partition's flag on its master and the
    // heartbeat on its own.
    let client = redis::cluster::ClusterClient::new(seeds.clone()).unwrap();
    let mut c = client.get_async_connection().await.unwrap();
    for key in delayq::layout_keys("dq", 6) {
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("3")
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let (secs, _): (i64, i64) = redis::cmd("TIME").query_async(&mut c).await.unwrap();
    let now = secs * 1000;
    let beat = serde_json::json!({"id": "old-1", "host": "old", "pid": 1, "version": "0.1.0",
        "started_at_ms": now, "listen": "127.0.0.1:1", "waiting_pops": 0,
        "webhook_consumers": [], "dispatching": [], "last_seen_ms": now});
    let _: () = redis::cmd("SET")
        .arg("{dq}:instance:old-1")
        .arg(beat.to_string())
        .arg("PX")
        .arg(600_000)
        .query_async(&mut c)
        .await
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg("{dq}:instances")
        .arg(now + 600_000)
        .arg("old-1")
        .query_async(&mut c)
        .await
        .unwrap();
    let (passed, rows) = doctor_rows(&["--redis-cluster", &seeds.join(","), "--events-wait", "1s"]);
    let layout = rows.iter().find(|r| r.check == "storage layout").unwrap();
    assert_eq!(layout.verdict, "fail", "{layout:?}");
    assert!(layout.found.contains("layout 3 in force"), "{layout:?}");
    assert!(layout.found.contains("old-1"), "{layout:?}");
    assert!(!passed);

    // One node, as a single server: named a cluster node, no MOVED.
    let (passed, rows) = doctor_rows(&["--redis", &seeds[0], "--events-wait", "1s"]);
    let c = rows.iter().find(|r| r.check == "cluster").unwrap();
    assert_eq!(c.verdict, "fail", "{c:?}");
    assert!(c.found.contains("Redis Cluster node"), "{c:?}");
    assert!(c.fix.contains("--redis-cluster"), "{c:?}");
    for r in &rows {
        assert!(!r.found.to_lowercase().contains("moved"), "{r:?}");
    }
    assert!(!passed);
}

/// The cluster check names a master that is down and the slots nobody
/// serves, also where the cluster still says ok
/// (cluster-require-full-coverage no); the master is named unreachable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_with_a_master_down_fails_the_cluster_check_naming_it() {
    use crate::redis_cluster::{addr, text, TestCluster};
    let mut config = crate::redis_cluster::node_config().to_vec();
    config.extend(["--cluster-require-full-coverage", "no"]);
    let mut cluster = TestCluster::start_with(3, 0, &config);
    let survivor = format!("redis://{}/", addr(&cluster.nodes[1]));
    let args = ["--redis-cluster", survivor.as_str(), "--events-wait", "1s"];
    let (_, rows) = doctor_rows(&args);
    let c = rows.iter().find(|r| r.check == "cluster").unwrap();
    assert_eq!(c.verdict, "ok", "{c:?}");
    assert!(c.found.contains("3 masters"), "{c:?}");
    assert!(c.fix.is_empty());

    let down = addr(&cluster.nodes[0]);
    cluster.nodes[0].kill();
    // Both survivors (a majority of masters) mark it failed.
    let limit = std::time::Duration::from_secs(60);
    crate::common::eventually(limit, "the master marked failed", || async {
        [1, 2]
            .iter()
            .all(|&i| {
                text(&cluster.nodes[i], &["CLUSTER", "INFO"])
                    .is_some_and(|info| !info.contains("cluster_slots_fail:0"))
            })
            .then_some(())
    })
    .await;
    let info = text(&cluster.nodes[1], &["CLUSTER", "INFO"]).unwrap();
    assert!(info.contains("cluster_state:ok"), "{info}");
    let (passed, rows) = doctor_rows(&args);
    let c = rows.iter().find(|r| r.check == "cluster").unwrap();
    assert_eq!(c.verdict, "fail", "{c:?}");
    assert!(c.found.contains(&down), "{c:?}");
    assert!(c.found.contains("slots"), "{c:?}");
    assert!(
        c.fix.contains("replica") || c.fix.contains("bring"),
        "{c:?}"
    );
    assert!(!passed);
}

/// A user allowed EVALSHA and SCRIPT LOAD but not FCALL: delayq calls its
/// scripts by EVALSHA (FCALL refused, or missing on Redis 6.2), so doctor's
/// scripting line says that path and its ACL line asks for that path's
/// commands and passes; a queue under the user then works. On the run's
/// server, and on Redis 6.2 where DELAYQ_TEST_REDIS6 names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_allowed_evalsha_but_not_fcall_passes_the_acl_check_as_serve_works() {
    let redis6 = std::env::var("DELAYQ_TEST_REDIS6")
        .ok()
        .filter(|s| !s.is_empty());
    let servers = std::iter::once(None).chain(redis6.map(Some));
    for binary in servers {
        let r = match &binary {
            None => RedisServer::start(),
            Some(b) => RedisServer::start_binary(b, &[]),
        };
        r.cmd::<()>(&[
            "ACL",
            "SETUSER",
            "evalonly",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-@scripting",
            "+evalsha",
            "+script|load",
        ])
        .await;
        let url = r.url_as("evalonly", "pw");
        let (_, checks) = doctor(&url, &[]);
        let on = binary.as_deref().unwrap_or("the run's server");
        let scripting = &checks["scripting"];
        assert_eq!(scripting.0, "ok", "{on}: {scripting:?}");
        assert!(scripting.1.contains("EVAL/EVALSHA"), "{on}: {scripting:?}");
        let acl = &checks["acl"];
        assert_eq!(acl.0, "ok", "{on}: {acl:?}");
        assert!(acl.1.contains("scripts by EVALSHA"), "{on}: {acl:?}");
        // What doctor said: the queue runs by EVALSHA under this user.
        let q = delayq::Queue::connect(delayq::Config {
            redis: delayq::Redis::Url(url.clone()),
            ..delayq::Config::default()
        })
        .unwrap();
        q.push(&delayq::NewJob {
            id: "a".into(),
            topic: "t".into(),
            ttr: std::time::Duration::from_secs(30),
            ..delayq::NewJob::default()
        })
        .await
        .unwrap_or_else(|e| panic!("{on}: {e}"));
        assert!(q.get("a").await.unwrap().is_some(), "{on}");
        q.close().await;
    }
}

/// A master with a replica and no `min-replicas-to-write` keeps taking
/// writes when cut off from it (a split): doctor warns and names the
/// settings (and --replica-acks); with them set, the check passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_with_replicas_and_no_min_replicas_to_write_is_warned() {
    let (master, _replica) = crate::sentinel::master_and_replica();
    let (passed, checks) = doctor(&master.url(), &[]);
    let (v, found, fix) = &checks["replicas"];
    assert_eq!(v, "warn", "{found}");
    assert!(found.contains("1 replica connected"), "{found}");
    assert!(
        fix.contains("min-replicas-to-write 1")
            && fix.contains("min-replicas-max-lag")
            && fix.contains("--replica-acks")
            && fix.contains("appendfsync"),
        "{fix}"
    );
    assert!(passed, "a warning only");
    let _: () = master
        .cmd(&["CONFIG", "SET", "min-replicas-to-write", "1"])
        .await;
    let (_, checks) = doctor(&master.url(), &[]);
    assert_eq!(checks["replicas"].0, "ok", "{:?}", checks["replicas"]);
}
