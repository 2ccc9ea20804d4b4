//! What a session's shell can read of its server: the real `dsh-mcp`, over
//! stdio and over HTTP, in `danger-full-access`, `workspace-write` and
//! `read-only`, run as this test's user (root in `.ci/run`) and as an
//! unprivileged one (uid 65534, from root), and without the sandbox as
//! root without `CAP_SYS_PTRACE` (a container's root). The server starts with
//! credentials in its environment (`OPENAI_API_KEY`, `DB_PASSWORD`,
//! `DSH_TOKEN`, `GITHUB_TOKEN`; values unique to the test), hands over
//! `GITHUB_TOKEN` with `--env`, and over HTTP in the confined modes reads
//! its token from `--token-file` too. One bash call of each server's
//! session reads `/proc/$PPID/environ`, `/proc/$PPID/cmdline`, every
//! `/proc/*/environ` it can list, the token file by its path, opens
//! `/proc/$PPID/mem` and looks for the token file among its own descriptors
//! (the server inherited one), and counts the credentials' values it finds there: none
//! (by value), but where `docs/http.md` names the exception (a root shell
//! of a root server without the sandbox reads its memory).
#![cfg(target_os = "linux")]
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::print_stderr)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Instant;

use common::{BOUND, Client};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The uid the unprivileged servers run as, when this test runs as root.
const UNPRIVILEGED: u32 = 65534;

/// The descriptor on the token file the server inherits.
const INHERITED: i32 = 9;

/// Whom the server runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum User {
    /// This test's user (root in `.ci/run`).
    This,
    /// This test's user without `CAP_SYS_PTRACE` in its bounding set, as
    /// root in a container runs (Docker's and Kubernetes' default
    /// capabilities lack it); this test's user alone when it is not root.
    NoPtrace,
    /// Uid 65534 when this test runs as root, else this test's user.
    Unprivileged,
}

/// Where the shells run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Full,
    WorkspaceWrite,
    ReadOnly,
}

impl Mode {
    fn flags(self) -> &'static [&'static str] {
        match self {
            Mode::Full => &[],
            Mode::WorkspaceWrite => &["--sandbox", "workspace-write"],
            Mode::ReadOnly => &["--sandbox", "read-only"],
        }
    }
}

/// Whether this process is root.
fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The copy of the binary uid 65534 can reach (the build's directory may
/// not let it through), made once, in a directory under /var/tmp removed
/// when this process exits.
fn unprivileged_binary() -> &'static Path {
    static COPY: OnceLock<PathBuf> = OnceLock::new();
    COPY.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("dsh-secrets-bin-")
            .tempdir_in("/var/tmp")
            .unwrap()
            .keep();
        std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o755)).unwrap();
        let copy = dir.join("dsh-mcp");
        std::fs::copy(env!("CARGO_BIN_EXE_dsh-mcp"), &copy).unwrap();
        extern "C" fn remove_copy() {
            if let Some(dir) = COPY.get().and_then(|copy| copy.parent()) {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        // SAFETY: registers a function of no arguments that only removes
        // the copy's directory.
        assert_eq!(unsafe { libc::atexit(remove_copy) }, 0);
        copy
    })
}

/// One server's setting: its files (a directory the server's user owns,
/// under /var/tmp where a confined shell sees it), its credentials.
struct Setup {
    mode: Mode,
    /// `Some(uid)`: the server runs as that user.
    uid: Option<u32>,
    /// The server (and so its shells) lost `CAP_SYS_PTRACE`.
    no_ptrace: bool,
    /// The token file, open for the server to inherit (as descriptor
    /// [`INHERITED`]), as a careless launcher leaves one.
    open_token: std::fs::File,
    dir: tempfile::TempDir,
    workspace: PathBuf,
    token: String,
    token_file: PathBuf,
    /// The credentials in the server's environment, `GITHUB_TOKEN` (the one
    /// handed over) first.
    secrets: Vec<(&'static str, String)>,
}

impl Setup {
    fn new(mode: Mode, user: User) -> Setup {
        let uid = (user == User::Unprivileged && root()).then_some(UNPRIVILEGED);
        let no_ptrace = user == User::NoPtrace && root();
        let dir = tempfile::Builder::new()
            .prefix("dsh-secrets-")
            .tempdir_in("/var/tmp")
            .unwrap();
        // Values no other test (nor another run) has: a leak is this one's.
        let nonce = format!(
            "{}x{}",
            std::process::id(),
            dir.path().file_name().unwrap().to_string_lossy()
        )
        .replace(|c: char| !c.is_ascii_alphanumeric(), "x");
        let token = format!("tok-{nonce}-0123456789abcdef");
        let workspace = dir.path().join("ws");
        std::fs::create_dir(&workspace).unwrap();
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&token_file, PermissionsExt::from_mode(0o600)).unwrap();
        let open_token = std::fs::File::open(&token_file).unwrap();
        if let Some(uid) = uid {
            for path in [dir.path(), &workspace, &token_file] {
                std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
            }
        }
        let secrets = vec![
            ("GITHUB_TOKEN", format!("ghp_{nonce}")),
            ("OPENAI_API_KEY", format!("sk-{nonce}-openai")),
            ("DB_PASSWORD", format!("pw-{nonce}")),
            ("DSH_TOKEN", token.clone()),
        ];
        Setup {
            mode,
            uid,
            no_ptrace,
            open_token,
            dir,
            workspace,
            token,
            token_file,
            secrets,
        }
    }

