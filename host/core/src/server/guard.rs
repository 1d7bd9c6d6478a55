//! Requests a web page could make the user's browser send, refused.
//!
//! metaclaw listens on loopback, yet a browser on the same machine can be
//! made to reach it: by DNS rebinding (a name that first resolves to the
//! attacker's server, then to 127.0.0.1; the page's requests then carry
//! `Host: that-name`), or by a "simple" cross-site request that needs no
//! CORS preflight (a form POST, or `fetch` with `mode: "no-cors"` and a
//! `text/plain` body). So every request must name a `Host` this daemon
//! serves, and a state-changing one must neither come from another origin's
//! page nor carry a content type a page may send without a preflight. No
//! CORS header is ever sent, so a preflighted request from a page never
//! follows either.

use std::net::{Ipv4Addr, Ipv6Addr};

use axum::http::{HeaderMap, HeaderValue, header};

use crate::config::{HostEntry, HostName, ProxyConfig, parse_authority, parse_host, parse_origin};
use crate::error::ApiError;

/// What a page may POST to another origin without a preflight.
const SIMPLE_TYPES: &[&str] = &[
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data",
];

/// The `Host` and `Origin` values this daemon answers.
#[derive(Debug, Clone)]
pub struct Guard {
    port: u16,
    hosts: Vec<HostEntry>,
    /// `proxy.host` is 0.0.0.0 or `::` (which requires `proxy.api_key`): any
    /// IP literal is a Host it may be reached by, and DNS rebinding needs a
    /// name.
    any_ip: bool,
    /// `proxy.allowed_origins`, serialized as browsers send them.
    origins: Vec<String>,
}

impl Guard {
    /// `port` is the port the daemon listens on (known once it is bound).
    pub fn new(proxy: &ProxyConfig, port: u16) -> Self {
        let mut hosts = vec![
            HostEntry {
                name: HostName::Ip(Ipv4Addr::LOCALHOST.into()),
                port: None,
            },
            HostEntry {
                name: HostName::Ip(Ipv6Addr::LOCALHOST.into()),
                port: None,
            },
            HostEntry {
                name: HostName::Dns("localhost".into()),
                port: None,
            },
        ];
        let bound = parse_host(&proxy.host);
        let any_ip = bound.is_some_and(|ip| ip.is_unspecified());
        if let Some(ip) = bound.filter(|ip| !ip.is_unspecified()) {
            hosts.push(HostEntry {
                name: HostName::Ip(ip),
                port: None,
            });
        }
        hosts.extend(proxy.allowed_hosts.iter().cloned());
        Self {
            port,
            hosts,
            any_ip,
            origins: proxy
                .allowed_origins
                .iter()
                .map(|o| o.as_str().to_string())
                .collect(),
        }
    }

