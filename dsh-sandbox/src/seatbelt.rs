//! macOS: a Seatbelt profile for `/usr/bin/sandbox-exec`. The profile is
//! generated (and unit-tested) everywhere; it is only used on macOS, where it
//! is not tested here.

use crate::WriteRules;

/// The Seatbelt profile for `rules`: read everywhere, write only beneath
/// the writable roots (and `/dev/null`, the terminal), `.git` excepted, and
/// no network unless `network`.
///
/// ```
/// use dsh_sandbox::{SandboxMode, SandboxPolicy, WriteRules, seatbelt_profile};
/// let rules = WriteRules::new(&SandboxPolicy::default(), SandboxMode::ReadOnly, std::path::Path::new("/"));
/// let profile = seatbelt_profile(&rules, false);
/// assert!(profile.contains("(deny default)"));
/// assert!(!profile.contains("(allow network"));
/// ```
pub fn seatbelt_profile(rules: &WriteRules, network: bool) -> String {
    let quote = |p: &std::path::Path| {
        format!(
            "\"{}\"",
            p.display()
                .to_string()
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
        )
    };
    let mut out = String::from(
        "(version 1)\n(deny default)\n(allow process-exec)\n(allow process-fork)\n(allow signal (target same-sandbox))\n\
         (allow file-read*)\n(allow sysctl-read)\n(allow mach-lookup)\n(allow ipc-posix-shm)\n\
         (allow file-write* (literal \"/dev/null\") (regex #\"^/dev/ttys[0-9]+$\") (literal \"/dev/tty\"))\n",
    );
    for root in &rules.roots {
        out.push_str(&format!("(allow file-write* (subpath {}))\n", quote(root)));
    }
    for git in &rules.protected {
        out.push_str(&format!("(deny file-write* (subpath {}))\n", quote(git)));
    }
    if network {
        out.push_str("(allow network*)\n");
    }
    out
}