    /// Whom the server runs as, for messages.
    fn user(&self) -> String {
        match (self.uid, self.no_ptrace) {
            (Some(uid), _) => format!("uid {uid}"),
            (None, true) => "this user without CAP_SYS_PTRACE".to_owned(),
            (None, false) => "this user".to_owned(),
        }
    }

    /// The real binary with this setting's flags and environment.
    fn command(&self, http: bool) -> Command {
        let program = match self.uid {
            Some(_) => unprivileged_binary(),
            None => Path::new(env!("CARGO_BIN_EXE_dsh-mcp")),
        };
        let mut command = Command::new(program);
        command
            .arg("--workspace")
            .arg(&self.workspace)
            .args(self.mode.flags())
            .args(["--env", "GITHUB_TOKEN"])
            .env_remove("DSH_HOME")
            .env_remove("CARGO_TARGET_DIR")
            .env("HOME", self.dir.path())
            .envs(self.secrets.iter().map(|(k, v)| (k, v)))
            .current_dir(self.dir.path())
            .kill_on_drop(true);
        if http {
            command.args(["--listen", "127.0.0.1:0"]);
            // Without the sandbox the shells could read a token file (the
            // server refuses one): the token is in `DSH_TOKEN` only.
            if self.mode != Mode::Full {
                command.arg("--token-file").arg(&self.token_file);
            }
        }
        if let Some(uid) = self.uid {
            command.uid(uid).gid(uid);
        }
        let open = std::os::fd::AsRawFd::as_raw_fd(&self.open_token);
        // SAFETY: dup2 between fork and exec, no allocation; `open` stays
        // open in this process until the setup is dropped.
        unsafe {
            command.pre_exec(move || {
                if libc::dup2(open, INHERITED) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        if self.no_ptrace {
            // SAFETY: one prctl between fork and exec, no allocation.
            unsafe {
                command.pre_exec(|| {
                    // CAP_SYS_PTRACE (linux/capability.h).
                    const CAP_SYS_PTRACE: libc::c_ulong = 19;
                    if libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        command
    }

    /// The probe: one bash command that reports, for each place, `denied`
    /// or how many of the values not handed over it holds; `file`: the
    /// token file the server was given, read by its path.
    fn probe(&self, file: Option<&Path>) -> String {
        // Each value cut in two, joined by the shell: the request carrying
        // the probe stays in the server's memory, and must not be what a
        // reader finds there.
        let patterns: Vec<String> = self.secrets[1..]
            .iter()
            .map(|(_, value)| {
                let (a, b) = value.split_at(value.len() / 2);
                format!("-e '{a}''{b}'")
            })
            .collect();
        let file = match file {
            Some(file) => format!("seen 'token file' '{}'", file.display()),
            None => String::new(),
        };
        format!(
            r#"pats=({patterns})
seen() {{ if {{ exec 4< "$2"; }} 2>/dev/null; then echo "$1: $(tr '\0' '\n' <&4 | grep -c -F "${{pats[@]}}")"; exec 4<&-; else echo "$1: denied"; fi; }}
seen environ /proc/$PPID/environ
seen cmdline /proc/$PPID/cmdline
all=0; read=0; found=0
for f in /proc/[0-9]*/environ; do all=$((all+1)); if {{ exec 4< "$f"; }} 2>/dev/null; then read=$((read+1)); found=$((found+$(tr '\0' '\n' <&4 | grep -c -F "${{pats[@]}}"))); exec 4<&-; fi; done
echo "every environ: $found"
{file}
if {{ exec 4< /proc/$PPID/mem; }} 2>/dev/null; then echo 'mem: readable'; exec 4<&-; else echo 'mem: denied'; fi
echo "inherited: $(for f in /proc/$$/fd/*; do readlink "$f"; done | grep -c -F '{token_file}')"
echo "handed: ${{GITHUB_TOKEN-absent}} ${{OPENAI_API_KEY-absent}}"
echo "read $read of $all""#,
            patterns = patterns.join(" "),
            token_file = self.token_file.display(),
        )
    }

    /// What the probe must print: nothing found anywhere; what is denied
    /// depends on the user and the mode (the table of docs/http.md).
    fn expected(&self, file: bool) -> String {
        let root_server = self.uid.is_none() && root();
        let (environ, mem) = match self.mode {
            // A root shell with CAP_SYS_PTRACE reads a root server's
            // environment block (which holds no credential) and its memory
            // (which does: the documented exception).
            Mode::Full if root_server && !self.no_ptrace => ("0", "readable"),
            // Without CAP_SYS_PTRACE, root still reads the block, not the
            // memory.
            Mode::Full if root_server => ("0", "denied"),
            // Not dumpable: the same user without CAP_SYS_PTRACE is kept
            // out.
            Mode::Full => ("denied", "denied"),
            // $PPID is the sandbox's init, not dumpable, and the shell
            // keeps no capability.
            Mode::WorkspaceWrite | Mode::ReadOnly => ("denied", "denied"),
        };
        // The confined modes hide the file: it shows empty.
        let file = if file { "\ntoken file: 0" } else { "" };
        format!(
            "environ: {environ}\ncmdline: 0\nevery environ: 0{file}\nmem: {mem}\ninherited: 0\nhanded: {} absent",
            self.secrets[0].1
        )
    }
}

/// The probe's report without its last line, which goes to the log.
fn report(text: &str, what: &str) -> String {
    let (report, read) = text.rsplit_once('\n').unwrap();
    eprintln!("{what}: {read} environ files");
    report.to_owned()
}

/// Spawns `command`, again while its program is busy (ETXTBSY: a child
/// forked by another test while the copy was open for writing has not
/// exec'd yet).
fn spawn(command: &mut Command) -> Child {
    let deadline = Instant::now() + BOUND;
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && Instant::now() < deadline => {
                std::thread::yield_now();
            }
            other => return other.unwrap(),
        }
    }
}

/// A stdio session of `command`'s server, initialized.
async fn stdio_client(mut command: Command) -> Client {
    let child = spawn(
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit()),
    );
    Client::initialized(child, json!({})).await
}

/// The stdio server's session runs the probe.
async fn over_stdio(setup: &Setup) {
    let mut client = stdio_client(setup.command(false)).await;
    let (text, is_error) = client
        .call(2, "bash", json!({"command": setup.probe(None)}))
        .await;
    assert!(!is_error, "{text}");
    let what = format!("over stdio ({:?}, {})", setup.mode, setup.user());
    assert_eq!(report(&text, &what), setup.expected(false), "{what}");
    assert!(client.finish().await.success());
}

/// Starts the HTTP server; its child and its `/mcp` URL once it listens.
async fn listening(mut command: Command) -> (Child, String) {
    let mut child = spawn(
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let url = tokio::time::timeout(BOUND, async {
        loop {
            let line = lines
                .next_line()
                .await
                .unwrap()
                .expect("the server said where it listens");
            eprintln!("{line}");
            if let Some(url) = line.strip_prefix("dsh-mcp: listening on ") {
                return url.to_owned();
            }
        }
    })
    .await
    .expect("the server started");
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("{line}");
        }
    });
    (child, url)
}

/// The HTTP server's session (with the server's token) runs the probe.
async fn over_http(setup: &Setup) {
    let (_child, url) = listening(setup.command(true)).await;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let transport = StreamableHttpClientTransport::with_client(
        reqwest::Client::new(),
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(setup.token.clone()),
    );
    let client = tokio::time::timeout(BOUND, ().serve(transport))
        .await
        .expect("initialize answered")
        .expect("the token gets in");
    // The server was given the token file in the confined modes only.
    let file = (setup.mode != Mode::Full).then_some(setup.token_file.as_path());
    let arguments = json!({"command": setup.probe(file)});
    let result = tokio::time::timeout(
        BOUND,
        client.call_tool(
            CallToolRequestParams::new("bash")
                .with_arguments(arguments.as_object().unwrap().clone()),
        ),
    )
    .await
    .expect("the call was answered")
    .unwrap();
    let text: String = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert_eq!(result.is_error, Some(false), "{text}");
    let what = format!("over HTTP ({:?}, {})", setup.mode, setup.user());
    assert_eq!(
        report(&text, &what),
        setup.expected(file.is_some()),
        "{what}"
    );
    client.cancel().await.unwrap();
}

/// One mode, one user: a stdio server and an HTTP server.
async fn check(mode: Mode, user: User) {
    let started = Instant::now();
    let setup = Setup::new(mode, user);
    over_stdio(&setup).await;
    over_http(&setup).await;
    eprintln!("{mode:?} ({}): {:?}", setup.user(), started.elapsed());
}

macro_rules! modes {
    ($($name:ident: $mode:expr),*) => {$(
        mod $name {
            use super::*;

            /// As this test's user (root in `.ci/run`).
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn this_user() {
                check($mode, User::This).await;
            }

            /// As uid 65534 when this test runs as root (else as this user).
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn unprivileged() {
                check($mode, User::Unprivileged).await;
            }
        }
    )*};
}

modes!(
    danger_full_access: Mode::Full,
    workspace_write: Mode::WorkspaceWrite,
    read_only: Mode::ReadOnly
);

/// Root without `CAP_SYS_PTRACE`, as in a container: only where the shell
/// shares the server's PID namespace (the confined shells keep no
/// capability anyway).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn danger_full_access_root_without_cap_sys_ptrace() {
    check(Mode::Full, User::NoPtrace).await;
}

/// `--pass-secrets` hands the shell the server's credentials, but not the
/// server's own token; its environment block holds none of them all the
/// same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_secrets_hands_over_all_but_the_token() {
    let setup = Setup::new(Mode::Full, User::This);
    let mut command = setup.command(false);
    command.arg("--pass-secrets");
    let mut client = stdio_client(command).await;
    let (text, is_error) = client
        .call(
            2,
            "bash",
            json!({"command": "echo \"$OPENAI_API_KEY $DB_PASSWORD ${DSH_TOKEN-absent}\""}),
        )
        .await;
    assert!(!is_error, "{text}");
    assert_eq!(
        text,
        format!("{} {} absent", setup.secrets[1].1, setup.secrets[2].1)
    );
    // Its first line: the server's environment block.
    let (text, _) = client
        .call(3, "bash", json!({"command": setup.probe(None)}))
        .await;
    let environ = if root() {
        "environ: 0"
    } else {
        "environ: denied"
    };
    assert_eq!(text.lines().next(), Some(environ), "{text}");
    assert!(client.finish().await.success());
}

