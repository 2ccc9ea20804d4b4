//! Turning a shell's settings into confined ones: the platform's
//! confinement (Linux namespaces, Landlock and seccomp, or bubblewrap; macOS
//! Seatbelt) and the environment a confined shell keeps.

#[cfg(target_os = "linux")]
use std::sync::Arc;

use dsh_shell_persistent::ShellConfig;

use crate::{Enforcement, SandboxError, SandboxPolicy, WriteRules};

/// Variables a confined shell keeps from the host's environment; everything
/// else (API keys, tokens, the host's own settings) stays out.
#[cfg(any(target_os = "linux", target_os = "macos"))]
const KEPT_ENV: [&str; 8] = [
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "SHELL",
];

#[cfg(any(target_os = "linux", target_os = "macos"))]
fn confined_env(host_env: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| KEPT_ENV.contains(&k.as_str()) || k.starts_with("LC_"))
        .collect();
    env.push(("TMPDIR".to_owned(), "/tmp".to_owned()));
    env.extend(host_env.iter().cloned());
    env
}

#[cfg(target_os = "linux")]
pub(crate) fn confine(
    shell: &mut ShellConfig,
    rules: &WriteRules,
    policy: &SandboxPolicy,
    namespaces: bool,
) -> Result<Enforcement, SandboxError> {
    let workspace = std::fs::canonicalize(&shell.start_dir).map_err(|e| {
        SandboxError::setup_from(
            format!("the workspace {} is not usable", shell.start_dir.display()),
            e,
        )
    })?;
    let unix_sockets: Vec<_> = policy
        .unix_sockets
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    // With namespaces the shell has a private /tmp and /dev/shm, whose
    // tmpfs keeps the /tmp limits; the rest are the shell's spawn's to keep.
    let tmp = crate::linux::TmpLimits {
        size: shell.limits.tmp_size,
        inodes: shell.limits.tmp_inodes,
    };
    let limits = if namespaces {
        shell.limits.tmp_size = None;
        shell.limits.tmp_inodes = None;
        let inodes_held = policy.bubblewrap.is_none();
        with_tmp_limits(&shell.limits, tmp, inodes_held)?
    } else {
        shell.limits.check()?
    };
    let spec = crate::linux::Spec {
        rules,
        workspace: &workspace,
        cwd: &workspace,
        network: policy.network,
        namespaces,
        unix_sockets: &unix_sockets,
        files: false,
        tmp,
    };
    if let Some(bwrap) = &policy.bubblewrap {
        let (argv, handoff, mut enforcement) =
            crate::linux::bubblewrap::command(bwrap, &spec, &shell.effective_argv())?;
        enforcement.limits = limits;
        shell.argv = Some(argv);
        shell.pre_exec.push(Arc::new(handoff));
        shell.inherit_env = false;
        shell.env = confined_env(&shell.env);
        tracing::info!(mode = %rules.mode, ?enforcement, "sandbox prepared (bubblewrap)");
        return Ok(enforcement);
    }
    let (confinement, mut enforcement) = crate::linux::Confinement::build(&spec)?;
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
    tmp: crate::linux::TmpLimits,
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
    let profile = crate::seatbelt_profile(rules, policy.network);
    let mut argv = vec!["/usr/bin/sandbox-exec".to_owned(), "-p".to_owned(), profile];
    argv.extend(shell.effective_argv());
    shell.argv = Some(argv);
    shell.inherit_env = false;
    shell.env = confined_env(&shell.env);
    Ok(Enforcement::seatbelt(policy.network))
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
