//! The pool's settings.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dsh_pty::{PreExec, PtyBackend, ResourceLimits, ScrollbackLimits, TermSize};

use serde_json::Value;

use crate::{ClipMode, Dialect, NormalizeOptions, ShellError, ShellRequest};

/// What the tool does when a command waits for input on the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InputWait {
    /// After about a second of waiting, send end-of-file (Ctrl-D) to the
    /// terminal, up to three times, and say so in the result. `cat`, `read`
    /// and REPLs end; the shell stays usable.
    #[default]
    SendEof,
    /// Do nothing: a host that wants interactivity sends input itself with
    /// [`ShellPool::send_input`](crate::ShellPool::send_input).
    Wait,
}

/// The raw scrollback each shell keeps by default: 64 KiB and 1,000 lines.
/// The tool reads output as it streams and never pages back, so a shell
/// that printed a lot keeps this much at most, not `dsh-pty`'s 4 MiB.
pub const SHELL_SCROLLBACK: ScrollbackLimits = ScrollbackLimits {
    max_bytes: 64 * 1024,
    max_lines: 1000,
};

/// Settings of a [`ShellPool`](crate::ShellPool): [`ShellConfig::new`] and
/// a setter per field (each field is also public to read and assign). New
/// settings arrive as new fields with defaults, so this type cannot be built
/// with a struct literal.
///
/// ```
/// use dsh_shell_persistent::ShellConfig;
/// use std::time::Duration;
/// let config = ShellConfig::new("/tmp")
///     .timeout(Duration::from_secs(60))
///     .max_output_chars(8_000);
/// assert!(config.validate().is_ok());
/// assert!(config.clone().timeout(Duration::ZERO).validate().is_err());
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ShellConfig {
    /// The shell language (and the tool's name).
    pub dialect: Dialect,
    /// The directory each new shell starts in (the workspace), but those of
    /// a pool's owner given a directory of its own with
    /// [`ShellPool::set_owner_dir`](crate::ShellPool::set_owner_dir).
    pub start_dir: PathBuf,
    /// The program and arguments; `None` for the dialect's default (no rc files).
    pub argv: Option<Vec<String>>,
    /// Let the default argv read login and rc files.
    pub rc_files: bool,
    /// Extra environment variables for the shell (applied after the tool's
    /// own), whatever their names: this is how a host hands a shell a
    /// credential on purpose.
    pub env: Vec<(String, String)>,
    /// Whether a shell on this machine starts from this process's
    /// environment (the default), less the variables whose names look like
    /// credentials ([`looks_like_secret`](crate::looks_like_secret); see
    /// [`ShellConfig::pass_secrets`]). With `false` it gets only the tool's
    /// own variables and [`ShellConfig::env`]. A backend that runs the
    /// shell elsewhere (a container, another host) passes none of this
    /// process's variables either way.
    pub inherit_env: bool,
    /// Whether a shell that inherits this process's environment also gets
    /// the variables whose names look like credentials (`false`, the
    /// default: API keys, tokens and passwords stay out, by the rules of
    /// [`looks_like_secret`](crate::looks_like_secret)). To hand over one,
    /// put it in [`ShellConfig::env`] instead.
    pub pass_secrets: bool,
    /// How long one call may run before the shell is killed and reset (default 300 s).
    /// A call's [`ShellRequest::timeout`](crate::ShellRequest::timeout) overrides it.
    pub timeout: Duration,
    /// Whether the model may set a call's timeout, and up to what (`None`,
    /// the default: the tool's schema is exactly `command`, and a `timeout`
    /// the model sends anyway is ignored). With `Some(max)` the schema
    /// ([`ShellConfig::spec`]) also offers an optional integer `timeout`, in
    /// seconds, whose description states the bound, and
    /// [`ShellConfig::parse_request`] (which `execute` uses) accepts a whole
    /// number of seconds from 1 to `max` and refuses anything else with
    /// [`ShellError::InvalidTimeout`](crate::ShellError::InvalidTimeout)
    /// (`timeout must be a whole number of seconds from 1 to 600`): a
    /// model that asks for more than the host allows is told so, never cut
    /// short silently. `max` counts in whole seconds and must be at least one.
    pub timeout_parameter: Option<Duration>,
    /// Output beyond this many characters is clipped (default 16,000).
    pub max_output_chars: usize,
    /// How output is clipped.
    pub clip: ClipMode,
    /// The tool description; `None` for the dialect's default.
    pub description: Option<String>,
    /// What normalization keeps raw.
    pub normalize: NormalizeOptions,
    /// What happens when a command waits for terminal input.
    pub on_input_wait: InputWait,
    /// The terminal size.
    pub term_size: TermSize,
    /// The bounds of each shell's raw scrollback (default [`SHELL_SCROLLBACK`]).
    pub scrollback: ScrollbackLimits,
    /// How long a new shell may take to show its first prompt (default 30 s).
    pub start_timeout: Duration,
    /// How long closing a shell waits, after `SIGTERM` (and the `SIGHUP`
    /// the shell passes on to its jobs), for its processes to leave before
    /// `SIGKILL` ends what is left (default 200 ms; zero: `SIGKILL` at once).
    /// Closing returns as soon as every process left, so a tree that obeys
    /// `SIGTERM` closes in about a millisecond whatever this is; raise it
    /// for jobs that clean up on `SIGTERM` (a server flushing its data).
    /// A call's timeout kills with its own short grace.
    pub close_grace: Duration,
    /// The PTY backend (default: [`dsh_pty::default_backend`]).
    pub backend: Arc<dyn PtyBackend>,
    /// Whether an owner keeps its shell between calls (the default). With
    /// `false`, every call runs in a fresh shell whose whole process tree is
    /// killed when the call ends (with the local backends, gone before the
    /// call returns), and results never carry the reset line: a shell that exits reports
    /// `[exit code: N]` (`128 + signal` when killed by a signal).
    pub persistent: bool,
    /// Actions applied to each shell before it runs (see [`dsh_pty::PreExec`]);
    /// the sandbox crate confines shells this way. Only backends that fork
    /// run them; others refuse to spawn.
    pub pre_exec: Vec<Arc<dyn PreExec>>,
    /// Where a local shell's commands too long for one line are written
    /// for it to read: a private directory is made in it per shell process
    /// (`None`, the default: the system's temporary directory). The
    /// sandbox points it where its confined shell can read it.
    pub scratch_dir: Option<PathBuf>,
    /// A [`ShellPool`](crate::ShellPool)'s owners without a call for this
    /// long are closed and forgotten, shell and all (`None`, the default:
    /// only [`ShellPool::close_owner`](crate::ShellPool::close_owner) and
    /// [`ShellPool::close_all`](crate::ShellPool::close_all) do). For hosts
    /// that see many short-lived agents. A single [`Shell`](crate::Shell)
    /// has no owner to forget and ignores it; the sandbox's tool ends idle
    /// owners' shells but keeps their modes.
    pub idle_limit: Option<Duration>,
    /// Limits on each shell's whole process tree: processes, memory, CPU,
    /// open files, file size (see [`ResourceLimits`]; none by default). A
    /// limit the backend cannot keep makes spawning fail, unless
    /// [`ResourceLimits::best_effort`]. A call during which the kernel
    /// killed a process at the memory limit, or refused new processes at the
    /// process limit, says so in its result.
    pub limits: ResourceLimits,
}

