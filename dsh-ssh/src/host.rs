//! The connection to an SSH host: where it is, the host-key check, key
//! authentication, and commands run to completion.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use russh::client::{self, Handle};
use russh::keys::{PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use russh::{ChannelMsg, Sig};

use dsh_pty::remote::Ran;
use dsh_pty::sh_quote;

use crate::SshError;

/// Where to connect and how to prove who we are.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SshTarget {
    /// The user to log in as.
    pub user: String,
    /// The host name or address.
    pub host: String,
    /// The port (22 by default).
    pub port: u16,
    /// The private key to authenticate with (`~/.ssh/id_ed25519` by default).
    pub identity: PathBuf,
    /// The known-hosts file the host's key must be in (`~/.ssh/known_hosts`
    /// by default). Unknown keys are refused, never learned.
    pub known_hosts: PathBuf,
    /// How long connecting and authenticating may take.
    pub connect_timeout: Duration,
}

impl SshTarget {
    /// `user@host[:port]` (`[v6addr]:port` for IPv6), with the default key
    /// and known-hosts file of the current user.
    ///
    /// ```
    /// let t = dsh_ssh::SshTarget::parse("agent@build-7:2222").unwrap();
    /// assert_eq!((t.user.as_str(), t.host.as_str(), t.port), ("agent", "build-7", 2222));
    /// assert!(dsh_ssh::SshTarget::parse("build-7").is_none());
    /// ```
    pub fn parse(spec: &str) -> Option<SshTarget> {
        let (user, rest) = spec.split_once('@')?;
        let (host, port) = match rest.strip_prefix('[') {
            Some(v6) => {
                let (host, after) = v6.split_once(']')?;
                let port = match after.strip_prefix(':') {
                    Some(p) => p.parse().ok()?,
                    None if after.is_empty() => 22,
                    None => return None,
                };
                (host, port)
            }
            None => match rest.rsplit_once(':') {
                Some((host, port)) => (host, port.parse().ok()?),
                None => (rest, 22),
            },
        };
        if user.is_empty() || host.is_empty() {
            return None;
        }
        let ssh_dir = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(".ssh");
        Some(SshTarget {
            user: user.to_owned(),
            host: host.to_owned(),
            port,
            identity: ssh_dir.join("id_ed25519"),
            known_hosts: ssh_dir.join("known_hosts"),
            connect_timeout: Duration::from_secs(30),
        })
    }
}

/// Checks the host's key against the known-hosts file and remembers why it
/// refused, so that the connection error can say it.
#[derive(Debug)]
pub(crate) struct HostKeyCheck {
    target: SshTarget,
    refusal: Arc<Mutex<Option<SshError>>>,
}

impl HostKeyCheck {
    fn refuse(&self, why: SshError) -> bool {
        if let Ok(mut slot) = self.refusal.lock() {
            *slot = Some(why);
        }
        false
    }
}

impl client::Handler for HostKeyCheck {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let t = &self.target;
        let unknown = || SshError::UnknownHostKey {
            host: t.host.clone(),
            port: t.port,
            known_hosts: t.known_hosts.clone(),
        };
        let PublicKeyOrCertificate::PublicKey { key, .. } = key else {
            // Host certificates would need a CA line; none is configured.
            return Ok(self.refuse(unknown()));
        };
        Ok(
            match russh::keys::check_known_hosts_path(&t.host, t.port, key, &t.known_hosts) {
                Ok(true) => true,
                Ok(false) => self.refuse(unknown()),
                Err(russh::keys::Error::KeyChanged { line }) => {
                    self.refuse(SshError::HostKeyMismatch {
                        host: t.host.clone(),
                        port: t.port,
                        known_hosts: t.known_hosts.clone(),
                        line,
                    })
                }
                Err(source) => self.refuse(SshError::KnownHosts {
                    path: t.known_hosts.clone(),
                    source,
                }),
            },
        )
    }
}

/// One authenticated SSH connection.
pub(crate) type Conn = Arc<Handle<HostKeyCheck>>;

