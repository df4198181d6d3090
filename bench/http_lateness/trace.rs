//! Where a traced run's time went: Redis's MONITOR feed and SLOWLOG, read
//! per job into the stages from due to receipt.

use super::*;

/// Redis's MONITOR feed, read on a thread of its own until stopped.
pub(super) struct Monitor {
    pub(super) stop: Arc<AtomicBool>,
    pub(super) thread: std::thread::JoinHandle<Vec<String>>,
}

impl Monitor {
    pub(super) fn start(redis: &Redis) -> Monitor {
        let port = redis.port().expect("a TCP server");
        let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
        conn.write_all(b"MONITOR\r\n").unwrap();
        conn.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut reader = BufReader::new(conn);
        let mut ok = String::new();
        reader.read_line(&mut ok).unwrap();
        assert_eq!(ok.trim(), "+OK", "MONITOR said {ok:?}");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut lines = Vec::new();
            let mut line = String::new();
            while !flag.load(Ordering::Relaxed) {
                match reader.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) if line.ends_with('\n') => {
                        lines.push(std::mem::take(&mut line));
                    }
                    // A partial line stays in `line` until the rest comes.
                    _ => {}
                }
            }
            lines
        });
        Monitor { stop, thread }
    }

    pub(super) fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Every SLOWLOG entry: (function or command, run time in us).
pub(super) fn slowlog(redis: &Redis) -> Vec<(String, i64)> {
    let mut c = redis.client().get_connection().unwrap();
    let rows: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(&mut c)
        .unwrap();
    let mut out = Vec::new();
    for row in rows {
        let redis::Value::Array(f) = row else {
            continue;
        };
        let (Some(redis::Value::Int(us)), Some(redis::Value::Array(args))) = (f.get(2), f.get(3))
        else {
            continue;
        };
        let word = |i: usize| match args.get(i) {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).to_string(),
            _ => String::new(),
        };
        let cmd = word(0).to_uppercase();
        // Redis logs the commands inside a script too: only the calls.
        if cmd == "FCALL" {
            out.push((function_name(&word(1)), *us));
        }
    }
    out
}

/// `dq_pop_1a2b3c` -> `pop`.
fn function_name(f: &str) -> String {
    let f = f.strip_prefix("dq_").unwrap_or(f);
    match f.rsplit_once('_') {
        Some((name, _version)) => name.to_owned(),
        None => f.to_owned(),
    }
}

/// A traced run's raw material.
#[derive(Default)]
pub(super) struct Trace {
    pub(super) monitor: Vec<String>,
    pub(super) slowlog: Vec<(String, i64)>,
    pub(super) due: HashMap<String, i64>,
    pub(super) got: HashMap<String, f64>,
    /// `/healthz` round trips before the run, ms, sorted.
    pub(super) rtt: Vec<f64>,
}

/// Per job, from the MONITOR feed: when the dispatch call that moved it
/// and the pop call that took it started (Unix ms), whether that dispatch
/// was the sweep's (no ids given) and whether it published a ready notice.
#[derive(Default, Clone, Copy)]
struct Stamps {
    dispatch: Option<f64>,
    pop: Option<f64>,
    sweep: bool,
    notice: bool,
}

fn parse_monitor(lines: &[String]) -> HashMap<String, Stamps> {
    let mut out: HashMap<String, Stamps> = HashMap::new();
    // The call whose script lines follow: (start ms, function, its line).
    let mut call: Option<(f64, String, usize)> = None;
    // Jobs the current dispatch call moved (for its notice, if any).
    let mut moved: Vec<String> = Vec::new();
    let mut published = false;
    fn flush(moved: &mut Vec<String>, published: &mut bool, out: &mut HashMap<String, Stamps>) {
        for id in moved.drain(..) {
            out.entry(id).or_default().notice = *published;
        }
        *published = false;
    }
    for (n, line) in lines.iter().enumerate() {
        let line = line.trim_start_matches('+').trim_end();
        let Some((ts, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(ts) = ts.parse::<f64>() else {
            continue;
        };
        let ms = ts * 1000.0;
        let Some((src, args)) = rest.split_once("] ") else {
            continue;
        };
        if !src.ends_with(" lua") {
            flush(&mut moved, &mut published, &mut out);
            let mut words = args.split(' ').map(|w| w.trim_matches('"'));
            call = match words.next().map(str::to_uppercase).as_deref() {
                Some("FCALL") => words.next().map(|f| (ms, function_name(f), n)),
                _ => None,
            };
            continue;
        }
        let Some((start, name, call_line)) = call.as_ref() else {
            continue;
        };
        let lower = args.to_lowercase();
        if name == "dispatch" && lower.starts_with("\"publish\"") {
            published = true;
        }
        // The script's write to the job's hash names the job.
        if !lower.starts_with("\"hset\"") {
            continue;
        }
        let Some(at) = args.find("{dq}:j:") else {
            continue;
        };
        let id: String = args[at + 7..].chars().take_while(|c| *c != '"').collect();
        let s = out.entry(id.clone()).or_default();
        match name.as_str() {
            "dispatch" if s.dispatch.is_none() => {
                s.dispatch = Some(*start);
                // The sweep's call names no ids; an expired event's does.
                s.sweep = !lines[*call_line].contains(&id);
                moved.push(id);
            }
            "pop" if s.pop.is_none() => s.pop = Some(*start),
            _ => {}
        }
    }
    flush(&mut moved, &mut published, &mut out);
    out
}

/// The stages of one traced run, per job (ms), and the scripts' run times.
pub(super) struct Breakdown {
    pub(super) to_dispatch: Vec<f64>,
    pub(super) dispatch_to_pop: Vec<f64>,
    pub(super) pop_to_receipt: Vec<f64>,
    pub(super) total: Vec<f64>,
    pub(super) sweep_share: f64,
    pub(super) notice_share: f64,
    /// Function -> sorted run times (us).
    pub(super) scripts: BTreeMap<String, Vec<f64>>,
    pub(super) rtt: Vec<f64>,
}

pub(super) fn breakdown(t: &Trace) -> Breakdown {
    let stamps = parse_monitor(&t.monitor);
    let (mut a, mut b, mut c, mut total) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut sweeps, mut notices, mut n) = (0, 0, 0);
    for (id, got) in &t.got {
        let (Some(due), Some(s)) = (t.due.get(id), stamps.get(id)) else {
            continue;
        };
        let (Some(d), Some(p)) = (s.dispatch, s.pop) else {
            continue;
        };
        let due = *due as f64;
        a.push(d - due);
        b.push(p - d);
        c.push(got - p);
        total.push(got - due);
        n += 1;
        sweeps += s.sweep as usize;
        notices += s.notice as usize;
    }
    for v in [&mut a, &mut b, &mut c, &mut total] {
        v.sort_by(|x, y| x.partial_cmp(y).unwrap());
    }
    let mut scripts: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (name, us) in &t.slowlog {
        scripts.entry(name.clone()).or_default().push(*us as f64);
    }
    for v in scripts.values_mut() {
        v.sort_by(|x, y| x.partial_cmp(y).unwrap());
    }
    let share = |k: usize| k as f64 / n.max(1) as f64;
    Breakdown {
        to_dispatch: a,
        dispatch_to_pop: b,
        pop_to_receipt: c,
        total,
        sweep_share: share(sweeps),
        notice_share: share(notices),
        scripts,
        rtt: t.rtt.clone(),
    }
}
