//! Shells keyed by owner: lazily created, calls of one owner in order,
//! owners in parallel. The one owner map of the workspace: the plain pool
//! and the sandbox's tool are both a [`ShellPool`], of different
//! [`OwnerKind`]s.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::outcome::CallOutcome;
use crate::shell::{Shell, ShellHandle};
use crate::state::ShellState;
use crate::{OwnerDirError, ShellConfig, ShellConfigError, ShellError, ShellRequest};

/// What an owner of a [`ShellPool`] holds, and so how the pool's shells are
/// made: the plain pool's owners hold a [`Shell`] ([`PlainShells`]); the
/// sandbox's hold a confined shell and their mode. The pool keeps the owner
/// map, the turns, the idle limit, closing and the owners' directories; what
/// runs in a turn is the kind's (its `call`, built on [`ShellPool::turn`]).
pub trait OwnerKind: Send + Sync + 'static {
    /// What the owner's turn holds while the owner has a shell.
    type Seat: Seat;
    /// What the owner keeps outside its turn, readable at any time.
    type State: Default + fmt::Debug + Send + Sync + 'static;

    /// Whether `state` is worth keeping while the owner has no shell: an
    /// owner that holds nothing (no shell, no call, no directory of its own
    /// and no state kept here) is forgotten by the idle close and by the
    /// map's pruning, since its next call would start the same anyway.
    fn holds(state: &Self::State) -> bool {
        let _ = state;
        false
    }

    /// Why the owner's directory can no longer move, if it cannot (set
    /// under the lock [`ShellPool::with_owner`] runs in).
    fn dir_fixed(state: &Self::State) -> Option<&'static str> {
        let _ = state;
        None
    }

    /// Called when the owner is dropped while its shell process may still
    /// be dying (the pool dropped without closing it).
    fn dropped_running(state: &Self::State) {
        let _ = state;
    }
}

/// The shell held in an owner's turn.
pub trait Seat: fmt::Debug + Send + 'static {
    /// The shell.
    fn shell(&self) -> &Shell;
    /// The shell, to close it.
    fn shell_mut(&mut self) -> &mut Shell;
}

impl Seat for Shell {
    fn shell(&self) -> &Shell {
        self
    }

    fn shell_mut(&mut self) -> &mut Shell {
        self
    }
}

/// The plain pool's owners: a [`Shell`] each, in the owner's directory.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainShells;

impl OwnerKind for PlainShells {
    type Seat = Shell;
    type State = ();
}

struct Owner<K: OwnerKind> {
    /// The owner's shell; the lock is its turn (calls in arrival order).
    turn: Arc<tokio::sync::Mutex<Option<K::Seat>>>,
    state: K::State,
    /// The shell a call of the owner runs in, else its kept shell: what
    /// closing the owner ends, and where input goes.
    live: Mutex<Option<ShellHandle>>,
    /// The owner's own directory ([`ShellPool::set_owner_dir`]).
    dir: Mutex<Option<PathBuf>>,
    /// The owner was closed: calls still waiting for its turn are refused.
    closed: AtomicBool,
    /// When the owner's last call ended (or its first began).
    last_used: Mutex<Instant>,
    /// The state the owner's next shell starts from
    /// ([`ShellPool::set_start_state`]), until a call takes it.
    start_state: Mutex<Option<ShellState>>,
}

