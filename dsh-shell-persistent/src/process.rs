//! One shell process and the protocol of one call.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use dsh_pty::{ExitStatus, Foreground, OutputStream, PtySession, Signal, SpawnSpec, SpecField};
use tokio::time::Instant;

use crate::bash::{Fatal, Protocol, Repairs, STEM_HEX, Seen};
use crate::dialect::{CallIds, CommandSource, Dialect};
use crate::home;
use crate::marker::{CallScanner, ID_LEN, Markers, Progress, Search};
use crate::normalize::{NormalizeOptions, Normalizer};
use crate::notice::NoticeFilter;
use crate::output::Collector;
use crate::{InputWait, ShellConfig, ShellError};

/// How long ending a shell's tree waits after SIGTERM/SIGHUP before SIGKILL.
pub(crate) const KILL_GRACE: Duration = Duration::from_millis(200);
/// How often the foreground is inspected while a command runs.
const INPUT_CHECK: Duration = Duration::from_millis(250);
/// How long a command must wait for input before end-of-file is sent.
const INPUT_PATIENCE: Duration = Duration::from_millis(750);
/// How many times end-of-file is sent in one call.
const MAX_EOFS: u32 = 3;
// A program that waits for a person (keys one by one, or a secret typed
// without echo) gets one end-of-file too (a line editor such as Python's
// REPL leaves at it); if it still waits `INPUT_PATIENCE` later, its process
// group is killed (`SIGKILL`: no emergency save an editor would make on a
// hang-up, and bash puts the terminal's modes back after a job a signal
// killed).
/// How long bash must wait at its prompt after a call line was written,
/// reading its terminal, with no start marker and no output, before the line
/// counts as read and not run (a syntax error at the top level: bash prints
/// no `PS0` for it). Long beside the microseconds `PS0` takes, so that a
/// loaded machine's late output is not taken for it.
const NOT_RUN_PATIENCE: Duration = Duration::from_secs(2);
/// How long an abandoned-line prompt may take to be confirmed (bash prints
/// it, then blocks reading the terminal within microseconds).
const CONFIRM_WITHIN: Duration = Duration::from_millis(100);
// An abandoned-line prompt not confirmed in time (a loaded machine) is
// confirmed again by each periodic check.

/// How one call ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The end prompt (or bash's abandoned-line prompt) and status were seen;
    /// the shell is at its prompt with its state.
    Completed {
        output: Collector,
        status: i32,
        eofs_sent: u32,
        repairs: Repairs,
        continued: bool,
        /// Programs that waited for a person and were ended, by name where
        /// it was seen.
        ended: Vec<Option<String>>,
    },
    /// The shell had ended before this call's line ran (killed from
    /// outside between calls, or it read an end-of-file left on its
    /// terminal): nothing of the command ran, so it may run again in a
    /// fresh shell.
    EndedBeforeStart,
    /// The shell ended before the end marker.
    ShellEnded {
        output: Collector,
        exit: ExitStatus,
        errexit: bool,
    },
    /// The connection to a shell running elsewhere broke; its fate is unknown.
    Lost {
        output: Collector,
        error: Arc<dsh_pty::PtyError>,
    },
    /// The shell is alive but can no longer run the protocol: it must be reset.
    Broken { output: Collector, why: Broken },
    /// The call's timeout (`after`) passed; the shell's process tree was
    /// killed.
    TimedOut { output: Collector, after: Duration },
    /// The cancel signal fired; the caller ends the shell (it is not reused).
    Cancelled,
}

/// Why a shell can no longer be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Broken {
    /// A stop the protocol reported itself.
    Fatal(Fatal),
    /// The previous call's prompt came back: none of this call's wrapper ran.
    Stale,
    /// bash waits at its prompt and printed no start marker: it read the
    /// line and ran none of it.
    NotRun,
    /// Prompt expansion is off (`shopt -u promptvars`).
    NoPromptExpansion,
    /// Another program replaced the shell (`exec`).
    Replaced,
}

/// What one look at the terminal's foreground found ([`Process::look`]).
#[derive(Debug)]
struct Look {
    fg: Option<dsh_pty::Foreground>,
    /// The shell is in front, but another program took its place (`exec`).
    replaced: bool,
    /// The shell is in front and stopped.
    stopped: bool,
}

