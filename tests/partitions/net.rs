//! The network: one namespace per process on a private bridge, held in a hub
//! namespace of its own, so the host's network gains one veth and no more.
//!
//! Inside the hub there are three bridges: `bra` (the data network every
//! Redis, sentinel and delayq is on), `brb` (the minority side of a split)
//! and `brc` (the clients' network: the test process, through its one veth,
//! and each delayq's second interface). A partition moves data ports from
//! `bra` to `brb`, or off every bridge; a heal puts them all back on `bra`.
//! Packets across a cut are dropped silently, as a real split drops them:
//! nobody gets a refusal, only silence. iproute2 alone, no nftables.

use std::process::{Command, Stdio};

/// Every name this suite creates starts so, followed by the test process's
/// pid: leftovers of a dead run are found by it.
pub const PREFIX: &str = "dqpart-";

/// One topology's network (index `k`: its own subnets), removed on drop.
pub struct Net {
    pub k: u8,
    hub: String,
    nodes: Vec<String>,
    host_veth: String,
}

/// Runs `ip ARGS`, panicking with its error output when it fails.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run `ip` (iproute2): {e}"));
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

fn ip_quiet(args: &[&str]) -> String {
    Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Fails with what the suite needs when it cannot make namespaces: no
/// silent skip.
pub fn require_namespaces() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let probe = format!("{PREFIX}{}-probe", std::process::id());
    let made = root
        && Command::new("ip")
            .args(["netns", "add", &probe])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if made {
        ip(&["netns", "del", &probe]);
        return;
    }
    panic!(
        "the partition suite needs root and network namespaces (ip netns, veth, \
         bridges from iproute2): run it as root, as `./dev test` and CI do \
         (euid root: {root})"
    );
}

/// Removes what a dead earlier run left: namespaces (and the processes in
/// them) and host veths whose pid no longer lives.
pub fn remove_leftovers() {
    let alive = |pid: &str| std::path::Path::new(&format!("/proc/{pid}")).exists();
    for line in ip_quiet(&["netns", "list"]).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        if alive(pid) {
            continue;
        }
        kill_in(name);
        let _ = Command::new("ip").args(["netns", "del", name]).status();
    }
    for line in ip_quiet(&["-o", "link", "show"]).lines() {
        // "7: dq1234x0@if3: <...": host veths are dq<pid>x<k>.
        let Some(name) = line.split(": ").nth(1) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or("");
        if let Some(rest) = name.strip_prefix("dq") {
            if let Some((pid, _)) = rest.split_once('x') {
                if pid.chars().all(|c| c.is_ascii_digit()) && !alive(pid) {
                    let _ = Command::new("ip").args(["link", "del", name]).status();
                }
            }
        }
    }
}

/// SIGKILLs every process in namespace `ns`.
fn kill_in(ns: &str) {
    for pid in ip_quiet(&["netns", "pids", ns]).split_whitespace() {
        if let Ok(pid) = pid.parse::<i32>() {
            // SAFETY: kill(2) on a process of a namespace this suite made.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

impl Net {
    /// `nodes` processes, of which those marked `true` also get an address
    /// on the clients' network.
    pub fn new(k: u8, clients: &[bool]) -> Net {
        let pid = std::process::id();
        let hub = format!("{PREFIX}{pid}-{k}-hub");
        let nodes: Vec<String> = (0..clients.len())
            .map(|n| format!("{PREFIX}{pid}-{k}-n{n}"))
            .collect();
        let net = Net {
            k,
            hub: hub.clone(),
            nodes: nodes.clone(),
            host_veth: format!("dq{pid}x{k}"),
        };
        ip(&["netns", "add", &hub]);
        ip(&["-n", &hub, "link", "set", "lo", "up"]);
        for br in ["bra", "brb", "brc"] {
            ip(&["-n", &hub, "link", "add", br, "type", "bridge"]);
            ip(&["-n", &hub, "link", "set", br, "up"]);
        }
        for (n, ns) in nodes.iter().enumerate() {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            net.plug(n, "d", "eth0", "bra", &net.data_ip(n));
            if clients[n] {
                net.plug(n, "c", "eth1", "brc", &net.client_ip(n));
            }
        }
        let hv = &net.host_veth;
        ip(&[
            "link", "add", hv, "type", "veth", "peer", "name", "host", "netns", &hub,
        ]);
        ip(&["-n", &hub, "link", "set", "host", "master", "brc", "up"]);
        ip(&["addr", "add", &format!("{}/24", net.host_ip()), "dev", hv]);
        ip(&["link", "set", hv, "up"]);
        net
    }

    /// A veth from the hub (`{prefix}{n}` on `bridge`) to node `n` (`dev`,
    /// with `addr`).
    fn plug(&self, n: usize, prefix: &str, dev: &str, bridge: &str, addr: &str) {
        let (hub, ns) = (&self.hub, &self.nodes[n]);
        let port = format!("{prefix}{n}");
        ip(&[
            "-n", hub, "link", "add", &port, "type", "veth", "peer", "name", dev, "netns", ns,
        ]);
        ip(&["-n", hub, "link", "set", &port, "master", bridge, "up"]);
        ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]);
        ip(&["-n", ns, "link", "set", dev, "up"]);
    }

    pub fn data_ip(&self, n: usize) -> String {
        format!("10.231.{}.{}", self.k, n + 1)
    }

    pub fn client_ip(&self, n: usize) -> String {
        format!("10.232.{}.{}", self.k, n + 1)
    }

    fn host_ip(&self) -> String {
        format!("10.232.{}.254", self.k)
    }

    /// A command run inside node `n`'s namespace.
    pub fn command(&self, n: usize, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.nodes[n], program]);
        c
    }

    /// Moves nodes to the minority bridge: they hear each other, nobody else.
    pub fn split(&self, minority: &[usize]) {
        for &n in minority {
            ip(&[
                "-n",
                &self.hub,
                "link",
                "set",
                &format!("d{n}"),
                "master",
                "brb",
            ]);
        }
    }

    /// Takes node `n` off every bridge: its data link hears nothing.
    pub fn cut(&self, n: usize) {
        ip(&["-n", &self.hub, "link", "set", &format!("d{n}"), "nomaster"]);
    }

    /// Every data port back on the one bridge.
    pub fn heal(&self) {
        for n in 0..self.nodes.len() {
            ip(&[
                "-n",
                &self.hub,
                "link",
                "set",
                &format!("d{n}"),
                "master",
                "bra",
            ]);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in &self.nodes {
            kill_in(ns);
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_veth])
            .stderr(Stdio::null())
            .status();
        for ns in self.nodes.iter().chain([&self.hub]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}
