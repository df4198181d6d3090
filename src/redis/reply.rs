//! Reading a script's reply: the status first, then values in order. What
//! a status means is the scripts' own ([`Code`]).

use redis::Value;

use crate::error::{Error, Result};

/// A status the scripts report, read from its code.
pub trait Code: Sized {
    fn from_code(code: i64) -> Option<Self>;
}

/// The values of one reply after its status, read front to back.
#[derive(Debug)]
pub struct Fields {
    op: &'static str,
    items: std::vec::IntoIter<Value>,
}

impl Fields {
    /// Splits a reply into its status and the rest.
    pub fn parse<S: Code>(op: &'static str, reply: Value) -> Result<(S, Fields)> {
        let Value::Array(items) = reply else {
            return Err(Error::protocol(
                op,
                format!("reply is not a table: {reply:?}"),
            ));
        };
        let mut f = Fields {
            op,
            items: items.into_iter(),
        };
        let status = f.status()?;
        Ok((status, f))
    }

    /// A status: a reply's first value, or one job's in a reply over many.
    pub fn status<S: Code>(&mut self) -> Result<S> {
        let code = self.int()?;
        S::from_code(code).ok_or_else(|| Error::protocol(self.op, format!("unknown status {code}")))
    }

    fn next(&mut self) -> Result<Value> {
        self.items
            .next()
            .ok_or_else(|| Error::protocol(self.op, "reply too short".into()))
    }

    /// The values not read yet.
    pub fn left(&self) -> usize {
        self.items.len()
    }

    /// An integer (Lua numbers arrive as integers, hash values as strings).
    pub fn int(&mut self) -> Result<i64> {
        match self.next()? {
            Value::Int(n) => Ok(n),
            Value::BulkString(b) => std::str::from_utf8(&b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| Error::protocol(self.op, format!("not a number: {b:?}"))),
            v => Err(Error::protocol(self.op, format!("not a number: {v:?}"))),
        }
    }

    pub fn string(&mut self) -> Result<String> {
        match self.next()? {
            Value::BulkString(b) => String::from_utf8(b)
                .map_err(|e| Error::protocol(self.op, format!("not UTF-8: {e}"))),
            Value::SimpleString(s) => Ok(s),
            Value::Int(n) => Ok(n.to_string()),
            v => Err(Error::protocol(self.op, format!("not a string: {v:?}"))),
        }
    }
}

/// A sample reply, as Redis would send it, for the decoders' unit tests.
#[cfg(test)]
pub(crate) fn sample(items: &[&str]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|s| match s.parse::<i64>() {
                Ok(n) => Value::Int(n),
                Err(_) => Value::BulkString(s.as_bytes().to_vec()),
            })
            .collect(),
    )
}
