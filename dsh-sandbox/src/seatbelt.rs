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
    let mut roots = rules.roots.clone();
    if rules.tmp {
        // No private /tmp under Seatbelt: the host's temporary directories.
        roots.push(std::path::PathBuf::from("/private/tmp"));
        roots.push(std::path::PathBuf::from("/private/var/folders"));
    }
    for root in &roots {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SandboxMode, SandboxPolicy};

    #[test]
    fn the_profile_writes_only_the_roots_and_keeps_git_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let rules = WriteRules::new(
            &SandboxPolicy::default(),
            SandboxMode::WorkspaceWrite,
            dir.path(),
        );
        let profile = seatbelt_profile(&rules, false);
        let root = std::fs::canonicalize(dir.path()).unwrap();
        assert!(profile.contains(&format!(
            "(allow file-write* (subpath \"{}\"))",
            root.display()
        )));
        assert!(profile.contains(&format!(
            "(deny file-write* (subpath \"{}\"))",
            root.join(".git").display()
        )));
        assert!(profile.contains("(subpath \"/private/tmp\")"));
        let strict = WriteRules::new(
            &SandboxPolicy {
                tmp_writable: false,
                ..SandboxPolicy::default()
            },
            SandboxMode::WorkspaceWrite,
            dir.path(),
        );
        assert!(!seatbelt_profile(&strict, true).contains("/private/tmp"));
        assert!(seatbelt_profile(&strict, true).contains("(allow network*)"));
    }
}
