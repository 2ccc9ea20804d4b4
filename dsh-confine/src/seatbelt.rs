//! macOS: a Seatbelt profile for `/usr/bin/sandbox-exec`. The profile is
//! generated (and unit-tested) everywhere; it is only used on macOS, where it
//! is not tested here.

use crate::{Enforcement, Policy};

/// The command line that runs `argv` under `/usr/bin/sandbox-exec` with
/// [`seatbelt_profile`]'s profile for `policy`, and what that enforces.
///
/// ```
/// let policy = dsh_confine::Policy::new("/".into());
/// let (argv, enforcement) = dsh_confine::seatbelt_command(&policy, &["bash".to_owned()]);
/// assert_eq!(argv[..2], ["/usr/bin/sandbox-exec", "-p"]);
/// assert_eq!(argv[3], "bash");
/// assert!(enforcement.filesystem && enforcement.network_isolated);
/// ```
pub fn seatbelt_command(policy: &Policy, argv: &[String]) -> (Vec<String>, Enforcement) {
    let profile = seatbelt_profile(policy);
    let mut out = vec!["/usr/bin/sandbox-exec".to_owned(), "-p".to_owned(), profile];
    out.extend(argv.iter().cloned());
    (out, Enforcement::seatbelt(policy.network))
}

/// The Seatbelt profile for `policy`: read everywhere, write only beneath
/// the writable roots (and `/dev/null`, the terminal), `.git` excepted, and
/// no network unless the policy has it.
///
/// ```
/// let policy = dsh_confine::Policy::new("/".into());
/// let profile = dsh_confine::seatbelt_profile(&policy);
/// assert!(profile.contains("(deny default)"));
/// assert!(!profile.contains("(allow network"));
/// ```
pub fn seatbelt_profile(policy: &Policy) -> String {
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
    let mut roots = policy.roots.clone();
    if policy.tmp_writable {
        // No private /tmp under Seatbelt: the host's temporary directories.
        roots.push(std::path::PathBuf::from("/private/tmp"));
        roots.push(std::path::PathBuf::from("/private/var/folders"));
    }
    for root in &roots {
        out.push_str(&format!("(allow file-write* (subpath {}))\n", quote(root)));
    }
    for git in &policy.protected {
        out.push_str(&format!("(deny file-write* (subpath {}))\n", quote(git)));
    }
    if policy.network {
        out.push_str("(allow network*)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_writes_only_the_roots_and_keeps_git_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let policy = Policy::new(root.clone())
            .workspace_write(true)
            .writable_roots(vec![root.clone()])
            .protected(vec![root.join(".git")])
            .tmp_writable(true);
        let profile = seatbelt_profile(&policy);
        assert!(profile.contains(&format!(
            "(allow file-write* (subpath \"{}\"))",
            root.display()
        )));
        assert!(profile.contains(&format!(
            "(deny file-write* (subpath \"{}\"))",
            root.join(".git").display()
        )));
        assert!(profile.contains("(subpath \"/private/tmp\")"));
        let strict = policy.tmp_writable(false).network(true);
        assert!(!seatbelt_profile(&strict).contains("/private/tmp"));
        assert!(seatbelt_profile(&strict).contains("(allow network*)"));
    }
}
