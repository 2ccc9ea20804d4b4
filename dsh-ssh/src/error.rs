//! The error type of this crate.

use std::path::PathBuf;

/// Why talking to the SSH host failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SshError {
    /// The TCP connection or the SSH handshake failed.
    #[error("cannot connect to {host}:{port} over SSH: {source}")]
    Connect {
        /// The host.
        host: String,
        /// The port.
        port: u16,
        /// Why.
        #[source]
        source: russh::Error,
    },
    /// The host's key is not in the known-hosts file: it is never accepted
    /// silently.
    #[error("the host key of {host}:{port} is not in {}: add it (for example with `ssh-keyscan -p {port} {host} >> {}`) after checking it", known_hosts.display(), known_hosts.display())]
    UnknownHostKey {
        /// The host.
        host: String,
        /// The port.
        port: u16,
        /// The known-hosts file read.
        known_hosts: PathBuf,
    },
    /// The host's key differs from the one recorded for it.
    #[error("the host key of {host}:{port} does not match line {line} of {}: refusing to connect (the host was reinstalled, or someone is in the middle)", known_hosts.display())]
    HostKeyMismatch {
        /// The host.
        host: String,
        /// The port.
        port: u16,
        /// The known-hosts file read.
        known_hosts: PathBuf,
        /// The line that records another key.
        line: usize,
    },
    /// The known-hosts file could not be read.
    #[error("cannot read the known-hosts file {}: {source}", path.display())]
    KnownHosts {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: russh::keys::Error,
    },
    /// The private key could not be loaded.
    #[error("cannot load the SSH key {}: {source}", path.display())]
    Key {
        /// The key file.
        path: PathBuf,
        /// Why.
        #[source]
        source: russh::keys::Error,
    },
    /// The host refused the key.
    #[error("{user}@{host} refused the SSH key {}", key.display())]
    AuthRefused {
        /// The user.
        user: String,
        /// The host.
        host: String,
        /// The key offered.
        key: PathBuf,
    },
    /// A request on an open connection failed (the connection broke, or the
    /// host refused a channel).
    #[error("SSH: {what} failed: {source}")]
    Channel {
        /// What was asked.
        what: &'static str,
        /// Why.
        #[source]
        source: russh::Error,
    },
    /// The host answered a channel request with a refusal.
    #[error("SSH: the host refused {0}")]
    Refused(&'static str),
    /// An SFTP request failed.
    #[error("SFTP: {what} failed: {source}")]
    Sftp {
        /// What was asked.
        what: &'static str,
        /// Why.
        #[source]
        source: russh_sftp::client::error::Error,
    },
}