/// A live shell. It holds the only lasting reference to its session, so
/// dropping it (a call's future dropped midway, a shell discarded after a
/// reset) drops the session, which kills the process tree.
#[derive(Debug)]
pub(crate) struct Process {
    session: Arc<dyn PtySession>,
    /// The terminal's output: a call's while it runs (taken out for it);
    /// discarding in between, so that a job printing to the terminal never
    /// blocks.
    output: Option<OutputStream>,
    proto: Protocol,
    next_start: String,
    /// The id of the last end prompt shown, to recognise it if it comes again.
    last_end: Option<String>,
    /// The shell's own process group (the foreground while it is at its
    /// prompt) and its program, learned once it is ready.
    home: Option<home::Home>,
    /// `set -e` was on after the last call.
    errexit: bool,
    /// `set -x` or `set -v` was on after the last call (its end prompt
    /// said so).
    traced: bool,
    /// The last call's status.
    last_status: i32,
    /// bash waits at its prompt in POSIX mode: the last call ended through
    /// its epilogue, or none ran since the init line (which enters it).
    in_posix: bool,
    scratch: Option<tempfile::TempDir>,
    /// Where `scratch` is made ([`ShellConfig::scratch_dir`]).
    scratch_in: Option<std::path::PathBuf>,
    /// The search for the marker prefix, kept from call to call.
    search: Option<Search>,
}

/// A fresh id of `len` hex digits.
fn id(len: usize) -> Result<String, ShellError> {
    dsh_pty::random_hex(len).map_err(ShellError::Random)
}

impl Process {
    /// Spawns a shell and waits for its first controlled prompt.
    pub(crate) async fn spawn(config: &ShellConfig) -> Result<Process, ShellError> {
        let shell = config.dialect.tool_name();
        let argv = config.effective_argv();
        let ready = id(ID_LEN)?;
        let first_start = id(ID_LEN)?;
        let proto = Protocol::new(&id(ID_LEN)?, &id(ID_LEN)?, &id(STEM_HEX)?);
        let mut spec = SpawnSpec::new(&argv[0]);
        if !config.inherit_env {
            spec = spec.env_clear();
        }
        let mut spec = crate::env::without_secrets(spec, config)
            .args(&argv[1..])
            .cwd(&config.start_dir)
            .size(config.term_size)
            .scrollback(config.scrollback)
            .env("TERM", "dumb")
            .env("PAGER", "cat")
            .env("GIT_PAGER", "cat")
            .env("PS1", "")
            .env("PS2", "")
            .env("HISTFILE", "/dev/null")
            .env_remove("PROMPT_COMMAND")
            .env_remove("ENV")
            .env_remove("BASH_ENV");
        for (k, v) in &config.env {
            spec = spec.env(k, v);
        }
        // Echo and output processing off where the backend keeps that
        // (the protocol reads either way; off is faster and quieter).
        let keeps = config.backend.keeps();
        if keeps.keeps(SpecField::Echo) {
            spec = spec.echo(false);
        }
        if keeps.keeps(SpecField::OutputProcessing) {
            spec = spec.output_processing(false);
        }
        for hook in &config.pre_exec {
            spec = spec.pre_exec(Arc::clone(hook));
        }
        let spec = spec.limits(config.limits.clone());
        let mut session = config
            .backend
            .spawn(spec)
            .await
            .map_err(|source| ShellError::Spawn { shell, source })?;
        let mut output = session.take_output().ok_or(ShellError::Spawn {
            shell,
            source: dsh_pty::PtyError::Closed,
        })?;
        // From here on, `Shell`'s `Drop` kills the process on any early return.
        let mut shell_obj = Process {
            session: Arc::from(session),
            output: None,
            proto,
            next_start: first_start.clone(),
            last_end: None,
            home: None,
            errexit: false,
            traced: false,
            last_status: 0,
            in_posix: true,
            scratch: None,
            scratch_in: config.scratch_dir.clone(),
            search: None,
        };
        let init = config
            .dialect
            .init_line(&shell_obj.proto, &ready, &first_start);
        shell_obj
            .session
            .write_all(init.as_bytes())
            .await
            .map_err(|source| ShellError::Terminal { shell, source })?;
        let mut search = Search::new(&shell_obj.proto.marker(&ready));
        // What a shell that ends before its prompt printed (a missing
        // program's error, from the backend or the shell): the start of it.
        let mut said = Vec::new();
        let wait_ready = async {
            while let Some(chunk) = output.recv().await {
                if said.len() < SAID_BYTES {
                    said.extend_from_slice(&chunk[..chunk.len().min(SAID_BYTES - said.len())]);
                }
                if search.feed(&chunk, &mut |_| {}).is_some() {
                    return true;
                }
            }
            false
        };
        match tokio::time::timeout(config.start_timeout, wait_ready).await {
            Ok(true) => {
                // At its prompt, the terminal's foreground is the shell
                // itself; whether it waits for input does not matter here.
                let fg = shell_obj.session.foreground_brief().await.ok();
                shell_obj.home = fg.as_ref().map(home::Home::new);
                output.discard();
                shell_obj.output = Some(output);
                Ok(shell_obj)
            }
            Ok(false) => Err(ShellError::EndedAtStart {
                shell,
                said: said_text(&said, config.normalize),
            }),
            Err(_) => Err(ShellError::NotReady {
                shell,
                seconds: config.start_timeout.as_secs(),
            }),
        }
    }

