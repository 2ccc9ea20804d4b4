//! The crate's error: preparing a confinement failed.

/// Preparing a confinement failed (before any `fork`: what happens after
/// it is reported by the hook's `io::Error`).
///
/// `Display` says what was being prepared; the underlying error, when there
/// is one, is the [`source`](std::error::Error::source).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Preparing the confinement failed.
    #[error("preparing the confinement failed: {what}")]
    Setup {
        /// What was being prepared (or what was wrong).
        what: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
}

impl Error {
    /// [`Error::Setup`] without an underlying error.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn setup(what: impl Into<String>) -> Self {
        Error::Setup {
            what: what.into(),
            source: None,
        }
    }

    /// [`Error::Setup`] caused by `source`.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn setup_from(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Error::Setup {
            what: what.into(),
            source: Some(source.into()),
        }
    }
}
