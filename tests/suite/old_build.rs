//! The old build: `delayq` of an earlier commit, built from its source
//! kept in the repository, for the upgrade tests (a queue written by it
//! must survive the current build, and the way back).
//!
//! The source is `tests/upgrade/<commit>.tar.gz`, written by `./dev
//! old-source <commit>` from the history (`git archive`: the same commit
//! gives the same bytes). It is committed rather than read from the
//! history when the tests run, because CI's clone may be shallow and the
//! tests then need no git, no network and no history.
//!
//! Built once per machine and commit: the binary is cached as
//! `target/upgrade/<commit>/delayq`. Every old commit compiles in one
//! cargo target dir of its own (`target/upgrade/build`), so dependencies
//! that did not change between commits compile once; not the suite's own
//! target dir, which the running `cargo test` holds locked.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use crate::common::{DelayqProcess, RedisServer};

/// The old build: delayq before the second storage layout.
pub const OLD_COMMIT: &str = "68ed983a0eac34917e3d345ad9ff3ed9d52e6a52";

/// The suite's target dir (`target/`), from cargo's scratch dir for
/// integration tests (`target/tmp`).
fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR has a parent")
        .to_path_buf()
}

/// The old build's binary, built on first use (minutes, once per machine).
pub fn old_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build(OLD_COMMIT)).clone()
}

/// `delayq serve` of the old build on `redis`, with `extra` flags.
pub fn start_old(redis: &RedisServer, extra: &[&str]) -> DelayqProcess {
    start_binary(&old_binary(), redis, extra)
}

/// `delayq serve` of this build on `redis`, with `extra` flags.
pub fn start_new(redis: &RedisServer, extra: &[&str]) -> DelayqProcess {
    start_binary(Path::new(env!("CARGO_BIN_EXE_delayq")), redis, extra)
}

fn start_binary(bin: &Path, redis: &RedisServer, extra: &[&str]) -> DelayqProcess {
    DelayqProcess::spawn_from(serve(bin, &redis.url(), extra).stderr(Stdio::inherit()))
}

/// `delayq serve` of the old build (`old`) or this one on the Redis at
/// `url`, logging as `filter` says; its log lines arrive on the channel.
pub fn start_logged(
    old: bool,
    url: &str,
    filter: &str,
) -> (DelayqProcess, std::sync::mpsc::Receiver<String>) {
    let bin = match old {
        true => old_binary(),
        false => PathBuf::from(env!("CARGO_BIN_EXE_delayq")),
    };
    DelayqProcess::spawn_logged_from(serve(&bin, url, &[]).env("DELAYQ_LOG", filter))
}

fn serve(bin: &Path, url: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--redis", url])
        .args(extra)
        .env("DELAYQ_LOG", "warn")
        .env_remove("DELAYQ_AUTH_TOKEN");
    cmd
}

fn build(commit: &str) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let archive = manifest.join(format!("tests/upgrade/{commit}.tar.gz"));
    assert!(
        archive.is_file(),
        "the old build's source {} is missing: write it with `./dev old-source {commit}` \
         (from a clone that has the commit: `git fetch --unshallow` on a shallow one)",
        archive.display()
    );
    let dir = target_dir().join("upgrade").join(commit);
    let bin = dir.join("delayq");
    if bin.is_file() {
        return bin;
    }
    std::fs::create_dir_all(&dir).unwrap();
    check_archive_commit(&archive, commit);

    // Unpacked beside, then renamed: a half-unpacked tree is never taken
    // for the source by a later run.
    let src = dir.join("src");
    if !src.join("Cargo.toml").is_file() {
        let tmp = dir.join(format!("src.tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).unwrap();
        run(Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(&tmp));
        if std::fs::rename(&tmp, &src).is_err() {
            // Another run unpacked it first.
            let _ = std::fs::remove_dir_all(&tmp);
            assert!(
                src.join("Cargo.toml").is_file(),
                "{} unusable",
                src.display()
            );
        }
    }

    let build_dir = target_dir().join("upgrade").join("build");
    eprintln!("building delayq {commit} for the upgrade tests (once per machine: minutes)");
    let started = Instant::now();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Niced: the tests running meanwhile keep their share of the cores.
    run(Command::new("nice")
        .args(["-n", "10"])
        .arg(cargo)
        .current_dir(&src)
        .args(["build", "--locked", "--bin", "delayq"])
        .env("CARGO_TARGET_DIR", &build_dir)
        // Run, never debugged: no debug info or incremental state to
        // write (less time and disk).
        .env("CARGO_PROFILE_DEV_DEBUG", "false")
        .env("CARGO_INCREMENTAL", "0")
        // The suite's own package, not the old source's.
        .env_remove("CARGO_MANIFEST_DIR")
        .env_remove("CARGO_MANIFEST_PATH"));
    eprintln!("built delayq {commit} in {:.0?}", started.elapsed());
    let tmp = dir.join(format!("delayq.tmp-{}", std::process::id()));
    std::fs::copy(build_dir.join("debug/delayq"), &tmp).unwrap();
    std::fs::rename(&tmp, &bin).unwrap();
    bin
}

/// `git archive` of a commit starts with a pax header naming the commit:
/// the archive must be of `commit`, not of another one renamed.
fn check_archive_commit(archive: &Path, commit: &str) {
    let mut gz = Command::new("gzip")
        .arg("-dc")
        .arg(archive)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("gzip: {e}"));
    let mut head = Vec::new();
    gz.stdout
        .take()
        .unwrap()
        .take(1024)
        .read_to_end(&mut head)
        .unwrap();
    let _ = gz.kill();
    let _ = gz.wait();
    let named = format!("comment={commit}\n");
    assert!(
        String::from_utf8_lossy(&head).contains(&named),
        "{} is not the source of {commit}: write it again with `./dev old-source {commit}`",
        archive.display()
    );
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
