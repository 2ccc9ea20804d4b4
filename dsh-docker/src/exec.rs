//! Small commands run in the container next to the shell: the process-tree
//! kill, signals, scratch files and every filesystem operation.

use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use dsh_pty::ExitStatus;
use dsh_pty::remote::{Helper, Ran};

use crate::{Container, DockerError};

/// Runs `sh -c script sh args...` in the container (no terminal), feeding
/// `stdin` when given, and collects its output and exit code.
pub(crate) async fn run_sh(
    container: &Container,
    user: Option<&str>,
    script: &str,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<Ran, DockerError> {
    let mut cmd = vec!["/bin/sh", "-c", script, "sh"];
    cmd.extend_from_slice(args);
    run(container, user, cmd, stdin).await
}

/// An exec without a terminal, started and attached: its output stream and
/// its standard input.
type Attached = (
    crate::link::ExecOutput,
    std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
);

/// Creates and starts `cmd` in the container (no terminal), attached to
/// its standard output (and error, with `stderr`) and input.
async fn attach(
    container: &Container,
    user: Option<&str>,
    cmd: Vec<&str>,
    stdin: bool,
    stderr: bool,
) -> Result<(String, Attached), DockerError> {
    let docker = container.docker();
    let name = container.name();
    let exec = docker
        .create_exec(
            container.id(),
            CreateExecOptions {
                cmd: Some(cmd),
                attach_stdin: Some(stdin),
                attach_stdout: Some(true),
                attach_stderr: Some(stderr),
                tty: Some(false),
                user,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| DockerError::about(name, "creating a helper exec", e))?;
    let started = docker
        .start_exec(
            &exec.id,
            Some(StartExecOptions {
                detach: false,
                tty: false,
                output_capacity: None,
            }),
        )
        .await
        .map_err(|e| DockerError::about(name, "starting a helper exec", e))?;
    match started {
        StartExecResults::Attached { output, input } => Ok((exec.id, (output, input))),
        StartExecResults::Detached => Err(DockerError::Helper {
            what: "starting a helper",
            code: -1,
            stderr: "the daemon detached the helper".into(),
        }),
    }
}

pub(crate) async fn run(
    container: &Container,
    user: Option<&str>,
    cmd: Vec<&str>,
    stdin: Option<&[u8]>,
) -> Result<Ran, DockerError> {
    let (exec_id, (mut output, mut input)) =
        attach(container, user, cmd, stdin.is_some(), true).await?;
    let feed = async {
        if let Some(data) = stdin {
            input
                .write_all(data)
                .await
                .map_err(|source| DockerError::Input {
                    what: "a helper's standard input",
                    source,
                })?;
            input.flush().await.map_err(|source| DockerError::Input {
                what: "a helper's standard input",
                source,
            })?;
        }
        // End-of-file on the helper's standard input.
        let _ = input.shutdown().await;
        Ok::<_, DockerError>(())
    };
    let collect = async {
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        while let Some(item) = output.next().await {
            match item.map_err(|source| DockerError::Api {
                what: "reading a helper's output",
                source,
            })? {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    stdout.extend_from_slice(&message)
                }
                LogOutput::StdErr { message } => stderr.extend_from_slice(&message),
                LogOutput::StdIn { .. } => {}
            }
        }
        Ok::<_, DockerError>((stdout, stderr))
    };
    let (fed, collected) = tokio::join!(feed, collect);
    fed?;
    let (stdout, stderr) = collected?;
    let code = exit_code(container, &exec_id).await?;
    Ok(Ran::new(stdout, stderr, exec_status(code)))
}

/// The last signal number (Linux's `SIGRTMAX`).
const LAST_SIGNAL: i64 = 64;

/// How an exec ended, from the exit code its inspection gives: the daemon
/// reports a program killed by signal `n` as code `128 + n`, so a code from
/// 129 to `128 + 64` is read as that signal, named as the other backends
/// name it. (A program that exits with such a code itself, as `sh` does
/// after a child died that way, reads the same: the daemon tells no more.)
pub(crate) fn exec_status(code: i64) -> ExitStatus {
    match code {
        c if (129..=128 + LAST_SIGNAL).contains(&c) => {
            ExitStatus::from_signal(i32::try_from(code - 128).unwrap_or(-1))
        }
        _ => ExitStatus::from_code(i32::try_from(code).unwrap_or(-1)),
    }
}

/// The exit code of a finished exec; its output ended, so it ends at once
/// (the daemon may publish the code a moment after the stream closes).
pub(crate) async fn exit_code(container: &Container, exec_id: &str) -> Result<i64, DockerError> {
    let mut pause = Duration::from_millis(1);
    for _ in 0..40 {
        let info = container
            .docker()
            .inspect_exec(exec_id)
            .await
            .map_err(|e| DockerError::about(container.name(), "inspecting an exec", e))?;
        if info.running != Some(true) {
            return Ok(info.exit_code.unwrap_or(-1));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
    Err(DockerError::Helper {
        what: "waiting for an exec to end",
        code: -1,
        stderr: "its output ended but it still runs".into(),
    })
}

/// A helper exec whose standard input and output stay attached.
struct HelperExec {
    input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    output: crate::link::ExecOutput,
}

#[async_trait::async_trait]
impl Helper for HelperExec {
    async fn send(&mut self, bytes: &[u8]) -> bool {
        self.input.write_all(bytes).await.is_ok() && self.input.flush().await.is_ok()
    }

    async fn recv(&mut self) -> Option<bytes::Bytes> {
        loop {
            match self.output.next().await? {
                Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                    return Some(message);
                }
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
}

/// Starts `sh -c script sh args...` in the container (no terminal) with its
/// standard input and output attached (its standard error is not).
pub(crate) async fn start_helper(
    container: &Container,
    user: Option<&str>,
    script: &str,
    args: &[&str],
) -> Result<Box<dyn Helper>, DockerError> {
    let mut cmd = vec!["/bin/sh", "-c", script, "sh"];
    cmd.extend_from_slice(args);
    let (_, (output, input)) = attach(container, user, cmd, true, false).await?;
    Ok(Box::new(HelperExec { input, output }))
}

#[cfg(test)]
mod tests {
    use super::exec_status;
    use dsh_pty::ExitStatus;

    #[test]
    fn codes_past_128_are_signals_by_name() {
        assert_eq!(exec_status(137).signal_name(), Some("SIGKILL"));
        assert_eq!(exec_status(130), ExitStatus::from_signal(2));
        assert_eq!(exec_status(192), ExitStatus::from_signal(64));
        for code in [0, 1, 127, 128, 193, 255, -1] {
            assert_eq!(exec_status(code).code(), Some(code as i32), "{code}");
        }
    }
}
