//! What the native backend can keep of [`ResourceLimits`] on this machine
//! ([`ResourceLimits::check`]), and taking the delegated cgroup early
//! ([`ResourceLimits::prepare`]): the feature `native`, as they read (and
//! `prepare` changes) this process's cgroups.

use crate::{CgroupVersion, Held, Limit, LimitsError, LimitsReport, ResourceLimits};

#[cfg_attr(docsrs, doc(cfg(feature = "native")))]
impl ResourceLimits {
    /// Takes the delegated cgroup now, when [`ResourceLimits::cgroup_parent`]
    /// is [`CgroupParent::Auto`](crate::CgroupParent::Auto) and a limit needs a cgroup: this process
    /// moves into its leaf (what the first session's spawn would otherwise
    /// do), so that a server fails at its start, not at its first command.
    /// Anything else: nothing to do.
    ///
    /// Fails with [`LimitsError::NotHeld`] (naming why, and where the
    /// recipes are) when the cgroup is not delegated or cannot be taken,
    /// unless [`ResourceLimits::best_effort`] is set; then the sessions run
    /// without it and [`ResourceLimits::check`] says so.
    pub fn prepare(&self) -> Result<(), LimitsError> {
        #[cfg(target_os = "linux")]
        {
            crate::unix::cgroup::prepare(self)
        }
        #[cfg(not(target_os = "linux"))]
        {
            Ok(())
        }
    }

    /// What would hold for a session spawned with these limits by the native
    /// backend on this machine, without making anything: the cgroup
    /// hierarchy is read (the mount table, the controllers the parent
    /// offers), never changed.
    ///
    /// Fails like the spawn would: [`LimitsError::NotHeld`] when a limit
    /// cannot be kept and [`ResourceLimits::best_effort`] is not set.
    pub fn check(&self) -> Result<LimitsReport, LimitsError> {
        #[cfg(target_os = "linux")]
        {
            crate::unix::cgroup::report(self)
        }
        #[cfg(not(target_os = "linux"))]
        {
            report_with(self, Err("cgroups are Linux's".to_owned()))
        }
    }
}

/// How each requested limit of `limits` is kept, given the cgroup that can
/// be made (`Err`: none, and why); fails closed unless best effort.
pub(crate) fn report_with(
    limits: &ResourceLimits,
    cgroup: Result<CgroupVersion, String>,
) -> Result<LimitsReport, LimitsError> {
    let mut report = LimitsReport::default();
    let mut whys: Vec<String> = Vec::new();
    let mut why = |text: String| {
        if !whys.contains(&text) {
            whys.push(text);
        }
    };
    for (limit, _) in limits.requested() {
        let held = match (limit, &cgroup) {
            (Limit::Pids | Limit::Memory | Limit::Cpu, Ok(version)) => Held::Cgroup(*version),
            (Limit::Memory, Err(_)) if limits.best_effort && cfg!(unix) => Held::Rlimit,
            (Limit::Pids | Limit::Memory | Limit::Cpu, Err(text)) => {
                why(text.clone());
                Held::NotHeld
            }
            (Limit::OpenFiles | Limit::FileSize, _) if cfg!(unix) => Held::Rlimit,
            (Limit::OpenFiles | Limit::FileSize, _) => {
                why("rlimits are Unix's".to_owned());
                Held::NotHeld
            }
        };
        report.limits.push((limit, held));
    }
    let missing: Vec<Limit> = report.not_held().collect();
    if !missing.is_empty() && !limits.best_effort {
        return Err(LimitsError::NotHeld {
            limits: missing,
            why: whys.join("; "),
        });
    }
    if !missing.is_empty() {
        report.why_not_held = whys.join("; ");
    }
    Ok(report)
}
