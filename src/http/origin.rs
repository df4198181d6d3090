//! Refuses what a browser sends on behalf of a page from another site, so
//! that a server without `--auth-token` cannot be driven from a visitor's
//! browser, while curl and the Go original's clients, which send no
//! `Origin` and may call the server by any name, keep working.
//!
//! - A request whose `Origin` is not the server's own (the `Host` it was
//!   sent to, or a name listed with `--allowed-host`) gets 403, as does one
//!   whose `Sec-Fetch-Site` says `cross-site` or `same-site`. Browsers send
//!   `Origin` on every cross-site POST, so forms and `no-cors` fetches
//!   that need no preflight are caught.
//! - DNS rebinding (a page's own name made to point at delayq) passes
//!   those checks, so a request a browser made (it carries `Origin`, a
//!   `Sec-Fetch-*` header or the dashboard's header) must also name in its
//!   `Host` a local name, an IP address, the listen address or a listed
//!   name. Requests without those headers may use any `Host`: a rebound
//!   page cannot send them without them.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::AppState;

/// Host names a browser may use to reach this server, besides IP
/// addresses and `localhost`: `--allowed-host` (exact names, or
/// `*.example.com` for any name under it) and the listen address's name.
#[derive(Clone, Debug, Default)]
pub struct AllowedHosts(pub Vec<String>);

impl AllowedHosts {
    /// Listed by the operator (or the listen address's own name).
    fn listed(&self, host: &str) -> bool {
        self.0.iter().any(|a| {
            let a = a.trim().trim_end_matches('.');
            match a.strip_prefix("*.") {
                Some(suffix) => host
                    .strip_suffix(suffix)
                    .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
                None => host.eq_ignore_ascii_case(a),
            }
        })
    }

    /// A name a rebound page cannot have: an address, a local name, or
    /// one listed.
    fn allows(&self, host: &str) -> bool {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        bare.parse::<std::net::IpAddr>().is_ok()
            || host.eq_ignore_ascii_case("localhost")
            || host.to_ascii_lowercase().ends_with(".localhost")
            || self.listed(host)
    }
}

/// `host[:port]` without the port, lower-cased and without a final dot.
fn host_name(authority: &str) -> String {
    let name = if let Some(rest) = authority.strip_prefix('[') {
        // [v6]:port
        format!("[{}]", rest.split(']').next().unwrap_or(""))
    } else {
        authority.split(':').next().unwrap_or("").to_owned()
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// The authority of an `Origin` (`scheme://host[:port]`), with the
/// scheme's default port made explicit; None for `null` or anything else.
fn origin_authority(origin: &str) -> Option<(String, String)> {
    let (scheme, rest) = origin.split_once("://")?;
    if rest.is_empty() || rest.contains('/') {
        return None;
    }
    let scheme = scheme.to_ascii_lowercase();
    Some((scheme, rest.to_ascii_lowercase()))
}

fn with_port(authority: &str, scheme: &str) -> String {
    let has_port = match authority.rsplit_once(':') {
        Some((_, p)) => !p.contains(']') && p.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    };
    if has_port {
        authority.to_owned()
    } else {
        let port = if scheme == "https" { 443 } else { 80 };
        format!("{authority}:{port}")
    }
}

/// Why the request is refused, if it is.
pub fn refusal(headers: &HeaderMap, allowed: &AllowedHosts) -> Option<String> {
    let text = |name: header::HeaderName| {
        headers
            .get(&name)
            .map(|v| v.to_str().unwrap_or("").trim().to_owned())
    };
    let host = text(header::HOST).unwrap_or_default();
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        if !site.eq_ignore_ascii_case("same-origin") && !site.eq_ignore_ascii_case("none") {
            return Some(format!(
                "a request from another site (Sec-Fetch-Site: {site}) is refused"
            ));
        }
    }
    let origin = text(header::ORIGIN);
    if let Some(origin) = &origin {
        let same = origin_authority(origin).is_some_and(|(scheme, authority)| {
            with_port(&authority, &scheme) == with_port(&host.to_ascii_lowercase(), &scheme)
                || allowed.listed(&host_name(&authority))
        });
        if !same {
            return Some(format!(
                "a request from another site (Origin: {origin}) is refused; behind a proxy, list the public name with --allowed-host"
            ));
        }
    }
    let from_browser = origin.is_some()
        || headers.contains_key(super::ui::UI_HEADER)
        || headers.keys().any(|k| k.as_str().starts_with("sec-fetch-"));
    if from_browser && !allowed.allows(&host_name(&host)) {
        return Some(format!(
            "Host {host:?} is not a name of this server; list it with --allowed-host (DELAYQ_ALLOWED_HOSTS)"
        ));
    }
    None
}

pub async fn same_site_only(State(state): State<AppState>, req: Request, next: Next) -> Response {
    match refusal(req.headers(), &state.server.allowed_hosts) {
        None => next.run(req).await,
        Some(message) => {
            tracing::debug!(%message, "refused a browser request");
            ApiError::new(StatusCode::FORBIDDEN, "cross_site", message).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_patterns() {
        let a = AllowedHosts(vec!["dq.example.com".into(), "*.corp.example".into()]);
        assert!(a.allows("127.0.0.1"));
        assert!(a.allows("[::1]"));
        assert!(a.allows("localhost"));
        assert!(a.allows("app.localhost"));
        assert!(a.allows("dq.example.com"));
        assert!(a.allows("a.corp.example"));
        assert!(!a.allows("corp.example"));
        assert!(!a.allows("acorp.example"));
        assert!(!a.allows("evil.example"));
        assert_eq!(host_name("[::1]:9277"), "[::1]");
        assert_eq!(host_name("Example.COM.:80"), "example.com");
    }
}
