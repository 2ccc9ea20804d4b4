//! The shell tool under the sandbox: modes per owner, a persistent confined
//! shell per owner, the rules for changing a mode, and the schema.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use dsh_shell_persistent::{ShellConfig, ShellError, ShellPool};
use serde_json::{Value, json};

use crate::contract::{Denial, SandboxOutcome};
use crate::git::Placeholders;
use crate::{
    Enforcement, ModeChange, Persistence, SandboxConfig, SandboxError, SandboxMode, SandboxRequest,
    WriteRules,
};

/// The shell tool with sandbox modes.
///
/// * `danger-full-access`: the owner's persistent shell, unconfined.
/// * `read-only`, `workspace-write`: the owner's persistent shell, confined
///   when it is created (or a fresh confined shell per call with
///   [`Persistence::OneShot`]).
/// * An approved `sandbox_permissions` runs that one call wider, in a fresh
///   shell; the owner's persistent shell stays as it was.
///
/// Calls of one owner, and changes of its mode, run one at a time in arrival
/// order.
#[derive(Debug)]
pub struct SandboxedShell {
    config: SandboxConfig,
    unconfined: ShellPool,
    owners: Mutex<HashMap<String, Arc<Owner>>>,
    /// Namespaces failed and the policy allows the weaker mode.
    weaker: AtomicBool,
    /// The size of `owners` at which the next new owner prunes it.
    prune_at: AtomicUsize,
}

/// The smallest owner map that is ever pruned.
const PRUNE_FLOOR: usize = 1024;

#[derive(Debug, Default)]
struct Owner {
    /// The owner's turn: calls and mode changes, in arrival order.
    turn: tokio::sync::Mutex<()>,
    state: Mutex<OwnerState>,
}

#[derive(Debug, Default)]
struct OwnerState {
    mode: Option<SandboxMode>,
    confined: Option<Arc<Confined>>,
}

/// A pool of confined shells and what the kernel enforces for it.
#[derive(Debug)]
struct Confined {
    mode: SandboxMode,
    // Dropped before the placeholders: the shells are killed first.
    pool: ShellPool,
    enforcement: Enforcement,
    _placeholders: Placeholders,
}

impl Owner {
    fn state(&self) -> MutexGuard<'_, OwnerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl SandboxedShell {
    /// The tool. No shell starts until a call; a restricted call whose
    /// confinement cannot be enforced fails closed with the reason.
    pub fn new(config: SandboxConfig) -> Result<Self, SandboxError> {
        let unconfined = ShellPool::new(config.shell.clone().persistent(true))?;
        Ok(SandboxedShell {
            unconfined,
            owners: Mutex::new(HashMap::new()),
            weaker: AtomicBool::new(false),
            prune_at: AtomicUsize::new(PRUNE_FLOOR),
            config,
        })
    }

    fn owner(&self, owner: &str) -> Arc<Owner> {
        let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        if !owners.contains_key(owner) && owners.len() >= self.prune_at.load(Ordering::Relaxed) {
            self.prune(&mut owners);
        }
        Arc::clone(owners.entry(owner.to_owned()).or_default())
    }

    /// Forgets the owners that hold nothing: no call under way or waiting,
    /// no mode of their own, and no shell (closed, or closed by the shell
    /// pool's idle limit). Run when the map has doubled since the last
    /// pruning, so its cost is amortized and the map stays within twice the
    /// owners that hold something.
    fn prune(&self, owners: &mut HashMap<String, Arc<Owner>>) {
        owners.retain(|name, entry| {
            let busy = Arc::strong_count(entry) > 1 || entry.turn.try_lock().is_err();
            let state = entry.state();
            let holds = state.mode.is_some()
                || self.unconfined.has_shell(name)
                || state
                    .confined
                    .as_ref()
                    .is_some_and(|c| c.pool.has_shell(name));
            busy || holds
        });
        self.prune_at
            .store((owners.len() * 2).max(PRUNE_FLOOR), Ordering::Relaxed);
    }