impl<K: OwnerKind> fmt::Debug for Owner<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owner")
            .field("state", &self.state)
            .field("dir", &*self.dir())
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl<K: OwnerKind> Owner<K> {
    fn new() -> Self {
        Owner {
            turn: Arc::new(tokio::sync::Mutex::new(None)),
            state: K::State::default(),
            live: Mutex::new(None),
            dir: Mutex::new(None),
            closed: AtomicBool::new(false),
            last_used: Mutex::new(Instant::now()),
            start_state: Mutex::new(None),
        }
    }

    fn live(&self) -> MutexGuard<'_, Option<ShellHandle>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn dir(&self) -> MutexGuard<'_, Option<PathBuf>> {
        self.dir.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn start_state(&self) -> MutexGuard<'_, Option<ShellState>> {
        self.start_state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// Whether the owner holds nothing its next call would not make again:
    /// no call under way or waiting, no shell, no directory, no kept state.
    /// `entry` is the map's own reference (the count says who else holds it).
    fn holds_nothing(entry: &Arc<Self>) -> bool {
        let Ok(seat) = entry.turn.try_lock() else {
            return false;
        };
        Arc::strong_count(entry) == 1
            && seat.as_ref().is_none_or(|s| !s.shell().is_running())
            && entry.dir().is_none()
            && entry.start_state().is_none()
            && !K::holds(&entry.state)
    }
}

impl<K: OwnerKind> Drop for Owner<K> {
    fn drop(&mut self) {
        if Arc::get_mut(&mut self.turn).is_some_and(|turn| {
            turn.get_mut()
                .as_ref()
                .is_some_and(|s| s.shell().is_running() && !s.shell().handle().is_closed())
        }) {
            K::dropped_running(&self.state);
        }
    }
}

struct Inner<K: OwnerKind> {
    config: Arc<ShellConfig>,
    owners: Mutex<HashMap<String, Arc<Owner<K>>>>,
    closed: AtomicBool,
    /// Whether the idle sweeper runs (started by the first turn).
    sweeping: AtomicBool,
    /// The size of `owners` at which the next new owner prunes it.
    prune_at: AtomicUsize,
}

impl<K: OwnerKind> Inner<K> {
    fn owners(&self) -> MutexGuard<'_, HashMap<String, Arc<Owner<K>>>> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The smallest owner map that is ever pruned.
const PRUNE_FLOOR: usize = 1024;

/// The persistent shell tool for many agents: a map of owners to shells,
/// each made by its owner's first call. An owner's calls run one at a time
/// in arrival order (the owner's turn); owners run in parallel.
///
/// Cloning a pool is cheap and shares its shells. When the last clone is
/// dropped, every shell's process tree is killed.
///
/// An owner the pool no longer needs is forgotten: closed
/// ([`ShellPool::close_owner`]), or idle past
/// [`ShellConfig::idle_limit`] (its shell is closed; the owner is forgotten
/// unless it keeps a directory or other state), or, when the map has
/// doubled since it was last pruned, holding nothing.
///
/// `K` says what an owner holds ([`OwnerKind`]): [`PlainShells`] by
/// default, whose calls are below; other kinds (the sandbox's) build theirs
/// on [`ShellPool::turn`].
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
pub struct ShellPool<K: OwnerKind = PlainShells> {
    inner: Arc<Inner<K>>,
}

impl<K: OwnerKind> Clone for ShellPool<K> {
    fn clone(&self) -> Self {
        ShellPool {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K: OwnerKind> fmt::Debug for ShellPool<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShellPool")
            .field("config", &self.inner.config)
            .field("owners", &self.inner.owners().len())
            .field("closed", &self.inner.closed)
            .finish_non_exhaustive()
    }
}

/// An owner's turn, taken with [`ShellPool::turn`]: while it is held, no
/// other call of the owner runs. Dropping it ends the turn.
pub struct OwnerTurn<K: OwnerKind> {
    name: String,
    owner: Arc<Owner<K>>,
    seat: tokio::sync::OwnedMutexGuard<Option<K::Seat>>,
    default_dir: Arc<ShellConfig>,
}

impl<K: OwnerKind> fmt::Debug for OwnerTurn<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnerTurn")
            .field("owner", &self.name)
            .field("seat", &*self.seat)
            .finish_non_exhaustive()
    }
}

impl<K: OwnerKind> OwnerTurn<K> {
    /// The owner's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the turn holds, and the owner's state beside it.
    pub fn parts(&mut self) -> (&mut Option<K::Seat>, &K::State) {
        (&mut self.seat, &self.owner.state)
    }

    /// What the owner keeps outside its turn.
    pub fn state(&self) -> &K::State {
        &self.owner.state
    }

    /// Where the owner's shells start: its own directory
    /// ([`ShellPool::set_owner_dir`]), else the pool's
    /// [`ShellConfig::start_dir`].
    pub fn start_dir(&self) -> PathBuf {
        self.owner
            .dir()
            .clone()
            .unwrap_or_else(|| self.default_dir.start_dir.clone())
    }

    /// Makes `handle` the shell that closing the owner ends and that input
    /// reaches (a call's own shell while it runs, then the kept one again).
    ///
    /// [`ShellError::Closed`] if the owner was closed since its turn began
    /// (then `handle` is not kept, and the call must not start): closing
    /// ends the shell it finds here, and one set after it looked would
    /// outlive the close.
    pub fn set_live(&self, handle: Option<ShellHandle>) -> Result<(), ShellError> {
        // Checked under the lock that closing takes after it marks the
        // owner closed: either closing finds `handle`, or this sees the mark.
        let mut live = self.owner.live();
        if self.owner.closed.load(Ordering::Acquire) {
            return Err(ShellError::Closed);
        }
        // The shell a call of the owner runs in takes the state its next
        // process starts from, if it has none running (else the state
        // waits here for the owner's next shell).
        if let Some(handle) = &handle
            && !handle.has_process()
            && let Some(state) = self.owner.start_state().take()
        {
            handle.set_start_state(Some(state));
        }
        *live = handle;
        Ok(())
    }
}

impl<K: OwnerKind> Drop for OwnerTurn<K> {
    fn drop(&mut self) {
        self.owner.touch();
    }
}

impl ShellPool<PlainShells> {
    /// A pool with `config`, once it is validated. No shell starts until the
    /// first call of an owner.
    pub fn new(config: ShellConfig) -> Result<Self, ShellConfigError> {
        Self::of_kind(config)
    }

    /// The tool's name: `bash`, `sh` or `pwsh`.
    pub fn tool_name(&self) -> &'static str {
        self.inner.config.dialect.tool_name()
    }

    /// The tool's definition ([`ShellConfig::spec`]).
    pub fn spec(&self) -> dsh_tool::ToolSpec {
        self.inner.config.spec()
    }

    /// Runs a tool call given as the model's JSON arguments (`{"command": ...}`,
    /// and `timeout` when [`ShellConfig::timeout_parameter`] offers it) and
    /// returns the model-visible text ([`contract::render`](crate::contract::render)
    /// of [`ShellPool::call`]).
    pub async fn execute(&self, owner: &str, args: &Value) -> Result<String, ShellError> {
        let request = self.inner.config.parse_request(args)?;
        let outcome = self.call(owner, request, std::future::pending()).await?;
        Ok(crate::contract::render(&outcome))
    }

    /// A convenience: runs `command` in `owner`'s shell and returns the
    /// model-visible text ([`contract::render`](crate::contract::render) of
    /// [`ShellPool::call`], never cancelled).
    pub async fn run(&self, owner: &str, command: &str) -> Result<String, ShellError> {
        let outcome = self.call(owner, command, std::future::pending()).await?;
        Ok(crate::contract::render(&outcome))
    }

    /// Runs `request` in `owner`'s shell (its command, under its timeout
    /// when it has one, else the configured one) and returns what happened
    /// as data. It is cancelled when `cancel` resolves
    /// (`std::future::pending()` never does): the shell is then reset and
    /// the result discarded, even if the command had finished; dropping the
    /// returned future has the same effect. Every other call method is this
    /// one.
    ///
    /// ```no_run
    /// use std::future::pending;
    /// use std::time::Duration;
    /// use dsh_shell_persistent::{CallEnd, ShellConfig, ShellPool, ShellRequest};
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// // Ten minutes for a build, two seconds for one probe, in one pool.
    /// let pool = ShellPool::new(ShellConfig::new("/tmp").timeout(Duration::from_secs(600)))?;
    /// let probe = ShellRequest::new("curl -s localhost:8080/health").timeout(Duration::from_secs(2));
    /// let outcome = pool.call("agent-1", probe, pending()).await?;
    /// if let CallEnd::TimedOut { after } = outcome.end {
    ///     assert_eq!(after, Duration::from_secs(2)); // and the shell was reset
    /// }
    /// let build = pool.call("agent-1", "make", pending()).await?; // up to 600 s
    /// # let _ = build;
    /// # Ok(()) }
    /// ```
    pub async fn call(
        &self,
        owner: &str,
        request: impl Into<ShellRequest>,
        cancel: impl Future<Output = ()>,
    ) -> Result<CallOutcome, ShellError> {
        let request = request.into();
        if request.command.is_empty() {
            return Err(ShellError::EmptyCommand);
        }
        let mut turn = self.turn(owner).await?;
        let handle = self.seated(&mut turn).handle();
        turn.set_live(Some(handle))?;
        self.seated(&mut turn).call(request, cancel).await
    }

    /// The owner's shell, made if it has none; one without a process
    /// starts its next one in the owner's directory, which may have been
    /// set since.
    fn seated<'t>(&self, turn: &'t mut OwnerTurn<PlainShells>) -> &'t mut Shell {
        let start_dir = turn.start_dir();
        let config = &self.inner.config;
        let owned = || {
            if start_dir == config.start_dir {
                Arc::clone(config)
            } else {
                Arc::new(config.as_ref().clone().start_dir(start_dir.clone()))
            }
        };
        let name: Arc<str> = Arc::from(turn.name());
        let (seat, _) = turn.parts();
        match seat {
            Some(shell) => {
                if !shell.is_running() && shell.config().start_dir != start_dir {
                    shell.set_config(owned());
                }
                shell
            }
            None => seat.insert(Shell::shared(owned(), Some(name))),
        }
    }
}

