//! Trim: dead-letter retention for one topic. The script is `trim.lua`.

use super::nack::Retention;
use super::{Script, Status, Store};
use crate::error::Result;
use crate::redis::Fields;

pub const SCRIPT: Script = Script {
    name: "trim",
    source: include_str!("trim.lua"),
    when_full: true,
    acked: false,
    late_unknown: true,
};

/// The reply: DONE and how many jobs were dropped.
fn decode((_, mut f): (Status, Fields)) -> Result<u64> {
    Ok(f.int()?.max(0) as u64)
}

impl Store {
    /// Drops up to 200 of `topic`'s dead jobs beyond `retention`; returns
    /// how many.
    pub(crate) async fn trim(&self, part: usize, topic: &str, retention: Retention) -> Result<u64> {
        let mut cmd = self.script(&SCRIPT, part);
        cmd.arg(topic)
            .arg(retention.max_per_topic)
            .arg(retention.max_age.as_millis() as u64);
        decode(self.send(cmd).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::reply::sample;

    #[test]
    fn decodes_how_many() {
        let d = |r: &[&str]| decode(Fields::parse("trim", sample(r)).unwrap());
        assert_eq!(d(&["0", "7"]).unwrap(), 7);
        assert_eq!(d(&["0", "0"]).unwrap(), 0);
        assert!(d(&["0"]).is_err());
        assert!(d(&["0", "x"]).is_err());
    }
}