    /// The owner's mode: its own, else the policy's default.
    pub fn mode(&self, owner: &str) -> SandboxMode {
        self.owner(owner)
            .state()
            .mode
            .unwrap_or(self.config.policy.mode)
    }

    /// What the kernel enforces for `mode` now (the error says why it
    /// cannot). Where namespaces failed and the policy allows degrading,
    /// this reports the weaker mode.
    pub fn enforcement(&self, mode: SandboxMode) -> Result<Enforcement, SandboxError> {
        if mode == SandboxMode::DangerFullAccess {
            return Ok(Enforcement {
                limits: self.config.shell.limits.check()?,
                ..Enforcement::none()
            });
        }
        let mut shell = self.config.shell.clone();
        let rules = WriteRules::new(&self.config.policy, mode, &self.config.shell.start_dir);
        crate::confine::confine(
            &mut shell,
            &rules,
            &self.config.policy,
            !self.weaker.load(Ordering::Relaxed),
        )
    }

    /// Changes `owner`'s mode, following the [`ModeChange`] rule when it has
    /// a persistent shell. The change waits for the owner's turn, so a call
    /// that already started finishes under the old mode and every later one
    /// runs under the new one. The same mode keeps the shell.
    pub async fn set_mode(&self, owner: &str, mode: SandboxMode) -> Result<(), SandboxError> {
        let entry = self.owner(owner);
        let _turn = entry.turn.lock().await;
        let from = entry.state().mode.unwrap_or(self.config.policy.mode);
        if from == mode {
            return Ok(());
        }
        let confined = entry.state().confined.clone();
        let has_shell = self.unconfined.has_shell(owner)
            || confined.as_ref().is_some_and(|c| c.pool.has_shell(owner));
        if has_shell {
            match self.config.mode_change {
                ModeChange::Reject => {
                    return Err(SandboxError::ShellOpen {
                        owner: owner.to_owned(),
                        from,
                        to: mode,
                    });
                }
                ModeChange::Reset => {
                    self.unconfined.close_owner(owner).await;
                    if let Some(c) = confined {
                        c.pool.close_all().await;
                    }
                    entry.state().confined = None;
                }
            }
        }
        entry.state().mode = Some(mode);
        tracing::info!(owner, %from, to = %mode, "sandbox mode changed");
        Ok(())
    }

    /// Closes `owner`'s shells and forgets the owner (its mode included):
    /// everything it held is freed, and its next call starts as a new owner.
    pub async fn close_owner(&self, owner: &str) {
        let entry = self
            .owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(owner);
        self.unconfined.close_owner(owner).await;
        let confined = entry.and_then(|e| e.state().confined.take());
        if let Some(c) = confined {
            c.pool.close_all().await;
        }
    }

    /// The owners this tool holds state for (a mode, a shell, a turn).
    pub fn owners(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect();
        for name in self.unconfined.owners() {
            if !names.contains(&name) {
                names.push(name);
            }
        }
        names
    }

