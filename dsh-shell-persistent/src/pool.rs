//! Shells keyed by owner: lazily created, calls of one owner in order,
//! owners in parallel.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::outcome::CallOutcome;
use crate::shell::{Shell, ShellHandle};
use crate::{OwnerDirError, ShellConfig, ShellConfigError, ShellError, ShellRequest};

#[derive(Debug)]
struct Owner {
    /// The owner's shell; the lock is its turn (calls in arrival order).
    turn: tokio::sync::Mutex<Shell>,
    handle: ShellHandle,
    /// When the owner's last call ended (or its first began).
    last_used: Mutex<Instant>,
}

impl Owner {
    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }
}

#[derive(Debug)]
struct Inner {
    config: Arc<ShellConfig>,
    owners: Mutex<HashMap<String, Arc<Owner>>>,
    /// The configurations of the owners with a start directory of their
    /// own (the pool's, with that directory): kept apart from `owners`,
    /// so that an idle close, which forgets the owner's shell, keeps it.
    dirs: Mutex<HashMap<String, Arc<ShellConfig>>>,
    closed: AtomicBool,
    /// Whether the idle sweeper runs (started by the first call).
    sweeping: AtomicBool,
}

impl Inner {
    fn owners(&self) -> MutexGuard<'_, HashMap<String, Arc<Owner>>> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Taken after `owners` when both are held.
    fn dirs(&self) -> MutexGuard<'_, HashMap<String, Arc<ShellConfig>>> {
        self.dirs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The persistent shell tool for many agents: a map of owners to
/// [`Shell`]s, each made by its owner's first call. An owner's calls run one
/// at a time in arrival order (the owner's shell is its turn); owners run in
/// parallel.
///
/// Cloning a pool is cheap and shares its shells. When the last clone is
/// dropped, every shell's process tree is killed.
///
/// ```no_run
/// use dsh_shell_persistent::{ShellConfig, ShellPool};
/// use serde_json::json;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let pool = ShellPool::new(ShellConfig::new("/tmp"))?;
/// // A host hands the model's tool call over as JSON:
/// let text = pool.execute("agent-1", &json!({"command": "cd /usr && export X=1"})).await?;
/// assert_eq!(text, "");
/// let text = pool.execute("agent-1", &json!({"command": "echo $PWD $X"})).await?;
/// assert_eq!(text, "/usr 1");
/// let text = pool.execute("agent-1", &json!({"command": "false"})).await?;
/// assert_eq!(text, "[exit code: 1]");
/// pool.close_all().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ShellPool {
    inner: Arc<Inner>,
}