    /// Every request: exactly one `Host`, and one this daemon serves.
    pub fn check_host(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let mut values = headers.get_all(header::HOST).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(ApiError::HostNotAllowed(format!(
                "send exactly one Host header (e.g. `Host: 127.0.0.1:{}`); requests without one \
                 (HTTP/1.0) or with several are refused",
                self.port
            )));
        };
        let served = value
            .to_str()
            .ok()
            .and_then(parse_authority)
            .is_some_and(|(name, port)| self.serves(&name, port, true));
        if served {
            return Ok(());
        }
        Err(ApiError::HostNotAllowed(format!(
            "metaclaw does not serve Host {:?}: it answers 127.0.0.1, localhost and [::1] on port {}, \
             proxy.host, and the names in proxy.allowed_hosts, so that no web page can reach it by \
             DNS rebinding. To use this name, add it to proxy.allowed_hosts",
            shown(value),
            self.port
        )))
    }

    /// State-changing requests: not sent by another origin's page, and not
    /// in a content type a page may send without a preflight. Programs send
    /// no `Origin` (and no `Sec-Fetch-Site`); browsers always do on a POST.
    pub fn check_browser(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let origin = headers.get(header::ORIGIN);
        let origin_ok = origin.map(|o| self.origin_allowed(o));
        if let (Some(value), Some(false)) = (origin, origin_ok) {
            return Err(ApiError::CrossSite(format!(
                "cross-site request refused: Origin {:?} is not metaclaw's own, and web pages may \
                 not call it. Call it from a program (which sends no Origin), or add the origin to \
                 proxy.allowed_origins",
                shown(value)
            )));
        }
        // Another site, or a sibling of this one on another port, with no
        // allowed Origin to vouch for it.
        if let Some(site) =
            fetch_site(headers).filter(|s| matches!(s.as_str(), "cross-site" | "same-site"))
            && origin_ok != Some(true)
        {
            return Err(ApiError::CrossSite(format!(
                "cross-site request refused (Sec-Fetch-Site: {site}): web pages may not call \
                 metaclaw. Call it from a program, or add the page's origin to proxy.allowed_origins"
            )));
        }
        if let Some(value) = headers.get(header::CONTENT_TYPE) {
            let raw = shown(value);
            if SIMPLE_TYPES.contains(&crate::http::media_type(&raw).as_str()) {
                return Err(ApiError::UnsupportedMediaType(raw));
            }
        }
        Ok(())
    }

    /// A form the dashboard's own pages post (`/ui/…`): it must come from
    /// one of metaclaw's own pages, which a browser says with `Origin` (it
    /// always sends one on a POST); a program without one is refused here
    /// too, since the dashboard's forms are for browsers. Only a URL-encoded
    /// form is taken. The session cookie and the form's CSRF token are
    /// checked after this.
    pub fn check_dashboard_form(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Err(ApiError::CrossSite(
                "the dashboard's forms are posted by its own pages, which send an Origin; this \
                 request has none"
                    .into(),
            ));
        };
        if !self.origin_allowed(origin) {
            return Err(ApiError::CrossSite(format!(
                "cross-site request refused: Origin {:?} is not metaclaw's own",
                shown(origin)
            )));
        }
        if let Some(site) = fetch_site(headers)
            && !matches!(site.as_str(), "same-origin" | "none")
        {
            return Err(ApiError::CrossSite(format!(
                "cross-site request refused (Sec-Fetch-Site: {site})"
            )));
        }
        let media = headers
            .get(header::CONTENT_TYPE)
            .map(|v| crate::http::media_type(&shown(v)))
            .unwrap_or_default();
        if media != "application/x-www-form-urlencoded" {
            return Err(ApiError::UnsupportedMediaType(media));
        }
        Ok(())
    }

    /// `Origin` is `http://` and a served name on the daemon's port (the
    /// proxy's own pages), or one of `proxy.allowed_origins`.
    fn origin_allowed(&self, value: &HeaderValue) -> bool {
        let Some(origin) = value.to_str().ok().and_then(parse_origin) else {
            return false;
        };
        if self.origins.contains(&origin) {
            return true;
        }
        // No IP-literal leniency here: a page served from the attacker's
        // own address is an IP-literal origin.
        origin
            .strip_prefix("http://")
            .and_then(parse_authority)
            .is_some_and(|(name, port)| self.serves(&name, Some(port.unwrap_or(80)), false))
    }

    fn serves(&self, name: &HostName, port: Option<u16>, any_ip: bool) -> bool {
        if any_ip && self.any_ip && matches!(name, HostName::Ip(_)) {
            return true;
        }
        self.hosts.iter().any(|allowed| {
            allowed.name == *name
                && match allowed.port {
                    None => port.is_none_or(|p| p == self.port),
                    Some(p) => port == Some(p),
                }
        })
    }
}

/// `Sec-Fetch-Site` as a browser sends it (`cross-site`, `same-site`,
/// `same-origin`, `none`), lowercased; programs send none.
fn fetch_site(headers: &HeaderMap) -> Option<String> {
    headers
        .get("sec-fetch-site")
        .map(|v| shown(v).trim().to_ascii_lowercase())
}

