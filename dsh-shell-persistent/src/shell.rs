//! One persistent shell process and the protocol of one call.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use dsh_pty::{ExitStatus, OutputStream, PtySession, SpawnSpec};
use tokio::time::Instant;

use crate::dialect::CommandSource;
use crate::marker::{CallScanner, Progress, Search, new_token};
use crate::normalize::Normalizer;
use crate::output::Collector;
use crate::{InputWait, ShellConfig, ShellError};

/// How long `kill_tree` waits after SIGTERM/SIGHUP before SIGKILL.
const KILL_GRACE: Duration = Duration::from_millis(200);
/// How often the foreground is inspected while a command runs.
const INPUT_CHECK: Duration = Duration::from_millis(250);
/// How long a command must wait for input before end-of-file is sent.
const INPUT_PATIENCE: Duration = Duration::from_millis(750);
/// How many times end-of-file is sent in one call.
const MAX_EOFS: u32 = 3;

/// How one call ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The end marker and status were seen.
    Completed {
        output: Collector,
        status: i32,
        eofs_sent: u32,
    },
    /// The shell ended before the end marker.
    ShellEnded { output: Collector, exit: ExitStatus },
    /// The timeout passed; the shell's process tree was killed.
    TimedOut { output: Collector },
    /// The cancel signal fired; the shell was killed.
    Cancelled,
}

/// A live shell.
#[derive(Debug)]
pub(crate) struct Shell {
    session: Arc<dyn PtySession>,
    output: OutputStream,
    next_start: String,
    scratch: Option<tempfile::TempDir>,
}

fn token() -> Result<String, ShellError> {
    new_token().map_err(|e| ShellError::Random(e.to_string()))
}