/// Authenticated connections to an SSH host, shared by the shell backend
/// and the filesystem. Cloning is cheap.
///
/// Channels go over one connection until the host refuses more (OpenSSH
/// allows `MaxSessions`, 10 by default, per connection); then another
/// connection is made with the same target and key.
#[derive(Clone)]
pub struct SshHost {
    conns: Arc<tokio::sync::Mutex<Vec<Conn>>>,
    first: Conn,
    target: Arc<SshTarget>,
}

impl std::fmt::Debug for SshHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshHost")
            .field("target", &self.target)
            .field("closed", &self.first.is_closed())
            .finish()
    }
}

/// The signal number of an SSH signal name (`KILL` → 9), as Linux numbers
/// them.
pub(crate) fn signal_number(sig: &Sig) -> i32 {
    match sig {
        Sig::HUP => 1,
        Sig::INT => 2,
        Sig::QUIT => 3,
        Sig::ILL => 4,
        Sig::ABRT => 6,
        Sig::FPE => 8,
        Sig::KILL => 9,
        Sig::USR1 => 10,
        Sig::SEGV => 11,
        Sig::PIPE => 13,
        Sig::ALRM => 14,
        Sig::TERM => 15,
        Sig::Custom(name) => match name.as_str() {
            "BUS" => 7,
            "USR2" => 12,
            "STKFLT" => 16,
            "CHLD" => 17,
            "CONT" => 18,
            "STOP" => 19,
            "TSTP" => 20,
            "TTIN" => 21,
            "TTOU" => 22,
            "URG" => 23,
            "XCPU" => 24,
            "XFSZ" => 25,
            "VTALRM" => 26,
            "PROF" => 27,
            "WINCH" => 28,
            "IO" => 29,
            "PWR" => 30,
            "SYS" => 31,
            _ => 0,
        },
    }
}

/// The line for the user's login shell that runs `sh -c script sh args...`.
pub(crate) fn sh_line(script: &str, args: &[&str]) -> String {
    let mut line = format!("exec sh -c {} sh", sh_quote(script));
    for arg in args {
        line.push(' ');
        line.push_str(&sh_quote(arg));
    }
    line
}

impl SshHost {
    /// Connects to `target`, checks its host key against the known-hosts
    /// file (an unknown or changed key is an error, never accepted), and
    /// authenticates with the private key.
    pub async fn connect(target: SshTarget) -> Result<SshHost, SshError> {
        let timeout = target.connect_timeout;
        match tokio::time::timeout(timeout, Self::connect_now(target.clone())).await {
            Ok(connected) => connected,
            Err(_) => Err(SshError::Connect {
                host: target.host,
                port: target.port,
                source: russh::Error::ConnectionTimeout,
            }),
        }
    }

    async fn connect_now(target: SshTarget) -> Result<SshHost, SshError> {
        let conn = Self::authenticated(&target).await?;
        Ok(SshHost {
            conns: Arc::new(tokio::sync::Mutex::new(vec![Arc::clone(&conn)])),
            first: conn,
            target: Arc::new(target),
        })
    }

    async fn authenticated(target: &SshTarget) -> Result<Conn, SshError> {
        let key = russh::keys::load_secret_key(&target.identity, None).map_err(|source| {
            SshError::Key {
                path: target.identity.clone(),
                source,
            }
        })?;
        let config = Arc::new(client::Config {
            keepalive_interval: Some(Duration::from_secs(15)),
            keepalive_max: 3,
            nodelay: true,
            ..client::Config::default()
        });
        let refusal = Arc::new(Mutex::new(None));
        let check = HostKeyCheck {
            target: target.clone(),
            refusal: Arc::clone(&refusal),
        };
        let connect_error = |source| {
            let refused = refusal.lock().ok().and_then(|mut r| r.take());
            refused.unwrap_or(SshError::Connect {
                host: target.host.clone(),
                port: target.port,
                source,
            })
        };
        let mut handle = client::connect(config, (target.host.as_str(), target.port), check)
            .await
            .map_err(connect_error)?;
        let hash = handle
            .best_supported_rsa_hash()
            .await
            .map_err(connect_error)?
            .flatten();
        let auth = handle
            .authenticate_publickey(
                &target.user,
                PrivateKeyWithHashAlg::new(Arc::new(key), hash),
            )
            .await
            .map_err(connect_error)?;
        if !auth.success() {
            return Err(SshError::AuthRefused {
                user: target.user.clone(),
                host: target.host.clone(),
                key: target.identity.clone(),
            });
        }
        tracing::debug!(host = %target.host, port = target.port, user = %target.user, "SSH connected");
        Ok(Arc::new(handle))
    }

