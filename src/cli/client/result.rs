//! `delayq work --result-stdout` and `--result-file`: a command's standard
//! output, or a file of its own, as its job's result, bounded.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use delayq::defaults::{MAX_PROGRESS_DEPTH, MAX_RESULT_BYTES};
use tokio::io::AsyncReadExt;

/// The variable a command finds its result file's path in.
const RESULT_FILE_VAR: &str = "DELAYQ_RESULT_FILE";

/// Where a job's result comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum ResultFrom {
    /// Nowhere: the job finishes without one.
    Nothing,
    /// The command's standard output.
    Stdout,
    /// A fresh file per job, named in [`RESULT_FILE_VAR`].
    File,
}

impl ResultFrom {
    /// From `work`'s flags (clap lets one of them be given at most).
    pub(super) fn of(stdout: bool, file: bool) -> ResultFrom {
        match (stdout, file) {
            (true, _) => ResultFrom::Stdout,
            (_, true) => ResultFrom::File,
            _ => ResultFrom::Nothing,
        }
    }

    /// What the result was read from, for `work`'s warnings.
    fn what(self) -> &'static str {
        match self {
            ResultFrom::File => "result file",
            _ => "output",
        }
    }
}

/// What a command left as its job's result (its first
/// `MAX_RESULT_BYTES + 1` bytes) as the result itself: JSON as it is,
/// other text as a JSON string. None (said on stderr) when empty, over the
/// limit or nested deeper than the server keeps.
pub(super) fn result_of(id: &str, from: ResultFrom, out: &[u8]) -> Option<serde_json::Value> {
    let what = from.what();
    let text = String::from_utf8_lossy(out);
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let value =
        serde_json::from_str(text).unwrap_or_else(|_| serde_json::Value::String(text.to_owned()));
    let bytes = value.to_string().len();
    if bytes > MAX_RESULT_BYTES || out.len() > MAX_RESULT_BYTES {
        errln!(
            "delayq work: {id}: its {what} is over {MAX_RESULT_BYTES} bytes as JSON; the job finishes without a result"
        );
        return None;
    }
    // The server refuses a deeper one, and the job would stay leased.
    let depth = depth(&value);
    if depth > MAX_PROGRESS_DEPTH {
        errln!(
            "delayq work: {id}: its {what} nests {depth} levels of arrays and objects (at most {MAX_PROGRESS_DEPTH}); the job finishes without a result"
        );
        return None;
    }
    Some(value)
}

/// Levels of arrays and objects in `value` (a scalar: 0), counted as the
/// server counts them, without recursion.
fn depth(value: &serde_json::Value) -> usize {
    let mut deepest = 0;
    let mut open = vec![(value, 1)];
    while let Some((v, d)) = open.pop() {
        let inner: Box<dyn Iterator<Item = &serde_json::Value>> = match v {
            serde_json::Value::Array(a) => Box::new(a.iter()),
            serde_json::Value::Object(o) => Box::new(o.values()),
            _ => continue,
        };
        deepest = deepest.max(d);
        open.extend(inner.map(|i| (i, d + 1)));
    }
    deepest
}

/// The first `limit` bytes of `r`, read to its end (the rest dropped as
/// it comes, so a command writing more never blocks).
pub(super) async fn head_of(mut r: impl tokio::io::AsyncRead + Unpin, limit: usize) -> Vec<u8> {
    let mut head = Vec::new();
    let mut buf = vec![0; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return head,
            Ok(n) => {
                let room = limit.saturating_sub(head.len()).min(n);
                head.extend_from_slice(&buf[..room]);
            }
        }
    }
}

/// One job's result file: created empty (only its owner may read it) in
/// the temporary directory under a name no other job of any `work` has,
/// so commands running at once never share one; removed when dropped,
/// however its command ended.
pub(super) struct ResultFile {
    path: PathBuf,
}

impl ResultFile {
    /// A new file for `cmd` to leave its result in, named in its
    /// environment, if `from` says so. Without one, `cmd` gets none, not
    /// even one inherited from `work`'s environment (a `work` run by
    /// another's command).
    pub(super) fn for_command(
        from: ResultFrom,
        cmd: &mut tokio::process::Command,
    ) -> std::io::Result<Option<ResultFile>> {
        if from != ResultFrom::File {
            cmd.env_remove(RESULT_FILE_VAR);
            return Ok(None);
        }
        let file = ResultFile::create()?;
        cmd.env(RESULT_FILE_VAR, &file.path);
        Ok(Some(file))
    }

    /// Whether a result file can be made, if `from` takes one: checked
    /// before the first job, not found out by every job in turn.
    pub(super) fn check(from: ResultFrom) -> std::io::Result<()> {
        if from == ResultFrom::File {
            drop(ResultFile::create()?);
        }
        Ok(())
    }

    fn create() -> std::io::Result<ResultFile> {
        use std::os::unix::fs::OpenOptionsExt;
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir();
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("delayq-result-{}-{n}", std::process::id()));
            // create_new: never one left by an earlier process of this pid,
            // nor a link someone put in its place.
            let made = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path);
            match made {
                Ok(_) => return Ok(ResultFile { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    let e = format!("cannot create a result file in {}: {e}", dir.display());
                    return Err(std::io::Error::other(e));
                }
            }
        }
    }

    /// Its first `MAX_RESULT_BYTES + 1` bytes (one more than the limit is
    /// enough to know it is over). Gone: nothing. Not a regular file (the
    /// command put a pipe or a device there): nothing, said on stderr, as
    /// it might never end. Read in place: a local file, 64 KiB at most.
    pub(super) fn read(&self, id: &str) -> Vec<u8> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        let open = || {
            // Non-blocking: a pipe opens at once, and what was opened is
            // what is looked at (whatever else the command left running
            // does meanwhile).
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&self.path)?;
            if !file.metadata()?.is_file() {
                return Err(std::io::Error::other("not a regular file"));
            }
            let mut head = Vec::new();
            file.take(MAX_RESULT_BYTES as u64 + 1)
                .read_to_end(&mut head)?;
            Ok(head)
        };
        match open() {
            Ok(head) => head,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                errln!(
                    "delayq work: {id}: its result file {}: {e}; the job finishes without a result",
                    self.path.display()
                );
                Vec::new()
            }
        }
    }
}

impl Drop for ResultFile {
    fn drop(&mut self) {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => errln!(
                "delayq work: cannot remove the result file {}: {e}",
                self.path.display()
            ),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn a_result_is_kept_up_to_the_servers_limits_and_not_one_past_them() {
        let from = ResultFrom::File;
        let at_limit = nested(MAX_PROGRESS_DEPTH);
        assert!(result_of("j", from, at_limit.as_bytes()).is_some());
        assert_eq!(result_of("j", from, nested(65).as_bytes()), None);
        // The string's quotes make the JSON two bytes longer than the text.
        let text = "x".repeat(MAX_RESULT_BYTES - 2);
        assert_eq!(
            result_of("j", from, text.as_bytes()),
            Some(serde_json::Value::String(text.clone()))
        );
        assert_eq!(result_of("j", from, format!("{text}x").as_bytes()), None);
        assert_eq!(
            result_of("j", from, b" {\"a\": 1}\n"),
            Some(serde_json::json!({"a": 1}))
        );
        assert_eq!(result_of("j", from, b" \n"), None);
    }
}