/// An invalid [`ShellConfig`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShellConfigError {
    /// A duration or bound is zero.
    #[error("shell config: `{0}` must be a positive integer")]
    NotPositive(&'static str),
    /// A string that must say something is empty.
    #[error("shell config: `{0}` must be a non-empty string")]
    Empty(&'static str),
    /// An environment variable name is empty or holds `=` or NUL.
    #[error("shell config: environment variable name {0:?} is invalid")]
    EnvName(String),
    /// The start directory is not absolute.
    #[error("shell config: `start_dir` must be an absolute path, got {0}")]
    RelativeStartDir(String),
    /// The start directory is not a directory on this machine (checked for
    /// local backends only: a remote backend's directory is on its side).
    #[error("shell config: `start_dir` {0} is not a directory")]
    StartDirMissing(String),
}

/// A start directory refused for one owner of a pool
/// ([`ShellPool::set_owner_dir`](crate::ShellPool::set_owner_dir), and the
/// sandbox's `SandboxedShell::set_owner_dir`). Nothing was changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OwnerDirError {
    /// The directory is not an absolute path.
    #[error("the start directory of owner {owner:?} must be an absolute path, got {}", .dir.display())]
    Relative {
        /// The owner.
        owner: String,
        /// The directory given.
        dir: PathBuf,
    },
    /// Nothing exists at the path (checked for local backends only: a
    /// remote backend's directory is on its side).
    #[error("the start directory {} of owner {owner:?} does not exist", .dir.display())]
    Missing {
        /// The owner.
        owner: String,
        /// The directory given.
        dir: PathBuf,
    },
    /// The path names something other than a directory (local backends
    /// only).
    #[error("the start directory {} of owner {owner:?} is not a directory", .dir.display())]
    NotADirectory {
        /// The owner.
        owner: String,
        /// The directory given.
        dir: PathBuf,
    },
    /// The path could not be looked at (a permission on the way, say;
    /// local backends only).
    #[error("the start directory {} of owner {owner:?} cannot be looked at: {source}", .dir.display())]
    Inaccessible {
        /// The owner.
        owner: String,
        /// The directory given.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The owner already holds what the directory decides: a running shell,
    /// a call under way, or (in the sandbox) its editor's filesystem.
    #[error(
        "cannot set the start directory of owner {owner:?} while {why}; set it before the owner's first use, or close the owner first"
    )]
    InUse {
        /// The owner.
        owner: String,
        /// What holds it: `its shell is running`, `a call of it is under
        /// way`, `its editor filesystem was handed out`.
        why: &'static str,
    },
}

