//! The TLS flags for reaching Redis, written once: `serve` and `doctor`
//! take them alike, so a command line that doctor passed serves as is.

use std::path::PathBuf;

use clap::Args;
use delayq::Tls;

#[derive(Args, Debug, Clone, Default)]
pub struct RedisTlsArgs {
    /// TLS: check Redis's certificate against this CA (PEM file) instead of
    /// the system's roots.
    #[arg(long, env = "DELAYQ_REDIS_CA", value_name = "FILE")]
    pub redis_ca: Option<PathBuf>,

    /// TLS: client certificate (PEM file), for a Redis that asks for one.
    #[arg(
        long,
        env = "DELAYQ_REDIS_CERT",
        value_name = "FILE",
        requires = "redis_key"
    )]
    pub redis_cert: Option<PathBuf>,

    /// TLS: the client certificate's key (PEM file).
    #[arg(
        long,
        env = "DELAYQ_REDIS_KEY",
        value_name = "FILE",
        requires = "redis_cert"
    )]
    pub redis_key: Option<PathBuf>,

    /// TLS: accept any certificate from Redis. For self-signed test setups
    /// only; serve says so in its log, doctor as a warning.
    #[arg(long, env = "DELAYQ_REDIS_INSECURE")]
    pub redis_insecure: bool,
}

impl RedisTlsArgs {
    pub fn tls(&self) -> Tls {
        Tls {
            ca_file: self.redis_ca.clone(),
            cert_file: self.redis_cert.clone(),
            key_file: self.redis_key.clone(),
            insecure: self.redis_insecure,
        }
    }
}