    /// The tool's name: `bash`, `sh` or `pwsh`.
    pub fn tool_name(&self) -> &'static str {
        self.unconfined.tool_name()
    }

    /// Closes every shell, all at once, and forgets every owner.
    pub async fn close_all(&self) {
        let owners: Vec<Arc<Owner>> = self
            .owners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, o)| o)
            .collect();
        let mut closing = tokio::task::JoinSet::new();
        for entry in owners {
            let confined = entry.state().confined.take();
            if let Some(c) = confined {
                closing.spawn(async move { c.pool.close_all().await });
            }
        }
        self.unconfined.close_all().await;
        while closing.join_next().await.is_some() {}
    }

    /// The shell settings for `mode` before confinement: persistence and a
    /// description that says what the mode allows.
    fn shell_config(&self, mode: SandboxMode, persistent: bool) -> ShellConfig {
        let dialect = self.config.shell.dialect;
        let base = if persistent {
            self.config.shell.effective_description()
        } else {
            dialect.one_shot_description()
        };
        let description = match mode {
            SandboxMode::DangerFullAccess => base,
            _ => format!(
                "{base} Commands run in the {} sandbox{}.",
                mode.name(),
                if self.config.policy.network {
                    ""
                } else {
                    " without network access"
                }
            ),
        };
        self.config
            .shell
            .clone()
            .persistent(persistent)
            .description(Some(description))
    }

    /// A pool of shells confined to `mode` (resolved now).
    fn confined(&self, mode: SandboxMode, persistent: bool) -> Result<Confined, SandboxError> {
        let mut shell = self.shell_config(mode, persistent);
        let rules = WriteRules::new(&self.config.policy, mode, &self.config.shell.start_dir);
        let placeholders = Placeholders::create(&rules);
        let enforcement = crate::confine::confine(
            &mut shell,
            &rules,
            &self.config.policy,
            !self.weaker.load(Ordering::Relaxed),
        )?;
        let pool = ShellPool::new(shell)?;
        Ok(Confined {
            mode,
            pool,
            enforcement,
            _placeholders: placeholders,
        })
    }

    /// [`SandboxedShell::schema`] in the Anthropic Messages API shape:
    /// `{"name", "description", "input_schema"}`.
    pub fn anthropic_schema(&self, owner: &str) -> Value {
        reshape(self.schema(owner), "input_schema")
    }

    /// [`SandboxedShell::schema`] in the MCP `tools/list` shape:
    /// `{"name", "description", "inputSchema"}`.
    pub fn mcp_schema(&self, owner: &str) -> Value {
        reshape(self.schema(owner), "inputSchema")
    }

    /// The tool's definition for `owner`'s current mode, in the OpenAI
    /// function shape (`{"name", "description", "parameters"}`): in
    /// restricted modes it says which sandbox runs the commands (and,
    /// one-shot, that nothing persists), and offers `sandbox_permissions` and
    /// `justification` when an approver is configured.
    pub fn schema(&self, owner: &str) -> Value {
        let mode = self.mode(owner);
        // The definition needs no confinement: listing tools must not build
        // a ruleset and a seccomp program.
        let mut schema = match mode {
            SandboxMode::DangerFullAccess => self.unconfined.schema(),
            _ => {
                let persistent = self.config.restricted == Persistence::Persistent;
                match ShellPool::new(self.shell_config(mode, persistent)) {
                    Ok(pool) => pool.schema(),
                    Err(_) => self.unconfined.schema(),
                }
            }
        };
        if mode != SandboxMode::DangerFullAccess && self.config.approver.is_some() {
            let props = &mut schema["parameters"]["properties"];
            props["sandbox_permissions"] = json!({
                "type": "string",
                "enum": crate::escalation::wider_than(mode).iter().map(|m| m.name()).collect::<Vec<_>>(),
                "description": "Only to retry a command the sandbox blocked: run this one call with more access, after the user approves.",
            });
            props["justification"] = json!({
                "type": "string",
                "description": "Required with `sandbox_permissions`: why this command needs the extra access, in one sentence for the user.",
            });
        }
        schema
    }

    /// Runs one tool call (`{"command", "sandbox_permissions"?, "justification"?}`)
    /// and returns the model-visible text.
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
        cancel: impl Future<Output = ()>,
    ) -> Result<String, SandboxError> {
        let request = SandboxRequest::from_json(args)?;
        let outcome = self.call_with_cancel(owner, request, cancel).await?;
        Ok(crate::contract::render(&outcome))
    }

    /// Runs one call and returns what happened as data.
    pub async fn call(
        &self,
        owner: &str,
        request: SandboxRequest,
    ) -> Result<SandboxOutcome, SandboxError> {
        self.call_with_cancel(owner, request, std::future::pending())
            .await
    }

    /// Like [`SandboxedShell::call`], cancelled (and the shell reset) when
    /// `cancel` resolves.
    pub async fn call_with_cancel(
        &self,
        owner: &str,
        request: SandboxRequest,
        cancel: impl Future<Output = ()>,
    ) -> Result<SandboxOutcome, SandboxError> {
        let entry = self.owner(owner);
        let _turn = entry.turn.lock().await;
        let command = request.command.as_str();
        if command.is_empty() {
            return Err(SandboxError::Shell(ShellError::EmptyCommand));
        }
        let current = entry.state().mode.unwrap_or(self.config.policy.mode);
        let (mode, escalated) =
            crate::escalation::escalation(&self.config, owner, &request, current).await?;
        let outcome = |call, denial| SandboxOutcome {
            call,
            mode,
            escalated,
            denial,
        };
        if mode == SandboxMode::DangerFullAccess {
            let call = if escalated {
                let pool = ShellPool::new(self.shell_config(mode, false))?;
                pool.call_with_cancel(owner, command, cancel).await?
            } else {
                self.unconfined
                    .call_with_cancel(owner, command, cancel)
                    .await?
            };
            return Ok(outcome(call, None));
        }
        let persistent = !escalated && self.config.restricted == Persistence::Persistent;
        let mut cancel = std::pin::pin!(cancel);
        loop {
            let confined = if persistent {
                self.persistent_confined(&entry, owner, mode)?
            } else {
                Arc::new(self.confined(mode, false)?)
            };
            tracing::debug!(owner, %mode, persistent, enforcement = ?confined.enforcement, "confined call");
            match confined
                .pool
                .call_with_cancel(owner, command, cancel.as_mut())
                .await
            {
                Ok(call) => {
                    let denial =
                        crate::contract::failed_on_denial(&call, confined.enforcement.namespaces)
                            .then(|| Denial {
                                wider: if self.config.approver.is_some() {
                                    crate::escalation::wider_than(mode)
                                } else {
                                    Vec::new()
                                },
                            });
                    return Ok(outcome(call, denial));
                }
                Err(ShellError::Spawn {
                    source: dsh_pty::PtyError::Confine(err),
                    ..
                }) => {
                    if persistent {
                        entry.state().confined = None;
                    }
                    if confined.enforcement.namespaces && self.config.policy.degrade {
                        tracing::warn!(%err, "namespaces unavailable; the policy allows the weaker mode");
                        self.weaker.store(true, Ordering::Relaxed);
                        continue;
                    }
                    return Err(SandboxError::NotEnforceable {
                        missing: if confined.enforcement.namespaces {
                            format!("namespaces and a private filesystem view for the shell: {err}")
                        } else {
                            format!("the shell's confinement: {err}")
                        },
                    });
                }
                Err(err) => return Err(err.into()),
            }
        }
    }

    /// The owner's persistent confined shell pool for `mode`: the current
    /// one while its shell lives, else a new one resolved now.
    fn persistent_confined(
        &self,
        entry: &Owner,
        owner: &str,
        mode: SandboxMode,
    ) -> Result<Arc<Confined>, SandboxError> {
        let mut state = entry.state();
        if let Some(c) = &state.confined
            && c.mode == mode
            && c.pool.has_shell(owner)
        {
            return Ok(Arc::clone(c));
        }
        // Drop the old pool (and its placeholders) before making new ones.
        state.confined = None;
        let confined = Arc::new(self.confined(mode, true)?);
        state.confined = Some(Arc::clone(&confined));
        Ok(confined)
    }
}

/// An OpenAI-shaped definition with its `parameters` under `key` instead.
fn reshape(mut schema: Value, key: &str) -> Value {
    if let Some(map) = schema.as_object_mut()
        && let Some(parameters) = map.remove("parameters")
    {
        map.insert(key.to_owned(), parameters);
    }
    schema
}