    /// The session, for input and inspection from outside the call.
    pub(crate) fn session(&self) -> Arc<dyn PtySession> {
        Arc::clone(&self.session)
    }

    /// Runs `command` for at most `timeout`; `cancel` resolving means
    /// cancellation, and
    /// `line_written` is told once the call's line is on the terminal (from
    /// then on, typed input reaches the command, not bash's command reader).
    pub(crate) async fn call(
        &mut self,
        config: &ShellConfig,
        command: &str,
        timeout: Duration,
        cancel: impl Future<Output = ()>,
        line_written: impl FnOnce(),
    ) -> Result<Outcome, ShellError> {
        let dialect = config.dialect;
        let shell = dialect.tool_name();
        // One request for randomness per call: the call's tag, its end and
        // the next call's start.
        let hex = id(8 + 2 * ID_LEN)?;
        let (call, ends) = hex.split_at(8);
        let (end, next_start) = ends.split_at(ID_LEN);
        let ids = CallIds {
            call: call.to_owned(),
            start: if dialect.start_is_preset() {
                std::mem::take(&mut self.next_start)
            } else {
                id(ID_LEN)?
            },
            end: end.to_owned(),
            next_start: next_start.to_owned(),
            after_syntax_error: self.last_status == 2,
            // Until this call's epilogue shows its end prompt.
            in_posix: std::mem::take(&mut self.in_posix),
            traced: self.traced,
        };
        let (file, local_file) = if dialect.needs_file(command) {
            match self.put_command_file(command, shell).await? {
                (path, true) => (Some(path.clone()), Some(path)),
                (path, false) => (Some(path), None),
            }
        } else {
            (None, None)
        };
        let source = match &file {
            Some(path) => CommandSource::File { path, command },
            None => CommandSource::Inline(command),
        };
        let line = dialect.call_line(&self.proto, &source, &ids);
        self.next_start.clone_from(&ids.next_start);

        // The stream, queueing output again; what was printed since the
        // last call (background output, notices) was dropped: the start
        // marker separates it anyway, this only saves scanning.
        let mut output = self.output.take().ok_or(ShellError::Terminal {
            shell,
            source: dsh_pty::PtyError::Closed,
        })?;
        let dropped = output.deliver();
        if dropped > 0 {
            tracing::debug!(bytes = dropped, "output between calls dropped");
        }

        let mut cancel = pin!(cancel);
        let write = self.session.write_all(line.as_bytes());
        let written = tokio::select! {
            biased;
            () = &mut cancel => return Ok(Outcome::Cancelled),
            written = write => written,
        };
        if let Err(source) = written {
            self.output = Some(output);
            // A shell that died since the last call is not this call's error.
            if matches!(source, dsh_pty::PtyError::WriteAfterExit)
                || self.session.status().is_some()
            {
                return Ok(Outcome::EndedBeforeStart);
            }
            return Err(ShellError::Terminal { shell, source });
        }
        line_written();
        let outcome = CallState::new(self, &mut output, config, ids, timeout)
            .run(cancel)
            .await;
        // Dropped until the next call, so no job blocks writing to the
        // terminal.
        output.discard();
        self.output = Some(output);
        if let Some(path) = local_file {
            let _ = std::fs::remove_file(path);
        }
        Ok(outcome)
    }

