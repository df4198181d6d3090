//! The HTTP client of webhooks and of the command line. https trusts the
//! system's root certificates and, as OpenSSL and Go do, the bundle that
//! `SSL_CERT_FILE` names and the certificates in `SSL_CERT_DIR` besides
//! them (a private CA for a receiver on the company network).

use std::sync::Arc;

/// rustls's provider on ring, the one delayq builds with (no cmake or
/// assembler needed, unlike aws-lc-rs). rustls 0.23.48 deprecates it for
/// having no post-quantum key exchange; it is still maintained, and
/// delayq's TLS (to Redis, a webhook receiver, its own server) is the
/// classical kind its peers speak. Every use goes through here, so a move
/// to another provider is one change.
#[allow(deprecated)]
pub fn ring_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// A client builder whose https uses those roots (rustls on ring, the
/// provider delayq already has for `rediss://`).
pub fn client_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder().tls_backend_preconfigured(tls_config())
}

fn tls_config() -> rustls::ClientConfig {
    // With SSL_CERT_FILE or SSL_CERT_DIR set this reads only those...
    let native = rustls_native_certs::load_native_certs();
    let mut certs = native.certs;
    let mut errors = native.errors;
    if openssl_probe::has_ssl_cert_env_vars() {
        // ...so the system's directories are read too: the bundle adds to
        // the system roots, it does not replace them.
        for dir in openssl_probe::candidate_cert_dirs() {
            let system = rustls_native_certs::load_certs_from_paths(None, Some(dir));
            certs.extend(system.certs);
            errors.extend(system.errors);
        }
    }
    for e in errors {
        tracing::warn!(error = %e, "a root certificate could not be read; https trusts the others");
    }
    let mut roots = rustls::RootCertStore::empty();
    let (_, unusable) = roots.add_parsable_certificates(certs);
    if unusable > 0 {
        tracing::debug!(
            unusable,
            "root certificates rustls cannot use were left out"
        );
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(ring_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring has TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth()
}
