//! The allow list: `HOST[:PORT]` and `*.DOMAIN[:PORT]` entries, matched
//! against the host and port a request names.

use std::net::IpAddr;

use crate::SandboxError;

/// The ports an entry without one allows.
const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// One entry of [`SandboxPolicy::allow_domains`](crate::SandboxPolicy::allow_domains), parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    /// Lower case, without a trailing dot; an IPv6 literal without brackets.
    host: String,
    /// `*.host`: subdomains of `host`, not `host` itself.
    wildcard: bool,
    /// `None`: [`DEFAULT_PORTS`].
    port: Option<u16>,
}

/// The parsed allow list: which `host:port` pairs the egress proxy serves.
///
/// ```
/// use dsh_sandbox::AllowList;
/// let list = AllowList::parse(&["pypi.org", "*.example.test:8080"]).unwrap();
/// assert!(list.allows("PyPI.org.", 443));
/// assert!(!list.allows("pypi.org", 22));
/// assert!(list.allows("a.example.test", 8080));
/// assert!(!list.allows("example.test", 8080));
/// assert!(!list.allows("a.example.test.evil", 8080));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    entries: Vec<Entry>,
}

/// `host` lower-cased, without one trailing dot and IPv6 brackets.
fn normal_host(host: &str) -> String {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let host = host.strip_suffix('.').unwrap_or(host);
    host.to_ascii_lowercase()
}

/// Why `host` (normal) is not a name or an IP literal, if it is not.
fn host_error(host: &str) -> Option<&'static str> {
    if host.is_empty() {
        return Some("the host is empty");
    }
    if host.parse::<IpAddr>().is_ok() {
        return None;
    }
    if host.len() > 253 {
        return Some("the name is longer than 253 characters");
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if !host.split('.').all(label_ok) {
        return Some("a name is dot-separated labels of letters, digits, '-' and '_'");
    }
    None
}

impl Entry {
    fn parse(text: &str) -> Result<Entry, SandboxError> {
        let invalid = |why: &'static str| SandboxError::InvalidAllowDomain {
            entry: text.to_owned(),
            why,
        };
        let trimmed = text.trim();
        // `[v6]:port`, `[v6]`, `host:port`, `host`; a bare v6 literal has
        // more than one colon and no port.
        let (host, port) =
            if let Some(rest) = trimmed.strip_prefix('[') {
                let (v6, after) = rest
                    .split_once(']')
                    .ok_or_else(|| invalid("an IPv6 literal misses its ']'"))?;
                match after {
                    "" => (v6, None),
                    _ => (
                        v6,
                        Some(after.strip_prefix(':').ok_or_else(|| {
                            invalid("']' is followed by something else than :PORT")
                        })?),
                    ),
                }
            } else if trimmed.matches(':').count() == 1 {
                let (h, p) = trimmed.split_once(':').ok_or_else(|| invalid("no host"))?;
                (h, Some(p))
            } else {
                (trimmed, None)
            };
        let port = match port {
            None => None,
            Some(p) => match p.parse::<u16>() {
                Ok(0) | Err(_) => return Err(invalid("the port is not a number from 1 to 65535")),
                Ok(p) => Some(p),
            },
        };
        let (wildcard, host) = match host.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, host),
        };
        let host = normal_host(host);
        if host.contains('*') {
            return Err(invalid(
                "a wildcard is only a leading '*.' (subdomains of a domain)",
            ));
        }
        if let Some(why) = host_error(&host) {
            return Err(invalid(why));
        }
        if wildcard && host.parse::<IpAddr>().is_ok() {
            return Err(invalid("'*.' takes a domain name, not an IP address"));
        }
        Ok(Entry {
            host,
            wildcard,
            port,
        })
    }

    fn matches(&self, host: &str, port: u16) -> bool {
        let port_ok = match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        };
        let host_ok = if self.wildcard {
            host.strip_suffix(self.host.as_str())
                .is_some_and(|prefix| prefix.len() > 1 && prefix.ends_with('.'))
        } else {
            host == self.host
        };
        port_ok && host_ok
    }
}

impl AllowList {
    /// Parses the entries (`HOST[:PORT]`, `*.DOMAIN[:PORT]`, `[IPv6]:PORT`);
    /// the first invalid one is the error.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<AllowList, SandboxError> {
        let entries = entries
            .iter()
            .map(|e| Entry::parse(e.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(AllowList { entries })
    }

    /// Whether the list has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether `host` (any case, a trailing dot, IPv6 in brackets or not)
    /// at `port` is allowed. An IP literal is allowed only if listed.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        let host = normal_host(host);
        self.entries.iter().any(|e| e.matches(&host, port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse_and_match_as_documented() {
        let list = AllowList::parse(&[
            "Files.Example.com",
            "*.example.test",
            "git.corp:8443",
            "[::1]:9000",
            "10.0.0.1",
        ])
        .unwrap();
        assert!(list.allows("files.example.com", 80));
        assert!(list.allows("files.example.com", 443));
        assert!(!list.allows("files.example.com", 8080));
        assert!(!list.allows("example.com", 443));
        assert!(list.allows("a.example.test", 443));
        assert!(list.allows("b.a.example.test", 80));
        assert!(!list.allows("example.test", 443));
        assert!(!list.allows("a.example.test.evil", 443));
        assert!(!list.allows("aexample.test", 443));
        assert!(!list.allows(".example.test", 443));
        assert!(list.allows("git.corp", 8443));
        assert!(!list.allows("git.corp", 443));
        assert!(list.allows("[::1]", 9000));
        assert!(list.allows("::1", 9000));
        assert!(list.allows("10.0.0.1", 443));
        assert!(!list.allows("10.0.0.2", 443));
    }

    #[test]
    fn bad_entries_are_refused_with_the_reason() {
        for (bad, why) in [
            ("", "empty"),
            ("host:0", "port"),
            ("host:http", "port"),
            ("a.*.com", "wildcard"),
            ("*", "wildcard"),
            ("*.10.0.0.1", "not an IP"),
            ("bad host", "labels"),
            ("[::1", "']'"),
        ] {
            let err = AllowList::parse(&[bad]).unwrap_err().to_string();
            assert!(err.contains(why), "{bad:?}: {err}");
            assert!(err.contains(&format!("{bad:?}")), "{bad:?}: {err}");
        }
    }
}