    /// Whether the shell itself is in front of the terminal (and, where that
    /// can be seen and `reading` asks for it, blocked reading it): then a
    /// prompt it showed is its own, not text a command printed.
    async fn confirm_at_prompt(&self, reading: bool) -> bool {
        let Some(home) = &self.home else {
            return true; // nothing to compare with: trust the prompt
        };
        let give_up = Instant::now() + CONFIRM_WITHIN;
        let mut pause = Duration::from_micros(200);
        loop {
            match self.look().await.fg {
                None => return true,
                Some(fg) if home.in_front(&fg) => {
                    if !reading || home::may_read(&fg) {
                        return true;
                    }
                }
                Some(_) => {}
            }
            if Instant::now() >= give_up {
                return false;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }

    /// The terminal's foreground and, when the shell itself is in front,
    /// whether another program replaced it or it is stopped (what the
    /// backend reports; a local one reads the process table off the
    /// runtime's threads).
    async fn look(&self) -> Look {
        let fg = self.session.foreground().await.ok();
        let (replaced, stopped) = match (&self.home, &fg) {
            (Some(home), Some(fg)) if home.in_front(fg) => (home.replaced(fg), home::stopped(fg)),
            _ => (false, false),
        };
        Look {
            fg,
            replaced,
            stopped,
        }
    }

    /// Puts a long command in a file the shell can read: on the program's
    /// side when the backend is remote (`false`: the session removes it),
    /// else in a local scratch directory (`true`: removed after the call).
    async fn put_command_file(
        &mut self,
        command: &str,
        shell: &'static str,
    ) -> Result<(std::path::PathBuf, bool), ShellError> {
        match self
            .session
            .put_scratch_file("cmd", command.as_bytes())
            .await
        {
            Ok(path) => return Ok((path, false)),
            Err(dsh_pty::PtyError::Unsupported { .. }) => {}
            Err(source) => {
                return Err(ShellError::Terminal { shell, source });
            }
        }
        Ok((self.write_command_file(command)?, true))
    }

    fn write_command_file(&mut self, command: &str) -> Result<std::path::PathBuf, ShellError> {
        if self.scratch.is_none() {
            let mut builder = tempfile::Builder::new();
            builder.prefix("dsh-shell-");
            let dir = match &self.scratch_in {
                Some(dir) => builder.tempdir_in(dir),
                None => builder.tempdir(),
            }
            .map_err(ShellError::CommandFile)?;
            self.scratch = Some(dir);
        }
        let dir = self
            .scratch
            .as_ref()
            .map(|d| d.path().to_owned())
            .unwrap_or_default();
        let path = dir.join(format!("cmd-{}", id(32)?));
        std::fs::write(&path, command).map_err(ShellError::CommandFile)?;
        Ok(path)
    }
}

/// How a call ended, decided by one of [`CallState`]'s handlers; the
/// output is added when the state is consumed ([`CallState::outcome`]).
#[derive(Debug)]
enum End {
    Completed {
        status: Option<i32>,
        repairs: Repairs,
    },
    EndedBeforeStart,
    ShellEnded(ExitStatus),
    Lost(Arc<dsh_pty::PtyError>),
    Broken(Broken),
    TimedOut,
    Cancelled,
}

/// An abandoned-line prompt of this call that the shell was not yet seen
/// waiting at, and the status it showed.
#[derive(Debug, Clone, Copy)]
struct Unconfirmed {
    status: Option<i32>,
}

/// One call after its line was written: the scanner and the output on one
/// side, the events that move it on the other (output, a periodic look at
/// the foreground, the timeout, cancellation), one handler each.
struct CallState<'a> {
    process: &'a mut Process,
    output: &'a mut OutputStream,
    config: &'a ShellConfig,
    ids: CallIds,
    /// How long the call may run.
    timeout: Duration,
    scanner: CallScanner,
    text: Text,
    /// Since when the foreground has waited for input.
    waiting_since: Option<Instant>,
    eofs_sent: u32,
    /// An end-of-file was sent and the terminal's input not discarded
    /// since ([`CallState::flush_unread_eof`]).
    eof_unread: bool,
    /// Looks in a row since then that found nothing waiting for input.
    idle_looks: u8,
    continued: bool,
    /// This call's abandoned-line prompt, seen but not yet confirmed.
    unconfirmed: Option<Unconfirmed>,
    /// Before the start marker: since when bash has been seen waiting at
    /// its prompt with no output in between.
    idle_unstarted: Option<Instant>,
    /// The program in front (not the shell), and how long it has waited
    /// for a person.
    person: Option<PersonWait>,
    /// The names of the programs that waited for a person and were ended.
    ended: Vec<Option<String>>,
}

/// A program in front of the terminal that waits for a person: keys one by
/// one (a pager, an editor, `top`) or a secret typed without echo (a
/// password prompt).
#[derive(Debug)]
struct PersonWait {
    pgid: i32,
    /// Since when it has been seen waiting, look after look.
    since: Option<Instant>,
    /// End-of-file sent to it.
    eofs: u32,
}

impl<'a> CallState<'a> {
    fn new(
        process: &'a mut Process,
        output: &'a mut OutputStream,
        config: &'a ShellConfig,
        ids: CallIds,
        timeout: Duration,
    ) -> Self {
        let bash = config.dialect == Dialect::Bash;
        let scanner = CallScanner::with_search(
            Markers {
                prefix: process.proto.prefix().to_owned(),
                start: ids.start.clone(),
                end: ids.end.clone(),
                abandon: bash.then(|| process.proto.abandon_id().to_owned()),
                stale: if bash { process.last_end.take() } else { None },
            },
            process.search.take(),
        );
        let text = Text {
            normalizer: Normalizer::new(config.normalize),
            notices: (config.dialect != Dialect::Pwsh).then(NoticeFilter::new),
            collector: Collector::new(config.max_output_chars, config.clip),
        };
        CallState {
            process,
            output,
            config,
            ids,
            timeout,
            scanner,
            text,
            waiting_since: None,
            eofs_sent: 0,
            eof_unread: false,
            idle_looks: 0,
            continued: false,
            unconfirmed: None,
            idle_unstarted: None,
            person: None,
            ended: Vec::new(),
        }
    }

