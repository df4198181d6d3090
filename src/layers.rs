//! The crate's layers, lowest first, and the test that holds them: a
//! module imports (`crate::...`) from the layers below its own, and within
//! its layer only from the modules listed before it. So no two top-level
//! modules import each other, even through others, and nothing imports
//! upward. The binary (`main.rs`, `cli/`) sits on top and sees only the
//! library's public items.
//!
//! Every loop that lives with a queue is started, and stopped, in
//! `loops/`; a file elsewhere that spawns a task is listed below with
//! the reason, and a second test holds the list.

/// (layer, its top-level modules in the order they may import each other).
const LAYERS: &[(&str, &[&str])] = &[
    // Errors, durations, shutdown, backoff, retry policies, defaults, TLS roots.
    (
        "base",
        &[
            "duration", "defaults", "error", "shutdown", "backoff", "retry", "https", "layers",
        ],
    ),
    // Reaching Redis and calling it: connections, deadlines, replica acks,
    // health, group commit, a script library it is given. Nothing of jobs.
    ("redis", &["redis"]),
    // What a job is: its types and limits, trace context, rate limits,
    // groups, recurring rules, and the figures delayq reports.
    (
        "model",
        &[
            "trace",
            "batch",
            "job",
            "flow",
            "rate",
            "group",
            "recurring",
            "figures",
        ],
    ),
    // Everything delayq says to Redis: the scripts and the key layout.
    ("store", &["store"]),
    // The queue, its loops, metrics and stats, waiters, consumers, webhooks.
    (
        "engine",
        &[
            "stats",
            "metrics",
            "waiters",
            "loops",
            "queue",
            "instances",
            "consumer",
            "webhook",
        ],
    ),
    // The edge: the native API's contract and the HTTP server.
    ("api", &["wire", "http"]),
];

/// Files outside `loops/` (the loops' home, which starts and stops
/// every loop that lives with a queue) that spawn tasks, and why each may.
const SPAWNS_ELSEWHERE: &[(&str, &str)] = &[
    (
        "consumer.rs",
        "a consumer's handlers, and its finisher, which ends with it",
    ),
    (
        "webhook/delivery.rs",
        "a webhook's finisher and status flusher, which end with it",
    ),
    (
        "webhook/ahead.rs",
        "a webhook's deliveries and give-backs, each ending when done",
    ),
    ("http/mod.rs", "one task per HTTP connection"),
    (
        "queue/pop.rs",
        "one pop call outliving its caller; giving back late leases",
    ),
    ("queue/push.rs", "one read of the retry policy"),
    (
        "queue/outcomes.rs",
        "the outcome waiters' poll, ending when none waits or the queue stops",
    ),
    (
        "store/pop/batch.rs",
        "giving back the jobs of a pop whose caller had gone",
    ),
    (
        "redis/coalesce.rs",
        "group commit's senders, each ending when its lane is empty",
    ),
    (
        "store/unpop.rs",
        "giving back lost pops' jobs, ending when none is left",
    ),
    ("redis/conn.rs", "making a connection"),
    ("trace/otlp.rs", "the process's span exporter"),
];

#[cfg(test)]
mod bounds;
#[cfg(test)]
mod circles;
#[cfg(test)]
mod source;
#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet, HashMap};
    use std::path::Path;

    use super::source::{code, files};
    use super::{LAYERS, SPAWNS_ELSEWHERE};

    /// The first segments after every `crate::` (each of a `{...}` group).
    fn crate_paths(code: &str) -> Vec<String> {
        let mut out = Vec::new();
        let ident = |s: &str| -> String {
            s.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        };
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let mut depth = 0;
                let mut start = true;
                for (j, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => start = true,
                        c if c.is_whitespace() => {}
                        _ if start && depth == 0 => {
                            out.push(ident(&group[j..]));
                            start = false;
                        }
                        _ => {}
                    }
                }
            } else {
                out.push(ident(rest));
            }
        }
        out
    }

    /// lib.rs's re-exports (`crate::Queue` is `queue`'s).
    fn reexports(lib: &str) -> HashMap<String, String> {
        let mut map = HashMap::new();
        for stmt in code(lib).split(';') {
            let Some(rest) = stmt.trim().strip_prefix("pub use ") else {
                continue;
            };
            let Some((module, items)) = rest.split_once("::") else {
                continue;
            };
            for name in items.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
                if !name.is_empty() {
                    map.insert(name.to_owned(), module.to_owned());
                }
            }
        }
        map
    }

    /// Every import that breaks the layers, as "file: module -> module".
    fn violations(src: &Path) -> Vec<String> {
        let mut rank: HashMap<&str, (usize, usize)> = HashMap::new();
        for (l, (_, modules)) in LAYERS.iter().enumerate() {
            for (m, name) in modules.iter().enumerate() {
                assert!(rank.insert(name, (l, m)).is_none(), "{name} twice");
            }
        }
        let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
        let declared: BTreeSet<String> = code(&lib)
            .lines()
            .filter_map(|l| l.trim().split_once("mod ").map(|(_, m)| m))
            .map(|m| m.trim_end_matches(';').trim().to_owned())
            .filter(|m| !m.is_empty())
            .collect();
        let listed: BTreeSet<String> = rank.keys().map(|m| m.to_string()).collect();
        assert_eq!(declared, listed, "lib.rs's modules and LAYERS differ");
        let reexported = reexports(&lib);
        let mut all = Vec::new();
        files(src, &mut all);
        let mut bad = BTreeMap::new();
        for path in all {
            let rel = path.strip_prefix(src).unwrap();
            let top = rel.components().next().unwrap().as_os_str();
            let top = top.to_str().unwrap().trim_end_matches(".rs");
            let Some(&(layer, at)) = rank.get(top) else {
                continue; // lib.rs, and the binary's main.rs and cli/
            };
            let text = std::fs::read_to_string(&path).unwrap();
            for name in crate_paths(&code(&text)) {
                let target = reexported.get(&name).cloned().unwrap_or(name);
                let Some(&(l, m)) = rank.get(target.as_str()) else {
                    continue; // an item of lib.rs itself (VERSION)
                };
                if target != top && (l > layer || (l == layer && m > at)) {
                    bad.insert(format!("{}: {top} -> {target}", rel.display()), ());
                }
            }
        }
        bad.into_keys().collect()
    }

    #[test]
    fn every_import_points_down() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let bad = violations(&src);
        assert!(
            bad.is_empty(),
            "imports against the layers:\n{}",
            bad.join("\n")
        );
    }

    #[test]
    fn tasks_are_spawned_from_the_loops_home_or_for_a_listed_reason() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut all = Vec::new();
        files(&src, &mut all);
        let mut spawning = BTreeSet::new();
        for path in all {
            let rel = path
                .strip_prefix(&src)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned();
            if rel.starts_with("loops/") || rel.starts_with("cli/") || rel == "main.rs" {
                continue;
            }
            let text = code(&std::fs::read_to_string(&path).unwrap());
            if text.contains("spawn(") {
                spawning.insert(rel);
            }
        }
        let listed: BTreeSet<String> = SPAWNS_ELSEWHERE
            .iter()
            .map(|(f, _)| f.to_string())
            .collect();
        assert_eq!(spawning, listed, "files that spawn tasks outside loops/");
    }

    #[test]
    fn imports_are_read_from_code_only() {
        let text = "use crate::{job::Job, store::{a, b}};\n\
                    // crate::http in a comment\n\
                    let s = \"crate::wire\"; let x = crate::queue::Queue::new(); // crate::cli\n";
        assert_eq!(crate_paths(&code(text)), ["job", "store", "queue"]);
    }
}
