//! The TLS check: from the URL, and from the handshake when the
//! connection failed.

use redis::ConnectionAddr;

use super::Check;

/// From the URL, and from the handshake when the connection failed: a
/// certificate refused is named with the flag that fixes it.
pub fn check(
    client: &redis::Client,
    tls: &delayq::Tls,
    failed: Option<&redis::RedisError>,
) -> Check {
    const C: &str = "tls";
    let addr = client.get_connection_info().addr();
    if let (ConnectionAddr::TcpTls { host, .. }, Some(e)) = (addr, failed) {
        return handshake_failed(host, tls, e);
    }
    match addr {
        ConnectionAddr::TcpTls { insecure: true, .. } => Check::warn(
            C,
            "TLS (rediss://), but the server's certificate is not checked (--redis-insecure)",
            "give the server's CA with --redis-ca instead of --redis-insecure",
        ),
        ConnectionAddr::TcpTls { .. } => Check::ok(C, "TLS (rediss://), certificate checked"),
        ConnectionAddr::Unix(_) => Check::ok(C, "unix socket: local, no TLS needed"),
        ConnectionAddr::Tcp(host, _) if loopback(host) => {
            Check::ok(C, format!("no TLS, on the loopback address {host}"))
        }
        ConnectionAddr::Tcp(host, _) => Check::warn(
            C,
            format!("no TLS to {host}: the password and every job cross the network in clear"),
            "use rediss:// if the service offers TLS (most managed services do)",
        ),
        _ => Check::warn(C, "unknown kind of address", "use redis:// or rediss://"),
    }
}

/// A rediss:// connection that failed: what the handshake said, and the
/// flag that fixes it.
fn handshake_failed(host: &str, tls: &delayq::Tls, e: &redis::RedisError) -> Check {
    const C: &str = "tls";
    let cause = e.to_string();
    let lower = cause.to_lowercase();
    let found = format!("TLS to {host} failed: {cause}");
    if lower.contains("unknownissuer") || lower.contains("unknown issuer") {
        let fix = if tls.ca_file.is_some() {
            "the CA given with --redis-ca did not sign the server's certificate: give the service's own CA file"
        } else {
            "the server's certificate is not signed by a CA this machine trusts: give the service's CA with --redis-ca FILE (--redis-insecure skips the check, for tests only)"
        };
        return Check::fail(C, found, fix);
    }
    if lower.contains("notvalidforname") || lower.contains("not valid for name") {
        return Check::fail(
            C,
            found,
            format!("the server's certificate does not name {host}: connect by a name it was issued for"),
        );
    }
    if lower.contains("certificaterequired") || lower.contains("certificate required") {
        return Check::fail(
            C,
            found,
            "the server asks for a client certificate: give it with --redis-cert FILE --redis-key FILE",
        );
    }
    if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake") {
        return Check::fail(
            C,
            found,
            "check rediss:// and the certificates (--redis-ca, --redis-cert, --redis-key)",
        );
    }
    // Not the handshake (refused, unknown host, ...): the connection check
    // says what.
    Check::warn(
        C,
        format!("TLS to {host} not tried: no connection"),
        "see the connection check",
    )
}

fn loopback(host: &str) -> bool {
    host == "localhost"
        || host
            .trim_matches(['[', ']'])
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
