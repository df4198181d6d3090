//! A client for a Redis URL: TLS (`rediss://`) applied, and the URL of
//! another node with the same scheme and credentials.

use crate::error::{Error, Result};

/// TLS to Redis (`rediss://` URLs). By default the server's certificate is
/// checked against the system's roots.
#[derive(Clone, Debug, Default)]
pub struct Tls {
    /// Check the server's certificate against this CA (PEM) instead.
    pub ca_file: Option<std::path::PathBuf>,
    /// A client certificate and its key (PEM), for servers that ask.
    pub cert_file: Option<std::path::PathBuf>,
    pub key_file: Option<std::path::PathBuf>,
    /// Accept any certificate: for self-signed test setups only.
    pub insecure: bool,
}

impl Tls {
    pub(crate) fn is_set(&self) -> bool {
        self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.key_file.is_some()
            || self.insecure
    }
}

/// The client for `url`, with `tls` applied to a `rediss://` URL.
pub(crate) fn client(url: &str, tls: &Tls) -> Result<redis::Client> {
    let invalid = Error::Invalid;
    if !url.contains("://") {
        // "localhost:6379" is the usual slip; the crate only says it did not parse.
        return Err(invalid(format!(
            "redis URL {url:?} has no scheme: write redis://{url} (rediss:// for TLS, \
             redis+unix:///PATH for a socket)"
        )));
    }
    if !url.starts_with("rediss://") {
        if tls.is_set() {
            return Err(invalid(
                "TLS options (CA, client certificate, insecure) need a rediss:// URL".into(),
            ));
        }
        return redis::Client::open(url).map_err(|e| invalid(format!("redis URL: {e}")));
    }
    // The crate reads "#insecure" on a rediss:// URL as "skip verification".
    let url = if tls.insecure && !url.contains('#') {
        format!("{url}#insecure")
    } else {
        url.to_owned()
    };
    redis::Client::build_with_tls(url.as_str(), tls.certificates()?)
        .map_err(|e| invalid(format!("redis TLS setup: {e}")))
}

impl Tls {
    /// The CA and client certificate, read from their files.
    pub(crate) fn certificates(&self) -> Result<redis::TlsCertificates> {
        let invalid = Error::Invalid;
        if self.cert_file.is_some() != self.key_file.is_some() {
            return Err(invalid(
                "a client certificate needs its key, and a key its certificate".into(),
            ));
        }
        let read = |p: &std::path::Path| {
            std::fs::read(p).map_err(|e| invalid(format!("cannot read {}: {e}", p.display())))
        };
        Ok(redis::TlsCertificates {
            client_tls: match (&self.cert_file, &self.key_file) {
                (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
                    client_cert: read(c)?,
                    client_key: read(k)?,
                }),
                _ => None,
            },
            root_cert: self.ca_file.as_deref().map(read).transpose()?,
        })
    }
}

/// `template` (a Redis URL) with its host and port replaced and database
/// `db`: the URL of another node, with the same scheme and credentials.
pub(crate) fn url_at(template: &str, host: &str, port: u16, db: i64) -> String {
    let (scheme, _) = template.split_once("://").unwrap_or(("redis", ""));
    let creds = template
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .map(|(c, _)| format!("{c}@"))
        .unwrap_or_default();
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    format!("{scheme}://{creds}{host}:{port}/{db}")
}