impl<K: OwnerKind> ShellPool<K> {
    /// A pool of owners of kind `K` with `config`, once it is validated
    /// (for [`PlainShells`], [`ShellPool::new`]).
    pub fn of_kind(config: ShellConfig) -> Result<Self, ShellConfigError> {
        config.validate()?;
        Ok(ShellPool {
            inner: Arc::new(Inner {
                config: Arc::new(config),
                owners: Mutex::new(HashMap::new()),
                closed: AtomicBool::new(false),
                sweeping: AtomicBool::new(false),
                prune_at: AtomicUsize::new(PRUNE_FLOOR),
            }),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ShellConfig {
        &self.inner.config
    }

    /// Waits for `owner`'s turn (after the owner's calls that came before)
    /// and returns it; [`ShellError::Closed`] if the pool or the owner was
    /// closed meanwhile. The owner is made if it is new.
    pub async fn turn(&self, owner: &str) -> Result<OwnerTurn<K>, ShellError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(ShellError::Closed);
        }
        self.start_sweeper();
        let entry = self.entry(owner);
        entry.touch();
        let seat = Arc::clone(&entry.turn).lock_owned().await;
        if entry.closed.load(Ordering::Acquire) {
            return Err(ShellError::Closed);
        }
        Ok(OwnerTurn {
            name: owner.to_owned(),
            owner: entry,
            seat,
            default_dir: Arc::clone(&self.inner.config),
        })
    }

    /// Runs `work` in `owner`'s turn: after the owner's calls that came
    /// before, and before those that come after. A host runs its other
    /// tools for the owner so (an MCP server its editor), so that they see
    /// the shell's effects in the order the model asked. A closed owner's
    /// work runs all the same, in order.
    pub async fn in_turn<T>(&self, owner: &str, work: impl Future<Output = T>) -> T {
        let entry = self.entry(owner);
        let _turn = entry.turn.lock().await;
        work.await
    }

    /// Runs `f` with `owner`'s own directory (if it has one) and its state,
    /// making the owner if it is new. The directory cannot change while `f`
    /// runs: what `f` makes from it (the sandbox's editor filesystem) sees
    /// the same one [`ShellPool::set_owner_dir`] checks
    /// [`OwnerKind::dir_fixed`] against.
    pub fn with_owner<R>(&self, owner: &str, f: impl FnOnce(Option<&Path>, &K::State) -> R) -> R {
        let entry = self.entry(owner);
        let dir = entry.dir();
        f(dir.as_deref(), &entry.state)
    }

    /// Runs `f` with `owner`'s state, if the pool holds the owner (without
    /// making it).
    pub fn peek<R>(&self, owner: &str, f: impl FnOnce(&K::State) -> R) -> Option<R> {
        let entry = self.inner.owners().get(owner).cloned();
        entry.map(|entry| f(&entry.state))
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

    /// Closes the shells of the owners idle for at least `limit` that are
    /// not in a call, and forgets those that hold nothing else.
    async fn close_idle(&self, limit: Duration) {
        let idle: Vec<Arc<Owner<K>>> = self
            .inner
            .owners()
            .values()
            .filter(|o| o.idle_for() >= limit)
            .cloned()
            .collect();
        let mut closing = tokio::task::JoinSet::new();
        for entry in idle {
            // A call under way (or waiting its turn) holds the turn.
            let Ok(mut seat) = entry.turn.try_lock() else {
                continue;
            };
            if let Some(mut seat) = seat.take() {
                *entry.live() = None;
                tracing::debug!("idle owner's shell closed");
                closing.spawn(async move { seat.shell_mut().close().await });
            }
        }
        while closing.join_next().await.is_some() {}
        self.inner.owners().retain(|name, entry| {
            let forget = entry.idle_for() >= limit && Owner::holds_nothing(entry);
            if forget {
                tracing::debug!(owner = name, "idle owner forgotten");
            }
            !forget
        });
    }

    /// The owner's entry, made if it is new (pruning the map when it has
    /// doubled since the last pruning).
    fn entry(&self, owner: &str) -> Arc<Owner<K>> {
        let mut owners = self.inner.owners();
        if !owners.contains_key(owner)
            && owners.len() >= self.inner.prune_at.load(Ordering::Relaxed)
        {
            owners.retain(|_, entry| !Owner::holds_nothing(entry));
            self.inner
                .prune_at
                .store((owners.len() * 2).max(PRUNE_FLOOR), Ordering::Relaxed);
        }
        Arc::clone(
            owners
                .entry(owner.to_owned())
                .or_insert_with(|| Arc::new(Owner::new())),
        )
    }

    /// Gives `owner` a start directory of its own, instead of the pool's
    /// [`ShellConfig::start_dir`]: its shells start there on its first
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
    /// or a call of it is under way (that shell started elsewhere, and a
    /// directory that took effect only at its next reset would move the
    /// agent at a moment it cannot foresee), and when the owner's kind
    /// says it is fixed ([`OwnerKind::dir_fixed`]). Set it before the
    /// owner's first call (or close the owner first).
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
        let in_use = |why| OwnerDirError::InUse {
            owner: owner.to_owned(),
            why,
        };
        let entry = self.entry(owner);
        let seat = entry
            .turn
            .try_lock()
            .map_err(|_| in_use("a call of it is under way"))?;
        if seat.as_ref().is_some_and(|s| s.shell().is_running()) {
            return Err(in_use("its shell is running"));
        }
        let mut own = entry.dir();
        if let Some(why) = K::dir_fixed(&entry.state) {
            return Err(in_use(why));
        }
        *own = Some(dir);
        Ok(())
    }

    /// The start directory `owner` was given with
    /// [`ShellPool::set_owner_dir`], if any (else its shells start in the
    /// pool's [`ShellConfig::start_dir`]).
    pub fn owner_dir(&self, owner: &str) -> Option<PathBuf> {
        let entry = self.inner.owners().get(owner).cloned();
        entry.and_then(|entry| entry.dir().clone())
    }

    /// Writes `input` to the terminal of `owner`'s shell
    /// ([`ShellHandle::send_input`]): [`ShellError::NotRunning`], writing
    /// nothing, unless a call of `owner` is under way.
    pub async fn send_input(&self, owner: &str, input: &[u8]) -> Result<(), ShellError> {
        let handle = self
            .inner
            .owners()
            .get(owner)
            .and_then(|o| o.live().clone())
            .ok_or(ShellError::NotRunning)?;
        handle.send_input(input).await
    }

    /// Kills `owner`'s shell (its whole process tree) and forgets the owner,
    /// its start directory ([`ShellPool::set_owner_dir`]) and its state
    /// included; its next call starts as a new owner. A call of `owner`
    /// under way or waiting ends with [`ShellError::Closed`].
    pub async fn close_owner(&self, owner: &str) {
        let entry = self.inner.owners().remove(owner);
        if let Some(entry) = entry {
            close_together(vec![entry]).await;
        }
    }

    /// Closes the pool: kills every shell, forgets every owner and refuses
    /// further calls with [`ShellError::Closed`]. All process trees are
    /// ended at once, sharing one grace period.
    pub async fn close_all(&self) {
        self.inner.closed.store(true, Ordering::Release);
        let owners: Vec<Arc<Owner<K>>> = self.inner.owners().drain().map(|(_, o)| o).collect();
        close_together(owners).await;
    }

    /// The owners the pool holds (a shell, a call, a directory or state).
    pub fn owners(&self) -> Vec<String> {
        self.inner.owners().keys().cloned().collect()
    }

    /// Captures the state of `owner`'s shell ([`Shell::capture_state`]),
    /// in the owner's turn: after its calls that came before, before those
    /// that come after. `None` if the owner has no running shell (it is
    /// unknown, was never called, or its shell was reset or closed: its
    /// next call starts fresh anyway). For a fork or a snapshot: give the
    /// state to another owner with [`ShellPool::set_start_state`].
    ///
    /// ```no_run
    /// use dsh_shell_persistent::{ShellConfig, ShellPool};
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let pool = ShellPool::new(ShellConfig::new("/tmp"))?;
    /// pool.run("a1", "cd /usr && export X=1").await?;
    /// let state = pool.capture_state("a1").await?.expect("a1 has a shell");
    /// pool.set_start_state("fork-of-a1", state)?;
    /// assert_eq!(pool.run("fork-of-a1", "echo $PWD $X").await?, "/usr 1");
    /// # Ok(()) }
    /// ```
    pub async fn capture_state(&self, owner: &str) -> Result<Option<ShellState>, ShellError> {
        if self.inner.config.dialect != crate::Dialect::Bash {
            return Err(ShellError::StateUnsupported {
                shell: self.inner.config.dialect.tool_name(),
            });
        }
        if !self.inner.owners().contains_key(owner) {
            return Ok(None);
        }
        let mut turn = self.turn(owner).await?;
        match turn.seat.as_mut() {
            Some(seat) => seat.shell_mut().capture_state().await,
            None => Ok(None),
        }
    }

    /// Makes `owner`'s next shell (started by its next call, or after its
    /// shell is reset) start from `state`, applied right after the shell
    /// starts and before that call's command; once: a later reset starts
    /// fresh. An owner that has a running shell keeps it until it is
    /// reset: to move a live owner to a state, close it
    /// ([`ShellPool::close_owner`], which forgets a start state set
    /// before) and then set the state. Setting it again replaces it. The
    /// owner is made if it is new, and is not forgotten while the state
    /// waits.
    ///
    /// If applying fails, the call that started the shell returns
    /// [`ShellError::StateNotApplied`] with what bash said and does not
    /// run its command; the shell keeps the parts bash accepted.
    /// [`ShellError::StateUnsupported`] for a dialect other than bash.
    pub fn set_start_state(&self, owner: &str, state: ShellState) -> Result<(), ShellError> {
        if self.inner.config.dialect != crate::Dialect::Bash {
            return Err(ShellError::StateUnsupported {
                shell: self.inner.config.dialect.tool_name(),
            });
        }
        *self.entry(owner).start_state() = Some(state);
        Ok(())
    }

    /// Whether `owner` has a live shell or a call under way (which may be
    /// starting one).
    pub fn has_shell(&self, owner: &str) -> bool {
        self.inner.owners().get(owner).is_some_and(|o| {
            o.turn.try_lock().map_or(true, |seat| {
                seat.as_ref().is_some_and(|s| s.shell().is_running())
            })
        })
    }
}

/// Closes the owners' shells at once, sharing one grace period and `/proc`
/// readings, and refuses the calls that still wait for their turns. Each
/// owner (and so its shell process) is held until its shell is closed:
/// dropped first, the process would be killed without grace and a remote
/// one in the background.
async fn close_together<K: OwnerKind>(owners: Vec<Arc<Owner<K>>>) {
    let _shared = dsh_pty::SharedScans::new();
    let mut closing = tokio::task::JoinSet::new();
    for entry in owners {
        entry.closed.store(true, Ordering::Release);
        let live = entry.live().take();
        if let Some(handle) = live {
            closing.spawn(async move {
                handle.close().await;
                drop(entry);
            });
        }
    }
    while closing.join_next().await.is_some() {}
}
