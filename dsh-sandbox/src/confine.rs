//! Turning a shell's settings into confined ones: the platform's
//! confinement (Linux namespaces, Landlock and seccomp, or bubblewrap; macOS
//! Seatbelt) and the environment a confined shell keeps.

#[cfg(target_os = "linux")]
use std::path::Path;
#[cfg(any(target_os = "linux", target_os = "macos"))]
use std::path::PathBuf;
#[cfg(target_os = "linux")]
use std::sync::Arc;

use dsh_shell_persistent::ShellConfig;

use crate::{Enforcement, SandboxError, SandboxPolicy, WriteRules};

/// `workspace`, canonical (what [`dsh_confine::Policy`] takes).
#[cfg(target_os = "linux")]
pub(crate) fn canonical_workspace(workspace: &Path) -> Result<PathBuf, SandboxError> {
    std::fs::canonicalize(workspace).map_err(|e| {
        SandboxError::setup_from(
            format!("the workspace {} is not usable", workspace.display()),
            e,
        )
    })
}

/// The resolved policy of `rules` over the canonical `workspace` (the
/// shell's start directory too): what `dsh-confine` confines.
#[cfg(any(target_os = "linux", target_os = "macos"))]
pub(crate) fn resolved(rules: &WriteRules, workspace: PathBuf) -> dsh_confine::Policy {
    dsh_confine::Policy::new(workspace)
        .workspace_write(rules.mode == crate::SandboxMode::WorkspaceWrite)
        .writable_roots(rules.roots.clone())
        .protected(rules.protected.clone())
        .hidden(rules.hidden.clone())
        .tmp_writable(rules.tmp)
}

/// Variables a confined shell keeps from the host's environment; everything
/// else (API keys, tokens, the host's own settings) stays out.
#[cfg(any(target_os = "linux", target_os = "macos"))]
const KEPT_ENV: [&str; 8] = [
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "SHELL",
];

/// The locale categories `LC_ALL` stands for, but messages.
#[cfg(any(target_os = "linux", target_os = "macos"))]
const LOCALE_CATEGORIES: [&str; 11] = [
    "LC_CTYPE",
    "LC_NUMERIC",
    "LC_TIME",
    "LC_COLLATE",
    "LC_MONETARY",
    "LC_PAPER",
    "LC_NAME",
    "LC_ADDRESS",
    "LC_TELEPHONE",
    "LC_MEASUREMENT",
    "LC_IDENTIFICATION",
];

/// The confined shell's environment: the kept host variables, `TMPDIR`,
/// then the host's own settings for the shell; and messages in the C
/// locale, so that the errors of refused writes read as the denial check
/// knows them (`LC_MESSAGES=C`; an `LC_ALL` is given to every other
/// category instead, so dates, numbers and character types stay the host's).
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn confined_env(host_env: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| KEPT_ENV.contains(&k.as_str()) || k.starts_with("LC_"))
        .collect();
    env.push(("TMPDIR".to_owned(), "/tmp".to_owned()));
    env.extend(host_env.iter().cloned());
    c_messages(env)
}

/// `env` (later entries win) with `LC_MESSAGES=C` and no `LC_ALL`.
#[cfg(any(target_os = "linux", target_os = "macos"))]
fn c_messages(env: Vec<(String, String)>) -> Vec<(String, String)> {
    let all = env
        .iter()
        .rev()
        .find(|(k, _)| k == "LC_ALL")
        .map(|(_, v)| v.clone());
    let mut env: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| k != "LC_ALL" && k != "LC_MESSAGES")
        .collect();
    if let Some(all) = all.filter(|v| !v.is_empty()) {
        // `LC_ALL` overrode every category: it still does, but messages.
        env.retain(|(k, _)| !LOCALE_CATEGORIES.contains(&k.as_str()));
        env.extend(LOCALE_CATEGORIES.map(|c| (c.to_owned(), all.clone())));
    }
    env.push(("LC_MESSAGES".to_owned(), "C".to_owned()));
    env
}