dsh_pty::setters!(ShellConfig {
    dialect: Dialect,
    argv: Option<Vec<String>>,
    rc_files: bool,
    env: Vec<(String, String)>,
    inherit_env: bool,
    pass_secrets: bool,
    timeout: Duration,
    timeout_parameter: Option<Duration>,
    max_output_chars: usize,
    clip: ClipMode,
    description: Option<String>,
    normalize: NormalizeOptions,
    on_input_wait: InputWait,
    term_size: TermSize,
    scrollback: ScrollbackLimits,
    start_timeout: Duration,
    close_grace: Duration,
    backend: Arc<dyn PtyBackend>,
    persistent: bool,
    pre_exec: Vec<Arc<dyn PreExec>>,
    scratch_dir: Option<PathBuf>,
    idle_limit: Option<Duration>,
    limits: ResourceLimits,
});

impl ShellConfig {
    /// Sets [`ShellConfig::start_dir`].
    #[must_use]
    pub fn start_dir(mut self, start_dir: impl Into<PathBuf>) -> Self {
        self.start_dir = start_dir.into();
        self
    }

    /// The defaults, starting shells in `start_dir`.
    pub fn new(start_dir: impl Into<PathBuf>) -> Self {
        ShellConfig {
            dialect: Dialect::default(),
            start_dir: start_dir.into(),
            argv: None,
            rc_files: false,
            env: Vec::new(),
            inherit_env: true,
            pass_secrets: false,
            timeout: Duration::from_secs(300),
            timeout_parameter: None,
            max_output_chars: 16_000,
            clip: ClipMode::Head,
            description: None,
            normalize: NormalizeOptions::default(),
            on_input_wait: InputWait::SendEof,
            term_size: TermSize::default(),
            scrollback: SHELL_SCROLLBACK,
            start_timeout: Duration::from_secs(30),
            close_grace: Duration::from_millis(200),
            backend: dsh_pty::default_backend(),
            persistent: true,
            pre_exec: Vec::new(),
            scratch_dir: None,
            idle_limit: None,
            limits: ResourceLimits::default(),
        }
    }

