//! Addresses in the config: `proxy.host`, the `proxy.allowed_hosts`
//! entries and the `proxy.allowed_origins`, parsed when the config is
//! loaded. The server's guard parses each request's `Host` and `Origin`
//! with the same functions, so the config and the check agree on one
//! grammar.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostName {
    Ip(IpAddr),
    /// Lowercase.
    Dns(String),
}

/// A host the daemon answers to: `name`, `name:port`, an IP address, or
/// `[v6]:port`. `port: None` means no port, or the port it listens on.
/// Text that is not a host entry or an origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error(
        "{0:?} is not a host name or host:port (examples: host.docker.internal, host.docker.internal:30000, 10.0.0.2)"
    )]
    NotAHost(String),
    #[error("{0:?} is not an origin: scheme, host and port only (example: http://localhost:3000)")]
    NotAnOrigin(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEntry {
    pub name: HostName,
    pub port: Option<u16>,
}

impl FromStr for HostEntry {
    type Err = HostError;
    fn from_str(text: &str) -> Result<Self, HostError> {
        let trimmed = text.trim();
        // A bare IPv6 address has colons that are not a port.
        if let Ok(ip) = trimmed.parse::<Ipv6Addr>() {
            return Ok(Self {
                name: HostName::Ip(ip.into()),
                port: None,
            });
        }
        parse_authority(trimmed)
            .map(|(name, port)| Self { name, port })
            .ok_or_else(|| HostError::NotAHost(text.to_string()))
    }
}

impl fmt::Display for HostEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.name, self.port) {
            (HostName::Ip(IpAddr::V6(ip)), Some(port)) => write!(f, "[{ip}]:{port}"),
            (HostName::Ip(ip), None) => write!(f, "{ip}"),
            (HostName::Ip(ip), Some(port)) => write!(f, "{ip}:{port}"),
            (HostName::Dns(name), None) => write!(f, "{name}"),
            (HostName::Dns(name), Some(port)) => write!(f, "{name}:{port}"),
        }
    }
}

/// A browser origin (`http://localhost:3000`), held as browsers serialize
/// it in `Origin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin(String);

impl Origin {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Origin {
    type Err = HostError;
    fn from_str(text: &str) -> Result<Self, HostError> {
        parse_origin(text)
            .map(Origin)
            .ok_or_else(|| HostError::NotAnOrigin(text.to_string()))
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

super::serde_as_text!(HostEntry);
super::serde_as_text!(Origin);

/// `proxy.host` as an address; `localhost` means the IPv4 loopback.
pub fn parse_host(host: &str) -> Option<IpAddr> {
    if host == "localhost" {
        return Some(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// An origin as browsers serialize it in `Origin` (`http://localhost:3000`,
/// default ports left out), or `None` when `text` is not a bare http(s)
/// origin (`null`, a path, credentials).
pub fn parse_origin(text: &str) -> Option<String> {
    let url = reqwest::Url::parse(text.trim()).ok()?;
    let bare = matches!(url.scheme(), "http" | "https")
        && url.host().is_some()
        && url.username().is_empty()
        && url.password().is_none()
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none();
    bare.then(|| url.origin().ascii_serialization())
}

/// `name`, `name:port`, `1.2.3.4[:port]` or `[v6][:port]`, as in `Host`.
pub fn parse_authority(text: &str) -> Option<(HostName, Option<u16>)> {
    let (name, rest) = match text.strip_prefix('[') {
        Some(bracketed) => {
            let (inside, rest) = bracketed.split_once(']')?;
            (HostName::Ip(IpAddr::V6(inside.parse().ok()?)), rest)
        }
        None => {
            let (host, rest) = text.split_at(text.find(':').unwrap_or(text.len()));
            (parse_name(host)?, rest)
        }
    };
    let port = match rest {
        "" => None,
        _ => {
            let digits = rest.strip_prefix(':')?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some(digits.parse().ok()?)
        }
    };
    Some((name, port))
}

fn parse_name(host: &str) -> Option<HostName> {
    if let Ok(ip) = host.parse::<Ipv4Addr>() {
        return Some(HostName::Ip(ip.into()));
    }
    let name = host.to_ascii_lowercase();
    let valid = !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    valid.then_some(HostName::Dns(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_entries_parse_and_print_back() {
        for (text, shown) in [
            ("host.docker.internal", "host.docker.internal"),
            ("Host.Docker.Internal:30000", "host.docker.internal:30000"),
            ("10.0.0.2", "10.0.0.2"),
            ("fd00::1", "fd00::1"),
            ("[fd00::1]:8080", "[fd00::1]:8080"),
        ] {
            let entry: HostEntry = text.parse().unwrap();
            assert_eq!(entry.to_string(), shown);
            assert_eq!(shown.parse::<HostEntry>().unwrap(), entry);
        }
        for bad in ["http://x", "x/y", "*", "", "x:y", "[::1", "a b"] {
            let e = bad.parse::<HostEntry>().unwrap_err();
            assert!(e.to_string().contains("host.docker.internal"), "{bad}: {e}");
        }
        assert_eq!(
            parse_origin("HTTP://LocalHost:80").as_deref(),
            Some("http://localhost")
        );
        assert_eq!(
            "http://x:3000/".parse::<Origin>().unwrap().as_str(),
            "http://x:3000"
        );
        for bad in ["localhost:3000", "http://x/app", "ftp://x", "null"] {
            assert_eq!(parse_origin(bad), None, "{bad}");
            assert!(bad.parse::<Origin>().is_err());
        }
        assert_eq!(parse_host("localhost"), Some(Ipv4Addr::LOCALHOST.into()));
        assert_eq!(parse_host("[::1]"), Some(Ipv6Addr::LOCALHOST.into()));
        assert_eq!(parse_host("example.com"), None);
    }
}