/// Without the sandbox, the server refuses a token file (its shells, of its
/// user, could read it) and names the remedies; the token on a pipe
/// (`--token-file /dev/stdin`) is read once and then gone, and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_sandbox_a_token_file_is_refused_and_a_pipe_serves() {
    let setup = Setup::new(Mode::Full, User::This);
    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"));
    command
        .args(["--listen", "127.0.0.1:0", "--token-file"])
        .arg(&setup.token_file)
        .arg("--workspace")
        .arg(&setup.workspace)
        .env_remove("DSH_TOKEN")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(BOUND, command.output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "dsh-mcp: --token-file {}: the shells of --sandbox danger-full-access run as this server's user and could read that file by its path, and with the token open sessions of their own; give the token in DSH_TOKEN instead (the server keeps it out of what its shells can read) or on a pipe (--token-file /dev/stdin), or confine the shells (--sandbox workspace-write or read-only hides the file)\n",
            setup.token_file.display()
        )
    );

    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh-mcp"));
    command
        .args(["--listen", "127.0.0.1:0", "--token-file", "/dev/stdin"])
        .arg("--workspace")
        .arg(&setup.workspace)
        .env_remove("DSH_TOKEN")
        .kill_on_drop(true);
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(setup.token.as_bytes()).await.unwrap();
    }
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let line = tokio::time::timeout(BOUND, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(line.starts_with("dsh-mcp: listening on http://"), "{line}");
}