#[cfg(target_os = "linux")]
pub(crate) fn confine(
    shell: &mut ShellConfig,
    rules: &WriteRules,
    policy: &SandboxPolicy,
    namespaces: bool,
) -> Result<Enforcement, SandboxError> {
    let workspace = canonical_workspace(&shell.start_dir)?;
    let unix_sockets: Vec<_> = policy
        .unix_sockets
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    // With namespaces the shell has a private /tmp and /dev/shm, whose
    // tmpfs keeps the /tmp limits; the rest are the shell's spawn's to keep.
    let tmp = dsh_confine::TmpLimits::new(shell.limits.tmp_size, shell.limits.tmp_inodes);
    let limits = if namespaces {
        shell.limits.tmp_size = None;
        shell.limits.tmp_inodes = None;
        let inodes_held = policy.bubblewrap.is_none();
        with_tmp_limits(&shell.limits, tmp, inodes_held)?
    } else {
        shell.limits.check()?
    };
    let confined = resolved(rules, workspace)
        .network(policy.network)
        .namespaces(namespaces)
        .unix_sockets(unix_sockets)
        .tmp_limits(tmp);
    if let Some(bwrap) = &policy.bubblewrap {
        let (argv, handoff, mut enforcement) =
            dsh_confine::bubblewrap_command(bwrap, &confined, &shell.effective_argv())
                .map_err(crate::error::from_confine)?;
        enforcement.limits = limits;
        shell.argv = Some(argv);
        shell.pre_exec.push(Arc::new(handoff));
        shell.inherit_env = false;
        shell.env = confined_env(&shell.env);
        tracing::info!(mode = %rules.mode, ?enforcement, "sandbox prepared (bubblewrap)");
        return Ok(enforcement);
    }
    let (confinement, mut enforcement) =
        dsh_confine::Confinement::build(&confined).map_err(crate::error::from_confine)?;
    enforcement.limits = limits;
    if !enforcement.missing.is_empty() && !policy.degrade {
        return Err(SandboxError::NotEnforceable {
            missing: enforcement.missing.join(", "),
        });
    }
    shell.pre_exec.push(Arc::new(confinement));
    shell.inherit_env = false;
    shell.env = confined_env(&shell.env);
    tracing::info!(mode = %rules.mode, ?enforcement, "sandbox prepared");
    Ok(enforcement)
}

/// What holds of the shell's `limits` (the /tmp ones taken out) with the
/// private /tmp's tmpfs keeping `tmp` (its inodes only where `inodes_held`:
/// bubblewrap cannot bound them); fails closed unless best effort.
#[cfg(target_os = "linux")]
fn with_tmp_limits(
    limits: &dsh_pty::ResourceLimits,
    tmp: dsh_confine::TmpLimits,
    inodes_held: bool,
) -> Result<dsh_pty::LimitsReport, SandboxError> {
    use dsh_pty::{Held, Limit, LimitsError};
    let mut report = limits.check()?;
    if tmp.size.is_some() {
        report.limits.push((Limit::TmpSize, Held::Tmpfs));
    }
    if tmp.inodes.is_some() {
        if !inodes_held && !limits.best_effort {
            return Err(LimitsError::NotHeld {
                limits: vec![Limit::TmpInodes],
                why: "bubblewrap cannot bound a tmpfs's inodes".to_owned(),
            }
            .into());
        }
        let held = if inodes_held {
            Held::Tmpfs
        } else {
            let why = "bubblewrap cannot bound a tmpfs's inodes";
            if report.why_not_held.is_empty() {
                report.why_not_held = why.to_owned();
            } else {
                report.why_not_held = format!("{}; {why}", report.why_not_held);
            }
            Held::NotHeld
        };
        report.limits.push((Limit::TmpInodes, held));
    }
    Ok(report)
}

#[cfg(target_os = "macos")]
pub(crate) fn confine(
    shell: &mut ShellConfig,
    rules: &WriteRules,
    policy: &SandboxPolicy,
    _namespaces: bool,
) -> Result<Enforcement, SandboxError> {
    // The profile names no workspace: only the roots, `.git` and `/tmp`.
    let confined = resolved(rules, shell.start_dir.clone()).network(policy.network);
    let (argv, enforcement) = dsh_confine::seatbelt_command(&confined, &shell.effective_argv());
    shell.argv = Some(argv);
    shell.inherit_env = false;
    shell.env = confined_env(&shell.env);
    Ok(enforcement)
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
pub(crate) fn confine(
    _shell: &mut ShellConfig,
    rules: &WriteRules,
    _policy: &SandboxPolicy,
    _namespaces: bool,
) -> Result<Enforcement, SandboxError> {
    Err(SandboxError::Unsupported { mode: rules.mode })
}

#[cfg(all(test, any(target_os = "linux", target_os = "macos")))]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn messages_are_in_the_c_locale_and_every_other_category_is_kept() {
        let env = c_messages(pairs(&[
            ("LANG", "de_DE.UTF-8"),
            ("LC_MESSAGES", "fr_FR.UTF-8"),
            ("LC_TIME", "en_GB.UTF-8"),
        ]));
        assert_eq!(
            env,
            pairs(&[
                ("LANG", "de_DE.UTF-8"),
                ("LC_TIME", "en_GB.UTF-8"),
                ("LC_MESSAGES", "C"),
            ])
        );
        // The last LC_ALL (a host's own setting) stands for every category.
        let env = c_messages(pairs(&[
            ("LC_ALL", "fr_FR.UTF-8"),
            ("LC_TIME", "en_GB.UTF-8"),
            ("LC_ALL", "de_DE.UTF-8"),
        ]));
        assert!(!env.iter().any(|(k, _)| k == "LC_ALL"));
        let get = |name: &str| {
            env.iter()
                .rev()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("LC_TIME"), Some("de_DE.UTF-8"));
        assert_eq!(get("LC_CTYPE"), Some("de_DE.UTF-8"));
        assert_eq!(get("LC_MESSAGES"), Some("C"));
        assert_eq!(env.iter().filter(|(k, _)| k == "LC_TIME").count(), 1);
    }
}
