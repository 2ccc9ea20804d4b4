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
    egress: Option<&crate::egress::Egress>,
) -> Result<Enforcement, SandboxError> {
    let workspace = canonical_workspace(&shell.start_dir)?;
    let unix_sockets: Vec<_> = policy
        .unix_sockets
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    // With namespaces the shell has a private /tmp and /dev/shm, whose
    // tmpfs keeps the /tmp bounds; the shell's limits are its spawn's.
    let tmp = tmp_limits(policy);
    let (limits, tmp_held) = if namespaces {
        with_private_tmp(&shell.limits, tmp, policy.bubblewrap.is_none())?
    } else {
        without_private_tmp(&shell.limits, tmp, None)?
    };
    let confined = resolved(rules, workspace)
        .network(policy.network)
        .namespaces(namespaces)
        .unix_sockets(unix_sockets)
        .tmp_limits(tmp)
        .readable_roots(shell.scratch_dir.iter().cloned().collect())
        .egress_port(egress.map(|_| crate::EGRESS_PORT));
    if let Some(bwrap) = &policy.bubblewrap {
        let (argv, handoff, mut enforcement) =
            dsh_confine::bubblewrap_command(bwrap, &confined, &shell.effective_argv())
                .map_err(crate::error::from_confine)?;
        enforcement.limits = limits;
        enforcement.tmp_limits = tmp_held;
        shell.argv = Some(argv);
        shell.pre_exec.push(Arc::new(handoff));
        shell.inherit_env = false;
        shell.env = confined_env(&shell.env);
        tracing::info!(mode = %rules.mode, ?enforcement, "sandbox prepared (bubblewrap)");
        return Ok(enforcement);
    }
    let (mut confinement, mut enforcement) =
        dsh_confine::Confinement::build(&confined).map_err(crate::error::from_confine)?;
    enforcement.limits = limits;
    enforcement.tmp_limits = tmp_held;
    if !enforcement.missing.is_empty() && !policy.degrade {
        return Err(SandboxError::NotEnforceable {
            missing: enforcement.missing.join(", "),
        });
    }
    let mut env = confined_env(&shell.env);
    if let Some(egress) = egress {
        egress.serve(&mut confinement)?;
        env.extend(crate::egress_env());
    }
    shell.pre_exec.push(Arc::new(confinement));
    shell.inherit_env = false;
    shell.env = env;
    tracing::info!(mode = %rules.mode, ?enforcement, "sandbox prepared");
    Ok(enforcement)
}

/// How the private `/tmp`'s bounds of a shell are kept, each with how.
pub(crate) type TmpHeldList = Vec<(crate::TmpLimit, crate::TmpHeld)>;

/// The private `/tmp`'s bounds `policy` asks for.
pub(crate) fn tmp_limits(policy: &SandboxPolicy) -> dsh_confine::TmpLimits {
    dsh_confine::TmpLimits::new(policy.tmp_size, policy.tmp_inodes)
}

/// Why a shell without a private `/tmp` cannot keep its bounds.
const NO_PRIVATE_TMP: &str = "only the sandbox's restricted modes make a private /tmp";

/// Why bubblewrap's `/tmp` cannot keep an inode bound.
#[cfg(target_os = "linux")]
const BUBBLEWRAP_INODES: &str = "bubblewrap cannot bound a tmpfs's inodes";

/// `why` followed by `more` (`; ` between two reasons).
fn and_why(why: &str, more: &str) -> String {
    if why.is_empty() {
        more.to_owned()
    } else {
        format!("{why}; {more}")
    }
}

/// What holds of the shell's `limits` with the private `/tmp`'s tmpfs
/// keeping `tmp` (its inodes only where `inodes_held`: bubblewrap cannot
/// bound them); fails closed unless best effort, the shell's limits first.
#[cfg(target_os = "linux")]
fn with_private_tmp(
    limits: &dsh_pty::ResourceLimits,
    tmp: dsh_confine::TmpLimits,
    inodes_held: bool,
) -> Result<(dsh_pty::LimitsReport, TmpHeldList), SandboxError> {
    use crate::{TmpHeld, TmpLimit};
    let mut report = limits.check()?;
    let mut held = Vec::new();
    for (limit, _) in tmp.requested() {
        if limit == TmpLimit::Inodes && !inodes_held {
            if !limits.best_effort {
                return Err(SandboxError::LimitsNotHeld {
                    limits: Vec::new(),
                    tmp: vec![TmpLimit::Inodes],
                    why: BUBBLEWRAP_INODES.to_owned(),
                    starting: None,
                });
            }
            report.why_not_held = and_why(&report.why_not_held, BUBBLEWRAP_INODES);
            held.push((limit, TmpHeld::NotHeld));
        } else {
            held.push((limit, TmpHeld::Tmpfs));
        }
    }
    Ok((report, held))
}

/// What holds of the shell's `limits` and the `/tmp` bounds `tmp` where
/// there is no private `/tmp` (danger-full-access, the weaker mode): the
/// bounds are not held at all. Fails closed unless best effort, naming the
/// shell's limits that cannot be kept with the bounds; `starting`: the
/// shell a call was to start (the refusal reads as its start's).
pub(crate) fn without_private_tmp(
    limits: &dsh_pty::ResourceLimits,
    tmp: dsh_confine::TmpLimits,
    starting: Option<&'static str>,
) -> Result<(dsh_pty::LimitsReport, TmpHeldList), SandboxError> {
    let wanted: Vec<crate::TmpLimit> = tmp.requested().map(|(limit, _)| limit).collect();
    if wanted.is_empty() {
        return Ok((limits.check()?, Vec::new()));
    }
    match limits.check() {
        Ok(mut report) if limits.best_effort => {
            report.why_not_held = and_why(&report.why_not_held, NO_PRIVATE_TMP);
            let held = wanted
                .into_iter()
                .map(|limit| (limit, crate::TmpHeld::NotHeld))
                .collect();
            Ok((report, held))
        }
        Ok(_) => Err(SandboxError::LimitsNotHeld {
            limits: Vec::new(),
            tmp: wanted,
            why: NO_PRIVATE_TMP.to_owned(),
            starting,
        }),
        Err(dsh_pty::LimitsError::NotHeld { limits, why }) => Err(SandboxError::LimitsNotHeld {
            limits,
            tmp: wanted,
            why: and_why(&why, NO_PRIVATE_TMP),
            starting,
        }),
        Err(other) => Err(other.into()),
    }
}

#[cfg(target_os = "macos")]
pub(crate) fn confine(
    shell: &mut ShellConfig,
    rules: &WriteRules,
    policy: &SandboxPolicy,
    _namespaces: bool,
    _egress: Option<&crate::egress::Egress>,
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
    _egress: Option<&crate::egress::Egress>,
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
