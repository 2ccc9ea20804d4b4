//! What of a [`SpawnSpec`] a backend keeps: the spawn contract.
//!
//! Every backend keeps the program, its arguments, the variables it sets,
//! the working directory, the terminal's size, the scrollback and the drain
//! grace. The other parts ([`SpecField`]) not every backend can keep; each
//! backend says which it keeps ([`PtyBackend::keeps`](crate::PtyBackend::keeps)),
//! and a spec that uses one it does not keep is refused with
//! [`PtyError::NotKept`] naming it, never started without it.

use std::fmt;

use crate::{PtyError, SpawnSpec};

/// A part of a [`SpawnSpec`] that not every backend keeps, named as the
/// spec's method that sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SpecField {
    /// [`SpawnSpec::env_remove`]: variables removed from the environment.
    EnvRemove,
    /// [`SpawnSpec::env_clear`]: an environment that starts empty.
    EnvClear,
    /// [`SpawnSpec::echo`] off: a terminal that does not echo input.
    Echo,
    /// [`SpawnSpec::output_processing`] off: a terminal that writes `\n`
    /// as it is.
    OutputProcessing,
    /// [`SpawnSpec::pre_exec`]: confinement hooks run before `exec`.
    PreExec,
    /// [`SpawnSpec::limits`] (unless [`best_effort`](crate::ResourceLimits::best_effort)):
    /// limits of the session's process tree.
    Limits,
}

impl SpecField {
    /// Every field, in the order [`SpecSupport`] checks them.
    pub const ALL: [SpecField; 6] = [
        SpecField::EnvRemove,
        SpecField::EnvClear,
        SpecField::Echo,
        SpecField::OutputProcessing,
        SpecField::PreExec,
        SpecField::Limits,
    ];

    /// The name of the [`SpawnSpec`] method that sets it (`"env_remove"`).
    pub fn name(self) -> &'static str {
        match self {
            SpecField::EnvRemove => "env_remove",
            SpecField::EnvClear => "env_clear",
            SpecField::Echo => "echo",
            SpecField::OutputProcessing => "output_processing",
            SpecField::PreExec => "pre_exec",
            SpecField::Limits => "limits",
        }
    }

    /// Whether `spec` asks for it: a removed variable, a cleared
    /// environment, echo or output processing off, a hook, a limit that
    /// is not best effort.
    pub fn is_used_by(self, spec: &SpawnSpec) -> bool {
        match self {
            SpecField::EnvRemove => spec.get_env().iter().any(|(_, v)| v.is_none()),
            SpecField::EnvClear => spec.is_env_cleared(),
            SpecField::Echo => !spec.get_echo(),
            SpecField::OutputProcessing => !spec.get_output_processing(),
            SpecField::PreExec => !spec.get_pre_exec().is_empty(),
            SpecField::Limits => {
                let limits = spec.get_limits();
                !limits.is_empty() && !limits.best_effort
            }
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

impl fmt::Display for SpecField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The [`SpecField`]s a backend keeps, and for each one it does not, why.
///
/// ```
/// use dsh_pty::{PtyError, SpawnSpec, SpecField, SpecSupport};
///
/// let keeps = SpecSupport::ALL.without(SpecField::PreExec, "the hooks run on this machine");
/// assert!(keeps.keeps(SpecField::EnvRemove));
/// assert!(!keeps.keeps(SpecField::PreExec));
/// assert!(keeps.check("ssh", &SpawnSpec::new("bash").env_remove("ENV")).is_ok());
///
/// let err = SpecSupport::ALL
///     .without(SpecField::EnvClear, "the daemon adds its own")
///     .check("demo", &SpawnSpec::new("bash").env_clear())
///     .unwrap_err();
/// assert!(matches!(err, PtyError::NotKept { field: SpecField::EnvClear, .. }));
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SpecSupport {
    kept: u8,
    why: [&'static str; SpecField::ALL.len()],
}

impl SpecSupport {
    /// Every field kept (the native backend).
    pub const ALL: SpecSupport = SpecSupport {
        kept: u8::MAX,
        why: [""; SpecField::ALL.len()],
    };

    /// These, but without `field`: a spec that uses it is refused, with
    /// `why` (a clause: "the container is the confinement") in the error.
    #[must_use]
    pub fn without(mut self, field: SpecField, why: &'static str) -> SpecSupport {
        self.kept &= !field.bit();
        self.why[field as usize] = why;
        self
    }

    /// Whether `field` is kept.
    pub fn keeps(&self, field: SpecField) -> bool {
        self.kept & field.bit() != 0
    }

    /// Why `field` is not kept (empty when it is).
    pub fn why_not(&self, field: SpecField) -> &'static str {
        if self.keeps(field) {
            ""
        } else {
            self.why[field as usize]
        }
    }

    /// The first field `spec` uses that is not kept.
    pub fn first_not_kept(&self, spec: &SpawnSpec) -> Option<SpecField> {
        SpecField::ALL
            .into_iter()
            .find(|&f| !self.keeps(f) && f.is_used_by(spec))
    }

    /// `Ok` when `spec` uses only fields that are kept, else
    /// [`PtyError::NotKept`] naming the first one and `backend`.
    pub fn check(&self, backend: &'static str, spec: &SpawnSpec) -> Result<(), PtyError> {
        match self.first_not_kept(spec) {
            None => Ok(()),
            Some(field) => Err(PtyError::NotKept {
                backend,
                field,
                why: self.why_not(field),
            }),
        }
    }
}

impl fmt::Debug for SpecSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(SpecField::ALL.into_iter().filter(|&x| self.keeps(x)))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::ResourceLimits;

    #[test]
    fn a_spec_uses_only_what_it_sets() {
        let plain = SpawnSpec::new("sh").env("A", "b").cwd("/").arg("-i");
        assert!(SpecField::ALL.iter().all(|f| !f.is_used_by(&plain)));
        let limits = ResourceLimits::default().pids(Some(10));
        let used = |spec: &SpawnSpec| -> Vec<SpecField> {
            SpecField::ALL
                .into_iter()
                .filter(|f| f.is_used_by(spec))
                .collect()
        };
        assert_eq!(
            used(
                &plain
                    .clone()
                    .env_remove("X")
                    .echo(false)
                    .limits(limits.clone())
            ),
            [SpecField::EnvRemove, SpecField::Echo, SpecField::Limits]
        );
        assert_eq!(used(&plain.clone().limits(limits.best_effort(true))), []);
        assert_eq!(
            used(&plain.env_clear().output_processing(false)),
            [SpecField::EnvClear, SpecField::OutputProcessing]
        );
    }

    #[test]
    fn the_error_names_the_field_and_why() {
        let keeps = SpecSupport::ALL
            .without(SpecField::Echo, "no stty")
            .without(SpecField::PreExec, "elsewhere");
        assert_eq!(
            format!("{keeps:?}"),
            "{EnvRemove, EnvClear, OutputProcessing, Limits}"
        );
        let err = keeps
            .check("demo", &SpawnSpec::new("sh").echo(false))
            .unwrap_err();
        assert_eq!(
            crate::contract::render_error(&err),
            "the demo backend cannot keep the spawn spec's `echo`: no stty"
        );
        assert!(keeps.check("demo", &SpawnSpec::new("sh")).is_ok());
        assert_eq!(keeps.why_not(SpecField::EnvRemove), "");
    }
}