/// A header value fit to quote in an error: lossy UTF-8, one line, bounded.
fn shown(value: &HeaderValue) -> String {
    crate::untrusted::log_line(&String::from_utf8_lossy(value.as_bytes()), 200)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(host: &str, allowed_hosts: &[&str], allowed_origins: &[&str]) -> Guard {
        let proxy = ProxyConfig {
            host: host.into(),
            allowed_hosts: allowed_hosts.iter().map(|s| s.parse().unwrap()).collect(),
            allowed_origins: allowed_origins.iter().map(|s| s.parse().unwrap()).collect(),
            ..ProxyConfig::default()
        };
        Guard::new(&proxy, 30000)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, HeaderValue::from_str(v).unwrap());
        }
        map
    }

    fn host_ok(g: &Guard, host: &str) -> bool {
        g.check_host(&headers(&[("host", host)])).is_ok()
    }

    #[test]
    fn loopback_names_are_served_on_the_daemons_port_only() {
        let g = guard("127.0.0.1", &[], &[]);
        for ok in [
            "127.0.0.1:30000",
            "127.0.0.1",
            "localhost:30000",
            "LOCALHOST:30000",
            "localhost",
            "[::1]:30000",
            "[::1]",
        ] {
            assert!(host_ok(&g, ok), "{ok}");
        }
        for refused in [
            "evil.example:30000",
            "evil.example",
            "127.0.0.1:30001",
            "localhost:80",
            "[::1]:1",
            "localhost.evil.example:30000",
            "127.0.0.2:30000",
            "10.0.0.1:30000",
            "localhost:+30000",
            "localhost:",
            ":30000",
            "::1",
            "",
        ] {
            assert!(!host_ok(&g, refused), "{refused}");
        }
        // None, or two.
        assert!(g.check_host(&HeaderMap::new()).is_err());
        let two = headers(&[("host", "127.0.0.1:30000"), ("host", "evil.example")]);
        assert!(g.check_host(&two).is_err());
    }

    #[test]
    fn the_refusal_names_the_host_and_the_key_to_set() {
        let g = guard("127.0.0.1", &[], &[]);
        let e = g
            .check_host(&headers(&[("host", "evil.example:30000")]))
            .unwrap_err();
        assert_eq!(e.status(), 403);
        let text = e.to_string();
        assert!(
            text.contains("\"evil.example:30000\"") && text.contains("proxy.allowed_hosts"),
            "{text}"
        );
    }

    #[test]
    fn allowed_hosts_and_proxy_host_are_served() {
        let g = guard(
            "192.168.1.5",
            &["host.docker.internal", "gateway:8080", "fd00::1"],
            &[],
        );
        assert!(host_ok(&g, "192.168.1.5:30000"));
        assert!(host_ok(&g, "host.docker.internal:30000"));
        assert!(host_ok(&g, "Host.Docker.Internal"));
        assert!(!host_ok(&g, "host.docker.internal:8080"));
        assert!(host_ok(&g, "gateway:8080"));
        assert!(!host_ok(&g, "gateway:30000"));
        assert!(!host_ok(&g, "gateway"));
        assert!(host_ok(&g, "[fd00::1]:30000"));
        assert!(!host_ok(&g, "192.168.1.6:30000"));
    }

    #[test]
    fn an_unspecified_bind_serves_ip_literals_but_not_names() {
        for bind in ["0.0.0.0", "::"] {
            let g = guard(bind, &[], &[]);
            assert!(host_ok(&g, "192.168.1.5:30000"), "{bind}");
            assert!(host_ok(&g, "[fe80::1]:8080"), "{bind}");
            assert!(host_ok(&g, "0.0.0.0:30000"), "{bind}");
            assert!(host_ok(&g, "localhost:30000"), "{bind}");
            assert!(!host_ok(&g, "evil.example:30000"), "{bind}");
        }
        // An IP-literal page origin is still another site.
        let g = guard("0.0.0.0", &[], &[]);
        let from = headers(&[("origin", "http://192.168.1.5:30000")]);
        assert!(g.check_browser(&from).is_err());
    }

    #[test]
    fn origins_other_than_the_proxys_own_are_refused() {
        let g = guard("127.0.0.1", &[], &["http://localhost:3000"]);
        let check = |pairs: &[(&'static str, &str)]| g.check_browser(&headers(pairs));
        for own in [
            "http://127.0.0.1:30000",
            "http://localhost:30000",
            "http://[::1]:30000",
            "http://localhost:3000",
        ] {
            assert!(check(&[("origin", own)]).is_ok(), "{own}");
        }
        for other in [
            "http://evil.example",
            "http://evil.example:30000",
            "http://localhost",
            "http://127.0.0.1:8080",
            "https://localhost:30000",
            "null",
            "file://",
            "http://127.0.0.1:30000/path",
        ] {
            let e = check(&[("origin", other)]).unwrap_err();
            assert_eq!(e.status(), 403, "{other}");
            assert!(e.to_string().contains("proxy.allowed_origins"), "{e}");
        }
        // Sec-Fetch-Site without an allowed Origin to vouch for it.
        assert!(check(&[("sec-fetch-site", "cross-site")]).is_err());
        assert!(check(&[("sec-fetch-site", "same-site")]).is_err());
        assert!(check(&[("sec-fetch-site", "same-origin")]).is_ok());
        assert!(check(&[("sec-fetch-site", "none")]).is_ok());
        assert!(
            check(&[
                ("sec-fetch-site", "same-site"),
                ("origin", "http://localhost:3000")
            ])
            .is_ok()
        );
    }

    #[test]
    fn content_types_a_page_sends_without_a_preflight_are_refused() {
        let g = guard("127.0.0.1", &[], &[]);
        for simple in [
            "text/plain",
            "text/plain;charset=UTF-8",
            "Application/X-WWW-Form-Urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            let e = g
                .check_browser(&headers(&[("content-type", simple)]))
                .unwrap_err();
            assert_eq!(e.status(), 415, "{simple}");
            assert!(e.to_string().contains("application/json"), "{e}");
        }
        for fine in ["application/json", "application/json; charset=utf-8"] {
            assert!(g.check_browser(&headers(&[("content-type", fine)])).is_ok());
        }
        // SDKs and `curl -X POST` with no body send none.
        assert!(g.check_browser(&HeaderMap::new()).is_ok());
    }
}
