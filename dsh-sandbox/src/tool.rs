//! The shell tool under the sandbox: modes per owner, per-call escalation,
//! and the rules for changing a mode.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use dsh_shell_persistent::{ShellConfig, ShellPool};
use serde_json::{Value, json};

use crate::{
    Approval, Approver, Enforcement, EscalationRequest, SandboxError, SandboxMode, SandboxPolicy,
    WriteRules,
};

/// What happens when an owner's mode changes while it has a persistent shell
/// (or one is being spawned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ModeChange {
    /// The change fails; the shell must be closed first.
    #[default]
    Reject,
    /// The shell is closed and the next call runs under the new mode.
    Reset,
}

/// Settings of a [`SandboxedShell`].
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// The policy (default mode, roots, network, degrade).
    pub policy: SandboxPolicy,
    /// The shell settings; `start_dir` is the workspace root.
    pub shell: ShellConfig,
    /// The rule for mode changes.
    pub mode_change: ModeChange,
    /// Who approves escalations; `None` refuses every escalation.
    pub approver: Option<Arc<dyn Approver>>,
}

/// The shell tool with sandbox modes.
///
/// * `danger-full-access`: the owner's persistent shell, unconfined.
/// * `read-only`, `workspace-write`: every call runs in a fresh, confined
///   shell (state does not persist, and the tool description says so).
/// * An approved `sandbox_permissions` runs that one call wider, one-shot.
///
/// The confinement of a restricted call is prepared for that call, so roots
/// and `.git` directories created since the last call are covered.
#[derive(Debug)]
pub struct SandboxedShell {
    config: SandboxConfig,
    persistent: ShellPool,
    modes: Mutex<HashMap<String, SandboxMode>>,
    /// Calls of one owner run one at a time, in arrival order, whatever the mode.
    turns: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A pool of fresh shells for one call in `mode` (confined unless
/// danger-full-access), and what the kernel enforces for it.
fn one_shot(
    config: &SandboxConfig,
    mode: SandboxMode,
) -> Result<(ShellPool, Enforcement), SandboxError> {
    let mut shell = one_shot_config(config, mode);
    let enforcement = if mode == SandboxMode::DangerFullAccess {
        Enforcement::none()
    } else {
        let rules = WriteRules::new(&config.policy, mode, &config.shell.start_dir);
        confine(&mut shell, &rules, &config.policy)?
    };
    let pool = ShellPool::new(shell).map_err(|e| SandboxError::Setup(e.to_string()))?;
    Ok((pool, enforcement))
}

/// The shell settings of a one-shot call in `mode`, before confinement:
/// fresh shells, and a description that says what the mode allows.
fn one_shot_config(config: &SandboxConfig, mode: SandboxMode) -> ShellConfig {
    let dialect = config.shell.dialect;
    let description = match mode {
        SandboxMode::DangerFullAccess => dialect.one_shot_description(),
        _ => format!(
            "{} Commands run in the {} sandbox{}.",
            dialect.one_shot_description(),
            mode.name(),
            if config.policy.network {
                ""
            } else {
                " without network access"
            }
        ),
    };
    ShellConfig {
        persistent: false,
        description: Some(description),
        ..config.shell.clone()
    }
}

#[cfg(target_os = "linux")]
fn confine(
    shell: &mut ShellConfig,
    rules: &WriteRules,
    policy: &SandboxPolicy,
) -> Result<Enforcement, SandboxError> {
    let (confinement, enforcement) =
        crate::linux::Confinement::build(rules, policy.network, policy.degrade)?;
    shell.pre_exec.push(Arc::new(confinement));
    tracing::info!(mode = %rules.mode, ?enforcement, "sandbox prepared");
    Ok(enforcement)
}

#[cfg(target_os = "macos")]
fn confine(
    shell: &mut ShellConfig,
    rules: &WriteRules,
    policy: &SandboxPolicy,
) -> Result<Enforcement, SandboxError> {
    let profile = crate::seatbelt_profile(rules, policy.network);
    let mut argv = vec!["/usr/bin/sandbox-exec".to_owned(), "-p".to_owned(), profile];
    argv.extend(shell.effective_argv());
    shell.argv = Some(argv);
    Ok(Enforcement::seatbelt(policy.network))
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn confine(
    _shell: &mut ShellConfig,
    rules: &WriteRules,
    _policy: &SandboxPolicy,
) -> Result<Enforcement, SandboxError> {
    Err(SandboxError::Unsupported { mode: rules.mode })
}

/// Words in a failed command's output that mean the sandbox said no:
/// `EACCES`, `EPERM`, `EROFS` (the read-only `.git` bind), and `EXDEV`, which
/// Landlock returns for a link or rename across directories it may not join.
const DENIAL_HINTS: [&str; 4] = [
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
    "Invalid cross-device link",
];

impl SandboxedShell {
    /// The tool. No shell starts until a call; a restricted call whose
    /// confinement cannot be enforced fails closed with the reason.
    pub fn new(config: SandboxConfig) -> Result<Self, SandboxError> {
        let persistent = ShellPool::new(ShellConfig {
            persistent: true,
            ..config.shell.clone()
        })
        .map_err(|e| SandboxError::Setup(e.to_string()))?;
        Ok(SandboxedShell {
            persistent,
            modes: Mutex::new(HashMap::new()),
            turns: Mutex::new(HashMap::new()),
            config,
        })
    }

    fn modes(&self) -> MutexGuard<'_, HashMap<String, SandboxMode>> {
        self.modes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The owner's mode: its own, else the policy's default.
    pub fn mode(&self, owner: &str) -> SandboxMode {
        self.modes()
            .get(owner)
            .copied()
            .unwrap_or(self.config.policy.mode)
    }

    /// What the kernel enforces for `mode` now (the error says why it cannot).
    pub fn enforcement(&self, mode: SandboxMode) -> Result<Enforcement, SandboxError> {
        one_shot(&self.config, mode).map(|(_, e)| e)
    }

    /// Changes `owner`'s mode, following the [`ModeChange`] rule when it has
    /// a persistent shell or one is being spawned. The same mode keeps the shell.
    pub async fn set_mode(&self, owner: &str, mode: SandboxMode) -> Result<(), SandboxError> {
        let from = self.mode(owner);
        if from == mode {
            return Ok(());
        }
        let has_shell = self.persistent.owners().iter().any(|o| o == owner);
        if has_shell {
            match self.config.mode_change {
                ModeChange::Reject => {
                    return Err(SandboxError::ShellOpen {
                        owner: owner.to_owned(),
                        from,
                        to: mode,
                    });
                }
                ModeChange::Reset => self.persistent.close_owner(owner).await,
            }
        }
        self.modes().insert(owner.to_owned(), mode);
        tracing::info!(owner, %from, to = %mode, "sandbox mode changed");
        Ok(())
    }

    /// Closes `owner`'s persistent shell, if any.
    pub async fn close_owner(&self, owner: &str) {
        self.persistent.close_owner(owner).await;
    }

    /// The tool's name: `bash`, `sh` or `pwsh`.
    pub fn tool_name(&self) -> &'static str {
        self.persistent.tool_name()
    }

    /// Closes every shell.
    pub async fn close_all(&self) {
        self.persistent.close_all().await;
    }

    /// The tool's definition for `owner`'s current mode: in restricted modes
    /// it says that nothing persists, and offers `sandbox_permissions` and
    /// `justification` when an approver is configured.
    pub fn schema(&self, owner: &str) -> Value {
        let mode = self.mode(owner);
        // The definition needs no confinement: listing tools must not build
        // a Landlock ruleset and a seccomp program.
        let mut schema = match mode {
            SandboxMode::DangerFullAccess => self.persistent.schema(),
            _ => match ShellPool::new(one_shot_config(&self.config, mode)) {
                Ok(pool) => pool.schema(),
                Err(_) => self.persistent.schema(),
            },
        };
        if mode != SandboxMode::DangerFullAccess && self.config.approver.is_some() {
            let wider: Vec<&str> = [SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess]
                .into_iter()
                .filter(|m| *m > mode)
                .map(SandboxMode::name)
                .collect();
            let props = &mut schema["parameters"]["properties"];
            props["sandbox_permissions"] = json!({
                "type": "string",
                "enum": wider,
                "description": "Only to retry a command the sandbox blocked: run this one call with more access, after the user approves.",
            });
            props["justification"] = json!({
                "type": "string",
                "description": "Required with `sandbox_permissions`: why this command needs the extra access, in one sentence for the user.",
            });
        }
        schema
    }

    /// Runs one tool call (`{"command", "sandbox_permissions"?, "justification"?}`).
    pub async fn execute(&self, owner: &str, args: &Value) -> Result<String, SandboxError> {
        self.execute_with_cancel(owner, args, std::future::pending())
            .await
    }

    /// Like [`SandboxedShell::execute`], cancelled (and the shell reset) when
    /// `cancel` resolves.
    pub async fn execute_with_cancel(
        &self,
        owner: &str,
        args: &Value,
        cancel: impl std::future::Future<Output = ()>,
    ) -> Result<String, SandboxError> {
        let turn = {
            let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(turns.entry(owner.to_owned()).or_default())
        };
        let _turn = turn.lock().await;
        let command = args
            .get("command")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .ok_or(SandboxError::Shell(
                dsh_shell_persistent::ShellError::EmptyCommand,
            ))?;
        let permissions = args.get("sandbox_permissions").filter(|v| !v.is_null());
        let justification = args.get("justification").filter(|v| !v.is_null());
        let current = self.mode(owner);
        let (mode, escalated) = match (permissions, justification) {
            (None, None) => (current, false),
            (None, Some(_)) => return Err(SandboxError::JustificationWithoutPermissions),
            (Some(p), j) => {
                let requested = p
                    .as_str()
                    .and_then(SandboxMode::from_name)
                    .ok_or(SandboxError::InvalidPermissions)?;
                let justification = j
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .ok_or(SandboxError::MissingJustification)?;
                if requested <= current {
                    return Err(SandboxError::NotWider { current, requested });
                }
                let approver = self
                    .config
                    .approver
                    .as_ref()
                    .ok_or(SandboxError::NoApprover { current })?;
                let request = EscalationRequest {
                    owner: owner.to_owned(),
                    command: command.to_owned(),
                    current,
                    requested,
                    justification: justification.to_owned(),
                };
                match approver.approve(&request).await {
                    Approval::AllowedOnce => {
                        tracing::info!(owner, %current, %requested, "escalation approved for one call");
                        (requested, true)
                    }
                    Approval::TimedOut => return Err(SandboxError::ApprovalTimedOut { requested }),
                    Approval::Denied => return Err(SandboxError::Denied { requested }),
                }
            }
        };
        let text = if mode == SandboxMode::DangerFullAccess && !escalated {
            self.persistent
                .run_with_cancel(owner, command, cancel)
                .await?
        } else {
            let (pool, enforcement) = one_shot(&self.config, mode)?;
            tracing::debug!(owner, %mode, ?enforcement, "one-shot call");
            pool.run_with_cancel(owner, command, cancel).await?
        };
        Ok(self.annotate(text, mode))
    }

    /// Adds the denial line (and how to escalate) to a restricted command
    /// that failed on the sandbox.
    fn annotate(&self, text: String, mode: SandboxMode) -> String {
        if mode == SandboxMode::DangerFullAccess {
            return text;
        }
        let failed = text
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("[exit code: "));
        if !failed || !DENIAL_HINTS.iter().any(|h| text.contains(h)) {
            return text;
        }
        let mut out = format!("{text}\n{}", mode.denial_line());
        if self.config.approver.is_some() {
            let wider: Vec<String> = [SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess]
                .into_iter()
                .filter(|m| *m > mode)
                .map(|m| format!("`{}`", m.name()))
                .collect();
            out.push_str(&format!(
                "\nTo run it with more access, call the tool again with the same command, `sandbox_permissions` set to {} and a `justification`.",
                wider.join(" or ")
            ));
        }
        out
    }
}