    /// Where this connection goes.
    pub fn target(&self) -> &SshTarget {
        &self.target
    }

    /// `true` once the first connection is gone.
    pub fn is_closed(&self) -> bool {
        self.first.is_closed()
    }

    /// Opens a session channel, on a new connection when the open ones
    /// refuse more; also returns the connection it went over.
    pub(crate) async fn channel_on(&self) -> Result<(russh::Channel<client::Msg>, Conn), SshError> {
        let mut conns = self.conns.lock().await;
        conns.retain(|c| !c.is_closed());
        let mut last = None;
        for conn in conns.iter().rev() {
            match conn.channel_open_session().await {
                Ok(channel) => return Ok((channel, Arc::clone(conn))),
                Err(e @ russh::Error::ChannelOpenFailure(_)) => last = Some(e),
                Err(source) => {
                    return Err(SshError::Channel {
                        what: "opening a channel",
                        source,
                    });
                }
            }
        }
        if let Some(e) = &last {
            tracing::debug!(error = %e, connections = conns.len(), "the host refused a channel; connecting again");
        }
        let conn = Self::authenticated(&self.target).await?;
        let channel = conn
            .channel_open_session()
            .await
            .map_err(|source| SshError::Channel {
                what: "opening a channel",
                source,
            })?;
        conns.push(Arc::clone(&conn));
        Ok((channel, conn))
    }

    /// Opens a session channel.
    pub(crate) async fn channel(&self) -> Result<russh::Channel<client::Msg>, SshError> {
        self.channel_on().await.map(|(channel, _)| channel)
    }

    /// Runs `command` (a line for the user's login shell) to completion,
    /// feeding it `stdin` (then end-of-file) when given.
    ///
    /// ```no_run
    /// # async fn demo(host: dsh_ssh::SshHost) -> Result<(), dsh_ssh::SshError> {
    /// let ran = host.run("cat", Some(b"hello")).await?;
    /// assert_eq!(ran.stdout, b"hello");
    /// assert!(ran.status.success());
    /// # Ok(()) }
    /// ```
    pub async fn run(&self, command: &str, stdin: Option<&[u8]>) -> Result<Ran, SshError> {
        let mut channel = self.channel().await?;
        channel
            .exec(true, command)
            .await
            .map_err(|source| SshError::Channel {
                what: "starting a command",
                source,
            })?;
        if let Some(data) = stdin {
            channel
                .data(data)
                .await
                .map_err(|source| SshError::Channel {
                    what: "writing a command's input",
                    source,
                })?;
        }
        channel.eof().await.map_err(|source| SshError::Channel {
            what: "ending a command's input",
            source,
        })?;
        let mut ran = Ran::new(Vec::new(), Vec::new(), dsh_pty::ExitStatus::unknown());
        let mut ended = false;
        while let Some(msg) = channel.wait().await {
            match msg {
                ChannelMsg::Data { data } => ran.stdout.extend_from_slice(&data),
                ChannelMsg::ExtendedData { data, .. } => ran.stderr.extend_from_slice(&data),
                ChannelMsg::ExitStatus { exit_status } => {
                    ran.status =
                        dsh_pty::ExitStatus::from_code(i32::try_from(exit_status).unwrap_or(-1));
                    ended = true;
                }
                ChannelMsg::ExitSignal { signal_name, .. } => {
                    ran.status = dsh_pty::ExitStatus::from_signal(signal_number(&signal_name));
                    ended = true;
                }
                ChannelMsg::Failure => return Err(SshError::Refused("a command")),
                _ => {}
            }
        }
        if !ended {
            return Err(SshError::Channel {
                what: "running a command",
                source: russh::Error::Disconnect,
            });
        }
        Ok(ran)
    }

    /// Runs `sh -c script sh args...`.
    pub(crate) async fn run_sh(
        &self,
        script: &str,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<Ran, SshError> {
        self.run(&sh_line(script, args), stdin).await
    }
}