impl ShellPool {
    /// A pool with `config`, once it is validated. No shell starts until the
    /// first call of an owner.
    pub fn new(config: ShellConfig) -> Result<Self, ShellConfigError> {
        config.validate()?;
        Ok(ShellPool {
            inner: Arc::new(Inner {
                config: Arc::new(config),
                owners: Mutex::new(HashMap::new()),
                dirs: Mutex::new(HashMap::new()),
                closed: AtomicBool::new(false),
                sweeping: AtomicBool::new(false),
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ShellConfig {
        &self.inner.config
    }

    /// The tool's name: `bash`, `sh` or `pwsh`.
    pub fn tool_name(&self) -> &'static str {
        self.inner.config.dialect.tool_name()
    }

    /// The tool's definition ([`ShellConfig::spec`]).
    pub fn spec(&self) -> dsh_tool::ToolSpec {
        self.inner.config.spec()
    }

    /// Runs a tool call given as the model's JSON arguments (`{"command": ...}`)
    /// and returns the model-visible text.
    /// ([`ShellConfig::parse_request`]: `timeout` too, when the
    /// configuration offers it).
    pub async fn execute(&self, owner: &str, args: &Value) -> Result<String, ShellError> {
        let request = self.inner.config.parse_request(args)?;
        let outcome = self
            .call_with(owner, request, std::future::pending())
            .await?;
        Ok(crate::contract::render(&outcome))
    }

    /// Runs `command` in `owner`'s shell and returns the model-visible text
    /// ([`Shell::run`]).
    pub async fn run(&self, owner: &str, command: &str) -> Result<String, ShellError> {
        self.run_with_cancel(owner, command, std::future::pending())
            .await
    }

    /// Like [`ShellPool::run`], cancelled when `cancel` resolves: the shell is
    /// then reset and the result discarded, even if the command had finished.
    /// Dropping the returned future has the same effect.
    pub async fn run_with_cancel(
        &self,
        owner: &str,
        command: &str,
        cancel: impl Future<Output = ()>,
    ) -> Result<String, ShellError> {
        let outcome = self.call_with_cancel(owner, command, cancel).await?;
        Ok(crate::contract::render(&outcome))
    }

    /// Runs `command` in `owner`'s shell and returns what happened as data.
    pub async fn call(&self, owner: &str, command: &str) -> Result<CallOutcome, ShellError> {
        self.call_with_cancel(owner, command, std::future::pending())
            .await
    }

    /// Like [`ShellPool::call`], cancelled when `cancel` resolves (see
    /// [`ShellPool::run_with_cancel`]).
    pub async fn call_with_cancel(
        &self,
        owner: &str,
        command: &str,
        cancel: impl Future<Output = ()>,
    ) -> Result<CallOutcome, ShellError> {
        self.call_with(owner, ShellRequest::new(command), cancel)
            .await
    }

    /// Runs `request` in `owner`'s shell (its command, under its timeout
    /// when it has one, else the configured one) and returns what happened
    /// as data; cancelled when `cancel` resolves (see
    /// [`ShellPool::run_with_cancel`]; `std::future::pending()` never
    /// cancels). Every other call method is this one.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use dsh_shell_persistent::{CallEnd, ShellConfig, ShellPool, ShellRequest};
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// // Ten minutes for a build, two seconds for one probe, in one pool.
    /// let pool = ShellPool::new(ShellConfig::new("/tmp").timeout(Duration::from_secs(600)))?;
    /// let probe = ShellRequest::new("curl -s localhost:8080/health").timeout(Duration::from_secs(2));
    /// let outcome = pool.call_with("agent-1", probe, std::future::pending()).await?;
    /// if let CallEnd::TimedOut { after } = outcome.end {
    ///     assert_eq!(after, Duration::from_secs(2)); // and the shell was reset
    /// }
    /// let build = pool.call("agent-1", "make").await?; // up to 600 s
    /// # let _ = build;
    /// # Ok(()) }
    /// ```
    pub async fn call_with(
        &self,
        owner: &str,
        request: ShellRequest,
        cancel: impl Future<Output = ()>,
    ) -> Result<CallOutcome, ShellError> {
        if request.command.is_empty() {
            return Err(ShellError::EmptyCommand);
        }
        self.start_sweeper();
        let entry = self.owner(owner)?;
        entry.touch();
        let mut shell = entry.turn.lock().await;
        let result = shell.call_with(request, cancel).await;
        entry.touch();
        result
    }

    /// With an idle limit, starts (once) the task that closes idle owners.
    /// It holds the pool weakly and ends with it.
    fn start_sweeper(&self) {
        let Some(limit) = self.inner.config.idle_limit else {
            return;
        };
        if self.inner.sweeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        let period = (limit / 4).max(Duration::from_millis(10));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(inner) = weak.upgrade() else { return };
                if inner.closed.load(Ordering::Acquire) {
                    return;
                }
                ShellPool { inner }.close_idle(limit).await;
            }
        });
    }

    /// Closes and forgets the owners idle for at least `limit` whose shell
    /// is not in a call.
    async fn close_idle(&self, limit: Duration) {
        let idle: Vec<Arc<Owner>> = {
            let mut owners = self.inner.owners();
            let mut idle = Vec::new();
            owners.retain(|name, owner| {
                // A call under way (or waiting its turn) holds the owner.
                let is_idle = owner.idle_for() >= limit
                    && Arc::strong_count(owner) == 1
                    && owner.turn.try_lock().is_ok();
                if is_idle {
                    tracing::debug!(owner = name, "idle owner closed");
                    idle.push(Arc::clone(owner));
                }
                !is_idle
            });
            idle
        };
        close_together(idle).await;
    }

    fn owner(&self, owner: &str) -> Result<Arc<Owner>, ShellError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(ShellError::Closed);
        }
        let mut owners = self.inner.owners();
        let entry = owners.entry(owner.to_owned()).or_insert_with(|| {
            let config = self
                .inner
                .dirs()
                .get(owner)
                .cloned()
                .unwrap_or_else(|| Arc::clone(&self.inner.config));
            let shell = Shell::shared(config, Some(Arc::from(owner)));
            Arc::new(Owner {
                handle: shell.handle(),
                turn: tokio::sync::Mutex::new(shell),
                last_used: Mutex::new(Instant::now()),
            })
        });
        Ok(Arc::clone(entry))
    }

    /// Gives `owner` a start directory of its own, instead of the pool's
    /// [`ShellConfig::start_dir`]: its shell starts there on its first
    /// call and again after every reset (a timeout, a cancellation, a shell
    /// that ended, an idle close), so that many agents share one pool and
    /// each still comes back to its own workspace. The directory is checked
    /// first ([`ShellConfig::check_owner_dir`]: absolute and, with a local
    /// backend, an existing directory) and kept as given
    /// ([`ShellPool::owner_dir`]); bash started there shows its real path
    /// (symlinks resolved) in `pwd`. Setting it again replaces it;
    /// [`ShellPool::close_owner`] and [`ShellPool::close_all`] forget it.
    ///
    /// Refused with [`OwnerDirError::InUse`] while the owner's shell runs
    /// or a call of it is under way: that shell started elsewhere, and a
    /// directory that took effect only at its next reset would move the
    /// agent at a moment it cannot foresee. Set it before the owner's
    /// first call (or close the owner first).
    ///
    /// ```no_run
    /// use dsh_shell_persistent::{ShellConfig, ShellPool};
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let pool = ShellPool::new(ShellConfig::new("/srv/agents"))?;
    /// std::fs::create_dir_all("/srv/agents/a1")?;
    /// pool.set_owner_dir("a1", "/srv/agents/a1")?;
    /// assert_eq!(pool.run("a1", "pwd").await?, "/srv/agents/a1");
    /// assert!(pool.set_owner_dir("a1", "/srv/agents").is_err()); // its shell runs
    /// # Ok(()) }
    /// ```
    pub fn set_owner_dir(&self, owner: &str, dir: impl Into<PathBuf>) -> Result<(), OwnerDirError> {
        let dir = dir.into();
        self.inner.config.check_owner_dir(owner, &dir)?;
        let config = Arc::new(self.inner.config.as_ref().clone().start_dir(dir));
        let in_use = |why| OwnerDirError::InUse {
            owner: owner.to_owned(),
            why,
        };
        let owners = self.inner.owners();
        if let Some(entry) = owners.get(owner) {
            // A shell that holds no process takes the directory now: its
            // next call starts one there.
            let mut shell = entry
                .turn
                .try_lock()
                .map_err(|_| in_use("a call of it is under way"))?;
            if shell.is_running() {
                return Err(in_use("its shell is running"));
            }
            shell.set_config(Arc::clone(&config));
        }
        self.inner.dirs().insert(owner.to_owned(), config);
        Ok(())
    }

    /// The start directory `owner` was given with
    /// [`ShellPool::set_owner_dir`], if any (else its shells start in the
    /// pool's [`ShellConfig::start_dir`]).
    pub fn owner_dir(&self, owner: &str) -> Option<PathBuf> {
        self.inner
            .dirs()
            .get(owner)
            .map(|config| config.start_dir.clone())
    }

    /// Writes `input` to the terminal of `owner`'s shell
    /// ([`ShellHandle::send_input`]): [`ShellError::NotRunning`], writing
    /// nothing, unless a call of `owner` is under way.
    pub async fn send_input(&self, owner: &str, input: &[u8]) -> Result<(), ShellError> {
        let handle = self
            .inner
            .owners()
            .get(owner)
            .map(|o| o.handle.clone())
            .ok_or(ShellError::NotRunning)?;
        handle.send_input(input).await
    }

    /// Kills `owner`'s shell (its whole process tree) and forgets it, and
    /// its start directory ([`ShellPool::set_owner_dir`]); the owner's next
    /// call starts a fresh shell in the pool's directory. A call of `owner`
    /// under way ends with [`ShellError::Closed`].
    pub async fn close_owner(&self, owner: &str) {
        let entry = {
            let mut owners = self.inner.owners();
            self.inner.dirs().remove(owner);
            owners.remove(owner)
        };
        if let Some(entry) = entry {
            entry.handle.close().await;
        }
    }

    /// Closes the pool: kills every shell and refuses further calls. All
    /// process trees are ended at once, sharing one grace period.
    pub async fn close_all(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let owners: Vec<Arc<Owner>> = {
            let mut owners = self.inner.owners();
            self.inner.dirs().clear();
            owners.drain().map(|(_, o)| o).collect()
        };
        close_together(owners).await;
    }

    /// The owners that currently have a shell.
    pub fn owners(&self) -> Vec<String> {
        self.inner.owners().keys().cloned().collect()
    }

    /// Whether `owner` has a live shell or a call under way (which may be
    /// starting one).
    pub fn has_shell(&self, owner: &str) -> bool {
        self.inner
            .owners()
            .get(owner)
            .is_some_and(|o| o.turn.try_lock().map_or(true, |shell| shell.is_running()))
    }
}

/// Closes the owners' shells at once, sharing one grace period and `/proc`
/// readings. Each owner (and so its shell process) is held until its shell
/// is closed: dropped first, the process would be killed without grace and
/// a remote one in the background.
async fn close_together(owners: Vec<Arc<Owner>>) {
    let _shared = dsh_pty::SharedScans::new();
    let mut closing = tokio::task::JoinSet::new();
    for owner in owners {
        closing.spawn(async move { owner.handle.close().await });
    }
    while closing.join_next().await.is_some() {}
}