    /// Checks every setting; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ShellConfigError> {
        if self.timeout.is_zero() {
            return Err(ShellConfigError::NotPositive("timeout"));
        }
        if self.timeout_parameter.is_some_and(|max| max.as_secs() == 0) {
            return Err(ShellConfigError::NotPositive("timeout_parameter"));
        }
        if self.start_timeout.is_zero() {
            return Err(ShellConfigError::NotPositive("start_timeout"));
        }
        if self.max_output_chars == 0 {
            return Err(ShellConfigError::NotPositive("max_output_chars"));
        }
        if self.idle_limit.is_some_and(|d| d.is_zero()) {
            return Err(ShellConfigError::NotPositive("idle_limit"));
        }
        if let Some(argv) = &self.argv
            && argv.first().is_none_or(|p| p.trim().is_empty())
        {
            return Err(ShellConfigError::Empty("argv"));
        }
        if self
            .description
            .as_ref()
            .is_some_and(|d| d.trim().is_empty())
        {
            return Err(ShellConfigError::Empty("description"));
        }
        if let Some((key, _)) = self
            .env
            .iter()
            .find(|(k, _)| k.is_empty() || k.contains('=') || k.contains('\0'))
        {
            return Err(ShellConfigError::EnvName(key.clone()));
        }
        if !self.start_dir.is_absolute() {
            return Err(ShellConfigError::RelativeStartDir(
                self.start_dir.display().to_string(),
            ));
        }
        if self.backend.is_local() && !self.start_dir.is_dir() {
            return Err(ShellConfigError::StartDirMissing(
                self.start_dir.display().to_string(),
            ));
        }
        Ok(())
    }

    /// Checks `dir` as `owner`'s own start directory under this
    /// configuration: an absolute path and, with a local backend, an
    /// existing directory (the same rules as [`ShellConfig::start_dir`]
    /// meets in [`ShellConfig::validate`]). What
    /// [`ShellPool::set_owner_dir`](crate::ShellPool::set_owner_dir) and
    /// the sandbox's `set_owner_dir` check before they take a directory.
    ///
    /// ```
    /// use dsh_shell_persistent::ShellConfig;
    /// let config = ShellConfig::new("/tmp");
    /// assert!(config.check_owner_dir("a1", "/tmp".as_ref()).is_ok());
    /// assert_eq!(
    ///     config.check_owner_dir("a1", "work/a1".as_ref()).unwrap_err().to_string(),
    ///     "the start directory of owner \"a1\" must be an absolute path, got work/a1"
    /// );
    /// ```
    pub fn check_owner_dir(&self, owner: &str, dir: &Path) -> Result<(), OwnerDirError> {
        let refused = |make: fn(String, PathBuf) -> OwnerDirError| {
            Err(make(owner.to_owned(), dir.to_owned()))
        };
        if !dir.is_absolute() {
            return refused(|owner, dir| OwnerDirError::Relative { owner, dir });
        }
        if !self.backend.is_local() {
            return Ok(());
        }
        match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => Ok(()),
            Ok(_) => refused(|owner, dir| OwnerDirError::NotADirectory { owner, dir }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                refused(|owner, dir| OwnerDirError::Missing { owner, dir })
            }
            Err(source) => Err(OwnerDirError::Inaccessible {
                owner: owner.to_owned(),
                dir: dir.to_owned(),
                source,
            }),
        }
    }

    /// The argv used to start a shell.
    pub fn effective_argv(&self) -> Vec<String> {
        self.argv
            .clone()
            .unwrap_or_else(|| self.dialect.default_argv(self.rc_files))
    }

    /// The tool's definition under this configuration: the dialect's name
    /// (`bash`, `sh`, `pwsh`), [`ShellConfig::effective_description`] and
    /// the one parameter `command` ([`ShellRequest`](crate::ShellRequest)),
    /// plus an optional `timeout` when [`ShellConfig::timeout_parameter`]
    /// offers one. Nothing is started or checked to make it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dsh_shell_persistent::ShellConfig;
    /// let spec = ShellConfig::new("/tmp").spec();
    /// assert_eq!(spec.name, "bash");
    /// assert_eq!(spec.openai()["parameters"]["required"], serde_json::json!(["command"]));
    /// assert!(spec.get("timeout").is_none());
    ///
    /// let spec = ShellConfig::new("/tmp")
    ///     .timeout_parameter(Some(Duration::from_secs(600)))
    ///     .spec();
    /// let timeout = &spec.openai()["parameters"]["properties"]["timeout"];
    /// assert_eq!(timeout["type"], "integer");
    /// assert_eq!(
    ///     timeout["description"],
    ///     "How many seconds the command may run before it is stopped and the shell reset: a whole number from 1 to 600 (300 if left out)."
    /// );
    /// ```
    pub fn spec(&self) -> dsh_tool::ToolSpec {
        use dsh_tool::{Kind, Parameter, ToolSpec};
        let spec = ToolSpec::new(self.dialect.tool_name(), self.effective_description()).parameter(
            Parameter::required("command", Kind::String, self.dialect.command_description()),
        );
        match self.timeout_parameter {
            None => spec,
            Some(max) => spec.parameter(Parameter::optional(
                "timeout",
                Kind::Integer,
                format!(
                    "How many seconds the command may run before it is stopped{}: a whole number from 1 to {} ({} if left out).",
                    if self.persistent { " and the shell reset" } else { "" },
                    max.as_secs(),
                    self.timeout.as_secs_f64().round() as u64
                ),
            )),
        }
    }

    /// The request in the model's JSON arguments, as this configuration's
    /// schema offers them ([`ShellConfig::spec`]): a non-empty string
    /// `command` ([`ShellError::EmptyCommand`](crate::ShellError::EmptyCommand)
    /// otherwise) and, when [`ShellConfig::timeout_parameter`] is set, an
    /// optional `timeout` within its bound. Other members are ignored.
    ///
    /// ```
    /// use std::time::Duration;
    /// use dsh_shell_persistent::{ShellConfig, contract, serde_json::json};
    /// let args = json!({"command": "make", "timeout": 900});
    /// // Not offered: ignored.
    /// assert_eq!(ShellConfig::new("/tmp").parse_request(&args)?.timeout, None);
    /// // Offered up to 600 s: 900 is refused, with the bound.
    /// let config = ShellConfig::new("/tmp").timeout_parameter(Some(Duration::from_secs(600)));
    /// assert_eq!(
    ///     contract::render_error(&config.parse_request(&args).unwrap_err()),
    ///     "timeout must be a whole number of seconds from 1 to 600"
    /// );
    /// let request = config.parse_request(&json!({"command": "make", "timeout": 60}))?;
    /// assert_eq!(request.timeout, Some(Duration::from_secs(60)));
    /// # Ok::<(), dsh_shell_persistent::ShellError>(())
    /// ```
    pub fn parse_request(&self, args: &Value) -> Result<ShellRequest, ShellError> {
        let mut request = ShellRequest::from_json(args)?;
        if let Some(max) = self.timeout_parameter {
            request.timeout = crate::request::timeout_of(args, max)?;
        }
        Ok(request)
    }

    /// The tool description used in the definition ([`ShellConfig::spec`]).
    pub fn effective_description(&self) -> String {
        match (&self.description, self.persistent) {
            (Some(d), _) => d.clone(),
            (None, true) => self.dialect.default_description(),
            (None, false) => self.dialect.one_shot_description(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_settings_name_themselves() {
        let base = || ShellConfig::new("/tmp");
        let cases = [
            (
                ShellConfig {
                    timeout: Duration::ZERO,
                    ..base()
                },
                "shell config: `timeout` must be a positive integer",
            ),
            (
                ShellConfig {
                    max_output_chars: 0,
                    ..base()
                },
                "shell config: `max_output_chars` must be a positive integer",
            ),
            (
                ShellConfig {
                    argv: Some(vec![" ".into()]),
                    ..base()
                },
                "shell config: `argv` must be a non-empty string",
            ),
            (
                ShellConfig {
                    description: Some(String::new()),
                    ..base()
                },
                "shell config: `description` must be a non-empty string",
            ),
            (
                ShellConfig {
                    env: vec![("A=B".into(), "x".into())],
                    ..base()
                },
                "shell config: environment variable name \"A=B\" is invalid",
            ),
            (
                ShellConfig::new("relative"),
                "shell config: `start_dir` must be an absolute path, got relative",
            ),
        ];
        for (config, want) in cases {
            assert_eq!(config.validate().unwrap_err().to_string(), want);
        }
        assert!(base().validate().is_ok());
    }
}