impl Shell {
    /// Spawns a shell and waits for its first controlled prompt.
    pub(crate) async fn spawn(config: &ShellConfig) -> Result<Shell, ShellError> {
        let shell = config.dialect.tool_name();
        let argv = config.effective_argv();
        let ready = token()?;
        let first_start = token()?;
        let mut spec = SpawnSpec::new(&argv[0]);
        if !config.inherit_env {
            spec = spec.env_clear();
        }
        let mut spec = spec
            .args(&argv[1..])
            .cwd(&config.start_dir)
            .size(config.term_size)
            .scrollback(config.scrollback)
            .echo(false)
            .output_processing(false)
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
        for hook in &config.pre_exec {
            spec = spec.pre_exec(Arc::clone(hook));
        }
        let mut session = config
            .backend
            .spawn(spec)
            .await
            .map_err(|source| ShellError::Spawn { shell, source })?;
        let output = session.take_output().ok_or(ShellError::Spawn {
            shell,
            source: dsh_pty::PtyError::Closed,
        })?;
        // From here on, `Shell`'s `Drop` kills the process on any early return.
        let mut shell_obj = Shell {
            session: Arc::from(session),
            output,
            next_start: first_start.clone(),
            scratch: None,
        };
        let init = config.dialect.init_line(&ready, &first_start);
        shell_obj
            .session
            .write_all(init.as_bytes())
            .await
            .map_err(|source| ShellError::Terminal { shell, source })?;
        let mut search = Search::new(&ready);
        let wait_ready = async {
            while let Some(chunk) = shell_obj.output.recv().await {
                if search.feed(&chunk, &mut |_| {}).is_some() {
                    return true;
                }
            }
            false
        };
        match tokio::time::timeout(config.start_timeout, wait_ready).await {
            Ok(true) => Ok(shell_obj),
            Ok(false) => Err(ShellError::Spawn {
                shell,
                source: dsh_pty::PtyError::Closed,
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

    /// Runs one command; `cancel` resolving means cancellation.
    pub(crate) async fn call(
        &mut self,
        config: &ShellConfig,
        command: &str,
        cancel: impl Future<Output = ()>,
    ) -> Result<Outcome, ShellError> {
        let dialect = config.dialect;
        let shell = dialect.tool_name();
        let start = if dialect.start_is_preset() {
            std::mem::take(&mut self.next_start)
        } else {
            token()?
        };
        let end = token()?;
        let next_start = token()?;
        let file = if dialect.needs_file(command) {
            Some(self.write_command_file(command)?)
        } else {
            None
        };
        let source = match &file {
            Some(path) => CommandSource::File(path),
            None => CommandSource::Inline(command),
        };
        let line = dialect.call_line(&source, &start, &end, &next_start);
        self.next_start = next_start;

        // Drop what arrived between calls (background output, notices):
        // the start marker separates it anyway, this only saves scanning.
        while self.output.try_recv().is_some() {}

        let mut scanner = CallScanner::new(&start, &end);
        let mut normalizer = Normalizer::new(config.normalize);
        let mut collector = Collector::new(config.max_output_chars, config.clip);
        let deadline = Instant::now() + config.timeout;
        let mut cancel = pin!(cancel);
        // The first look at the foreground comes after one period: most
        // calls end long before, and inspecting /proc is not free.
        let mut checks = tokio::time::interval_at(Instant::now() + INPUT_CHECK, INPUT_CHECK);
        checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut waiting_since: Option<Instant> = None;
        let mut eofs_sent = 0u32;

        let write = self.session.write_all(line.as_bytes());
        tokio::select! {
            biased;
            () = &mut cancel => return Ok(self.cancelled()),
            written = write => written.map_err(|source| ShellError::Terminal { shell, source })?,
        }

        let outcome = loop {
            tokio::select! {
                biased;
                () = &mut cancel => break self.cancelled(),
                chunk = self.output.recv() => {
                    let Some(chunk) = chunk else {
                        scanner.finish(&mut |b| feed(&mut normalizer, &mut collector, b));
                        normalizer.finish(&mut |s| collector.push(s));
                        let exit = self.session.wait().await;
                        break Outcome::ShellEnded { output: collector, exit };
                    };
                    let progress = scanner.feed(&chunk, &mut |b| feed(&mut normalizer, &mut collector, b));
                    if let Progress::Done { status } = progress {
                        normalizer.finish(&mut |s| collector.push(s));
                        // Cancellation wins even over a complete result.
                        if poll_once(cancel.as_mut()).await {
                            break self.cancelled();
                        }
                        break Outcome::Completed { output: collector, status, eofs_sent };
                    }
                }
                () = tokio::time::sleep_until(deadline) => {
                    scanner.finish(&mut |b| feed(&mut normalizer, &mut collector, b));
                    normalizer.finish(&mut |s| collector.push(s));
                    let _ = self.session.kill_tree(KILL_GRACE).await;
                    break Outcome::TimedOut { output: collector };
                }
                _ = checks.tick(), if scanner.started()
                    && config.on_input_wait == InputWait::SendEof
                    && eofs_sent < MAX_EOFS => {
                    let waiting = self.session.foreground().is_ok_and(|fg| fg.waiting_for_input);
                    match (waiting, waiting_since) {
                        (false, _) => waiting_since = None,
                        (true, None) => waiting_since = Some(Instant::now()),
                        (true, Some(since)) if since.elapsed() >= INPUT_PATIENCE => {
                            tracing::debug!("command waits for terminal input; sending end-of-file");
                            let _ = self.session.write_all(b"\x04").await;
                            eofs_sent += 1;
                            waiting_since = None;
                        }
                        (true, Some(_)) => {}
                    }
                }
            }
        };
        if let Some(path) = file {
            let _ = std::fs::remove_file(path);
        }
        Ok(outcome)
    }

    fn cancelled(&mut self) -> Outcome {
        self.session.kill_now();
        Outcome::Cancelled
    }

    fn write_command_file(&mut self, command: &str) -> Result<std::path::PathBuf, ShellError> {
        if self.scratch.is_none() {
            let dir = tempfile::Builder::new()
                .prefix("dsh-shell-")
                .tempdir()
                .map_err(ShellError::CommandFile)?;
            self.scratch = Some(dir);
        }
        let dir = self
            .scratch
            .as_ref()
            .map(|d| d.path().to_owned())
            .unwrap_or_default();
        let path = dir.join(format!("cmd-{}", token()?));
        std::fs::write(&path, command).map_err(ShellError::CommandFile)?;
        Ok(path)
    }

    /// Kills the process tree gracefully (used when closing).
    pub(crate) async fn close(&self) {
        let _ = self.session.kill_tree(KILL_GRACE).await;
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        // A shell dropped mid-call (cancelled future) or discarded after a
        // reset must not keep running.
        self.session.kill_now();
    }
}

fn feed(normalizer: &mut Normalizer, collector: &mut Collector, bytes: &[u8]) {
    if !collector.is_full() {
        normalizer.push(bytes, &mut |s| collector.push(s));
    }
}

/// `true` if `fut` is ready right now.
async fn poll_once<F: Future<Output = ()>>(mut fut: std::pin::Pin<&mut F>) -> bool {
    std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx).is_ready())).await
}
