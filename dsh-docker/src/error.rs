//! The error type of this crate.

/// Why talking to Docker failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DockerError {
    /// The daemon could not be reached (not running, wrong `DOCKER_HOST`,
    /// no permission on its socket).
    #[error("cannot reach the Docker daemon at {host}: {source}")]
    Connect {
        /// The address tried.
        host: String,
        /// Why.
        #[source]
        source: bollard::errors::Error,
    },
    /// No container has this name or id.
    #[error("there is no Docker container `{0}`")]
    NoSuchContainer(String),
    /// The container exists but does not run.
    #[error("the Docker container `{0}` is not running")]
    NotRunning(String),
    /// The image is not on the daemon (this crate never pulls).
    #[error("the Docker image `{0}` is not on the daemon (pull or import it first)")]
    NoSuchImage(String),
    /// The network a container was to join does not exist on the daemon.
    #[error(
        "the Docker network `{0}` does not exist on the daemon (create it with `docker network create {0}`, or use `none`, `bridge` or `host`)"
    )]
    NoSuchNetwork(String),
    /// A call to the daemon failed.
    #[error("Docker: {what} failed: {source}")]
    Api {
        /// What was asked, e.g. "creating an exec".
        what: &'static str,
        /// The daemon's or the transport's error.
        #[source]
        source: bollard::errors::Error,
    },
    /// A helper command inside the container failed in a way it did not
    /// explain with a known exit code.
    #[error("{what} in the container failed (exit code {code}): {stderr}")]
    Helper {
        /// What the helper did.
        what: &'static str,
        /// Its exit code.
        code: i64,
        /// The end of what it printed on standard error.
        stderr: String,
    },
    /// The editor's helper process in the container ended before it
    /// answered a request (it was killed, the container stopped, or `sh`
    /// could not start). It is started again on the next call; the request
    /// is not repeated, so whether a write it carried took effect is not
    /// known.
    #[error("the editor's helper process in the container ended before it answered (it is started again on the next call; whether this operation took effect is not known){}", if said.is_empty() { String::new() } else { format!(": {said}") })]
    HelperEnded {
        /// The start of what it printed, if anything.
        said: String,
    },
    /// The container lacks programs a tool runs there.
    #[error(
        "The container {container} has no {programs}, which {needed_by} needs there (GNU coreutils or BusyBox provide them); add them to the image."
    )]
    MissingPrograms {
        /// The container's name.
        container: String,
        /// The missing programs, comma-separated.
        programs: String,
        /// Which tool needs them.
        needed_by: &'static str,
    },
    /// Writing to an exec's standard input failed.
    #[error("Docker: writing to {what} failed: {source}")]
    Input {
        /// Which stream.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl DockerError {
    /// Maps a daemon error about `container`: 404 and 409 become the
    /// precise variants.
    pub(crate) fn about(
        container: &str,
        what: &'static str,
        source: bollard::errors::Error,
    ) -> Self {
        match &source {
            bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            } => DockerError::NoSuchContainer(container.to_owned()),
            bollard::errors::Error::DockerResponseServerError {
                status_code: 409,
                message,
            } if message.contains("not running") || message.contains("is paused") => {
                DockerError::NotRunning(container.to_owned())
            }
            _ => DockerError::Api { what, source },
        }
    }

    /// `true` when the error says the container (or the daemon) is gone,
    /// rather than that one request was wrong.
    pub(crate) fn is_gone(&self) -> bool {
        matches!(
            self,
            DockerError::NoSuchContainer(_)
                | DockerError::NotRunning(_)
                | DockerError::Connect { .. }
        ) || matches!(self, DockerError::Api { source, .. } if !matches!(source, bollard::errors::Error::DockerResponseServerError { .. }))
    }
}