    /// Runs the call to its end. Not an `async fn`: that would keep the
    /// state twice in its future (the argument, and the local it is moved
    /// into), and every future that awaits this one is that much larger.
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn keeps its arguments twice"
    )]
    fn run<C: Future<Output = ()>>(
        mut self,
        mut cancel: Pin<&mut C>,
    ) -> impl Future<Output = Outcome> {
        async move {
            // A host's timeout may be any duration: one beyond what the clock
            // can add is a deadline that never comes (about 30 years).
            let now = Instant::now();
            let deadline = now
                .checked_add(self.timeout)
                .unwrap_or_else(|| now + Duration::from_secs(30 * 365 * 86_400));
            // One timer for the whole call, not one made (and cancelled) at
            // each chunk: it fires for the next look at the foreground or
            // for the timeout, whichever comes first. The first look comes
            // after one period: most calls end long before, and inspecting
            // /proc is not free.
            let next = |from: Instant| {
                from.checked_add(INPUT_CHECK)
                    .map_or(deadline, |at| at.min(deadline))
            };
            let mut timer = pin!(tokio::time::sleep_until(next(now)));
            loop {
                let end = tokio::select! {
                    biased;
                    () = cancel.as_mut() => Some(End::Cancelled),
                    chunk = self.output.recv() => self.on_output(chunk, cancel.as_mut()).await,
                    () = timer.as_mut() => {
                        if Instant::now() >= deadline {
                            Some(self.on_timeout().await)
                        } else {
                            let end = if self.scanner.started() {
                                self.on_tick().await
                            } else if self.watch_unstarted() {
                                self.on_tick_unstarted().await
                            } else {
                                None
                            };
                            // The next look one period after this one ended.
                            timer.as_mut().reset(next(Instant::now()));
                            end
                        }
                    }
                };
                if let Some(end) = end {
                    if matches!(end, End::Completed { .. }) {
                        self.flush_unread_eof().await;
                    }
                    return self.outcome(end);
                }
            }
        }
    }

    /// A chunk of output, or its end (`None`).
    async fn on_output<C: Future<Output = ()>>(
        &mut self,
        chunk: Option<impl AsRef<[u8]>>,
        cancel: Pin<&mut C>,
    ) -> Option<End> {
        let Some(chunk) = chunk else {
            return Some(self.on_output_end().await);
        };
        self.idle_unstarted = None;
        let text = &mut self.text;
        let Progress::Prompt { which, tag, status } =
            self.scanner.feed(chunk.as_ref(), &mut |b| text.feed(b))
        else {
            return None;
        };
        // Cancellation wins even over a complete result.
        if poll_once(cancel).await {
            return Some(End::Cancelled);
        }
        self.process.last_status = status.unwrap_or(-1);
        match Seen::of(which, &tag, &self.ids.call) {
            Seen::End(repairs) => {
                self.process.in_posix = true;
                self.process.errexit = repairs.errexit;
                self.process.traced = repairs.traced;
                self.process.last_end = Some(self.ids.end.clone());
                return Some(End::Completed { status, repairs });
            }
            Seen::Stale => return Some(End::Broken(Broken::Stale)),
            Seen::Fatal(fatal) => return Some(End::Broken(Broken::Fatal(fatal))),
            Seen::NoPromptExpansion => return Some(End::Broken(Broken::NoPromptExpansion)),
            Seen::Abandoned => {
                // bash abandoned the line; unless the command printed the
                // prompt itself, bash now waits at it.
                if self.process.confirm_at_prompt(true).await {
                    return Some(End::Completed {
                        status,
                        repairs: Repairs::default(),
                    });
                }
                self.unconfirmed = Some(Unconfirmed { status });
            }
            Seen::Inherited => {
                // The shell itself, if it was replaced.
                if self.process.confirm_at_prompt(false).await {
                    return Some(End::Broken(Broken::Replaced));
                }
            }
            Seen::Other => {}
        }
        self.scanner.resume();
        None
    }

    /// The output ended before the end prompt: the shell ended, or the
    /// connection to it broke.
    async fn on_output_end(&mut self) -> End {
        self.finish_scan();
        match self.process.session.connection_lost() {
            Some(error) => End::Lost(error),
            // No start marker: the shell was gone before it read the line.
            None if !self.scanner.started() => End::EndedBeforeStart,
            None => End::ShellEnded(self.process.session.wait().await),
        }
    }

    /// The timeout: the shell's tree is killed.
    async fn on_timeout(&mut self) -> End {
        self.finish_scan();
        let _ = self.process.session.end(KILL_GRACE).await;
        End::TimedOut
    }

    /// Whether the periodic look runs before the start marker: for bash
    /// (whose line can fail to parse as a whole) where the shell's own
    /// process can be told apart.
    fn watch_unstarted(&self) -> bool {
        self.config.dialect == Dialect::Bash && self.process.home.is_some()
    }

    /// The periodic look before the start marker: bash in front and seen
    /// blocked reading its terminal (not merely "cannot tell"), with
    /// nothing printed in between, for [`NOT_RUN_PATIENCE`]: it read the
    /// line and ran none of it.
    async fn on_tick_unstarted(&mut self) -> Option<End> {
        let look = self.process.look().await;
        let waiting = match (&self.process.home, &look.fg) {
            (Some(home), Some(fg)) => {
                home.in_front(fg) && !look.replaced && fg.waiting_for_input == Some(true)
            }
            _ => false,
        };
        if !waiting {
            self.idle_unstarted = None;
            return None;
        }
        let now = Instant::now();
        let since = *self.idle_unstarted.get_or_insert(now);
        (now.duration_since(since) >= NOT_RUN_PATIENCE).then(|| {
            self.finish_scan();
            End::Broken(Broken::NotRun)
        })
    }

    /// The periodic look at the foreground: an abandoned line confirmed, a
    /// replaced or stopped shell, a command waiting for input.
    async fn on_tick(&mut self) -> Option<End> {
        let look = self.process.look().await;
        if let (Some(home), Some(fg)) = (&self.process.home, &look.fg)
            && home.in_front(fg)
        {
            let reading = home::may_read(fg);
            // The shell waits at its prompt and no end prompt came: the
            // abandoned line was real.
            if let Some(Unconfirmed { status }) = self.unconfirmed
                && reading
                && !look.replaced
            {
                return Some(End::Completed {
                    status,
                    repairs: Repairs::default(),
                });
            }
            // Another program in the shell's place is a command until it
            // waits for input: then it is at its prompt.
            if look.replaced && reading {
                self.finish_scan();
                return Some(End::Broken(Broken::Replaced));
            }
            if look.stopped
                && self
                    .process
                    .session
                    .signal_foreground(Signal::Continue)
                    .is_ok()
            {
                self.continued = true;
            }
        }
        // An end-of-file sent, and nothing seen waiting for input on two
        // looks in a row: whoever it was sent to went on without reading it
        // (or read it: then there is nothing to discard). One look is not
        // enough: a reader woken by it may not have run yet on a busy
        // machine.
        if self.eof_unread {
            let idle = look
                .fg
                .as_ref()
                .is_some_and(|fg| fg.waiting_for_input == Some(false));
            self.idle_looks = if idle { self.idle_looks + 1 } else { 0 };
            if self.idle_looks >= 2 {
                self.flush_unread_eof().await;
            }
        }
        match &look.fg {
            Some(fg) if self.program_in_front(fg) => {
                if self.person.as_ref().is_none_or(|wait| wait.pgid != fg.pgid) {
                    self.person = Some(PersonWait {
                        pgid: fg.pgid,
                        since: None,
                        eofs: 0,
                    });
                }
                if fg.waiting_for_input == Some(true)
                    && fg.input_mode.is_some_and(|mode| mode.needs_a_person())
                {
                    self.on_person_wait(fg).await;
                    return None;
                }
                if let Some(wait) = &mut self.person {
                    wait.since = None;
                }
            }
            _ => self.person = None,
        }
        self.on_input_wait(look.fg.is_some_and(|fg| fg.waiting_for_input == Some(true)))
            .await;
        None
    }

    /// A program other than the shell is in front (and the host does not
    /// answer input itself).
    fn program_in_front(&self, fg: &Foreground) -> bool {
        self.config.on_input_wait == InputWait::SendEof
            && self
                .process
                .home
                .as_ref()
                .is_some_and(|home| !home.in_front(fg))
    }

    /// The program in front waits for a person: after `INPUT_PATIENCE`, one
    /// end-of-file (a line editor leaves at it); seen waiting so for as long
    /// again, its group is killed.
    async fn on_person_wait(&mut self, fg: &Foreground) {
        let Some(wait) = &mut self.person else {
            return;
        };
        let now = Instant::now();
        let since = *wait.since.get_or_insert(now);
        if now.duration_since(since) < INPUT_PATIENCE {
            return;
        }
        if wait.eofs == 0 && self.eofs_sent < MAX_EOFS {
            tracing::debug!(program = ?fg.reader, "a program waits for a person; sending end-of-file");
            let _ = self.process.session.write_all(b"\x04").await;
            self.eofs_sent += 1;
            self.eof_unread = true;
            self.idle_looks = 0;
            wait.eofs += 1;
            wait.since = None;
            return;
        }
        let eofs = wait.eofs;
        // The end-of-file it left unread goes before the kill, so that the
        // shell, in front again at once, never reads it as its own end.
        self.flush_unread_eof().await;
        match self
            .process
            .session
            .signal_foreground_if(fg.pgid, Signal::Kill)
        {
            Ok(true) => {
                tracing::debug!(program = ?fg.reader, "a program waited for a person; it was killed");
                // End-of-file did not end it: the note says what did.
                self.eofs_sent = self.eofs_sent.saturating_sub(eofs);
                self.ended.push(fg.reader.clone());
                self.person = None;
            }
            Ok(false) => self.person = None,
            Err(error) => {
                tracing::debug!(
                    error = &error as &dyn std::error::Error,
                    "a program that waits for a person could not be ended"
                );
                self.person = None;
            }
        }
    }

    /// Sends end-of-file to a command that has waited for terminal input
    /// long enough (unless the host answers input itself).
    async fn on_input_wait(&mut self, waiting: bool) {
        if self.config.on_input_wait != InputWait::SendEof || self.eofs_sent >= MAX_EOFS {
            return;
        }
        match (waiting, self.waiting_since) {
            (false, _) => self.waiting_since = None,
            (true, None) => self.waiting_since = Some(Instant::now()),
            (true, Some(since)) if since.elapsed() >= INPUT_PATIENCE => {
                tracing::debug!("command waits for terminal input; sending end-of-file");
                let _ = self.process.session.write_all(b"\x04").await;
                self.eofs_sent += 1;
                self.eof_unread = true;
                self.idle_looks = 0;
                self.waiting_since = None;
            }
            (true, Some(_)) => {}
        }
    }

    /// Discards the terminal's unread input if an end-of-file was sent and
    /// not discarded since: a program that did not read it (it woke from a
    /// wait on the terminal and went on, or it is about to be killed)
    /// leaves it to the shell, which would end at it. Nothing else types
    /// into the terminal while a call runs and the tool answers input
    /// itself ([`InputWait::SendEof`]).
    async fn flush_unread_eof(&mut self) {
        self.idle_looks = 0;
        if std::mem::take(&mut self.eof_unread)
            && let Err(error) = self.process.session.flush_input().await
        {
            tracing::debug!(
                error = &error as &dyn std::error::Error,
                "the end-of-file sent could not be discarded"
            );
        }
    }

    /// Hands the scanner's held-back bytes to the output.
    fn finish_scan(&mut self) {
        let text = &mut self.text;
        self.scanner.finish(&mut |b| text.feed(b));
    }

    /// The call's outcome: how it ended and what it printed.
    fn outcome(self, end: End) -> Outcome {
        let CallState {
            text,
            eofs_sent,
            continued,
            ended,
            process,
            timeout,
            config,
            scanner,
            ..
        } = self;
        process.search = Some(scanner.into_search());
        match end {
            End::Completed { status, repairs } => Outcome::Completed {
                output: text.finish(),
                status: status.unwrap_or(-1),
                eofs_sent,
                repairs,
                continued,
                ended,
            },
            End::EndedBeforeStart => Outcome::EndedBeforeStart,
            End::ShellEnded(exit) => {
                let mut output = text.finish();
                if let Some(echo) = exit_echo(config, exit, process.errexit) {
                    output.strip_suffix(echo);
                }
                Outcome::ShellEnded {
                    output,
                    exit,
                    errexit: process.errexit,
                }
            }
            End::Lost(error) => Outcome::Lost {
                output: text.finish(),
                error,
            },
            End::Broken(why) => text.broken(why),
            End::TimedOut => Outcome::TimedOut {
                output: text.finish(),
                after: timeout,
            },
            End::Cancelled => Outcome::Cancelled,
        }
    }
}

