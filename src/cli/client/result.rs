//! `delayq work --result-stdout`: a command's standard output as its
//! job's result, bounded.

use delayq::defaults::MAX_RESULT_BYTES;
use tokio::io::AsyncReadExt;

/// A command's output as its job's result: None (said on stderr) when
/// empty or over the limit.
pub(super) fn result_of(id: &str, out: &[u8]) -> Option<serde_json::Value> {
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
            "delayq work: {id}: its output is over {MAX_RESULT_BYTES} bytes as JSON; the job finishes without a result"
        );
        return None;
    }
    Some(value)
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