/// A call's output on its way to the model: normalized, job notices
/// removed, bounded.
struct Text {
    normalizer: Normalizer,
    notices: Option<NoticeFilter>,
    collector: Collector,
}

impl Text {
    fn feed(&mut self, bytes: &[u8]) {
        if self.collector.is_full() {
            return;
        }
        let Text {
            normalizer,
            notices,
            collector,
        } = self;
        match notices {
            Some(filter) => {
                normalizer.push(bytes, &mut |s| filter.push(s, &mut |t| collector.push(t)))
            }
            None => normalizer.push(bytes, &mut |s| collector.push(s)),
        }
    }

    fn finish(self) -> Collector {
        let Text {
            mut normalizer,
            mut notices,
            mut collector,
        } = self;
        match &mut notices {
            Some(filter) => {
                normalizer.finish(&mut |s| filter.push(s, &mut |t| collector.push(t)));
                filter.finish(&mut |t| collector.push(t));
            }
            None => normalizer.finish(&mut |s| collector.push(s)),
        }
        collector
    }

    fn broken(self, why: Broken) -> Outcome {
        let mut output = self.finish();
        if why == Broken::Replaced {
            output.drop_unfinished_line();
        }
        Outcome::Broken { output, why }
    }
}

/// What an interactive bash wrote last when it ran its `exit` builtin, if
/// it can have: `exit` (`logout` for a login shell) and a newline, on its
/// standard error, the terminal. Only bash writes it, only when it exited
/// with a status (a signal kills it without a word), and not when `set -e`
/// ended it (bash leaves then without the echo). The output loses that
/// ending and nothing else: a line `exit` the command printed before is
/// followed by bash's own; what remains of the ending is what the command
/// printed (`printf x; exit 3` leaves `x`). Two endings it cannot tell
/// from the echo, and so removes: a program `exec`'d in the shell's place
/// whose own output ends with exactly `exit` and a newline, and the same
/// printed last by a call that turned `set -e` on and then failed (whether
/// `set -e` is on is known only from the end of the previous call).
fn exit_echo(config: &ShellConfig, exit: ExitStatus, errexit: bool) -> Option<&'static str> {
    if config.dialect != Dialect::Bash || exit.code().is_none() || errexit {
        return None;
    }
    let argv = config.effective_argv();
    let login = argv
        .iter()
        .skip(1)
        .any(|a| a == "--login" || (a.starts_with('-') && !a.starts_with("--") && a.contains('l')));
    Some(if login { "logout\n" } else { "exit\n" })
}

/// `true` if `fut` is ready right now.
async fn poll_once<F: Future<Output = ()>>(mut fut: Pin<&mut F>) -> bool {
    std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx).is_ready())).await
}
/// How much of what a shell printed before it ended at its start an error
/// shows.
const SAID_BYTES: usize = 512;

/// What a shell printed before it ended at its start, as one line of text:
/// normalized as a call's output is (escape sequences, `\r`, invalid
/// UTF-8), then its lines joined (empty when it printed nothing).
fn said_text(bytes: &[u8], options: NormalizeOptions) -> String {
    let mut text = String::new();
    let mut normalizer = Normalizer::new(options);
    normalizer.push(bytes, &mut |t| text.push_str(t));
    normalizer.finish(&mut |t| text.push_str(t));
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
