//! Per-call escalation and the host's approval of it.

use async_trait::async_trait;

use crate::SandboxMode;

/// What the model asked for, as the host's approver sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EscalationRequest {
    /// The owner (agent) making the call.
    pub owner: String,
    /// The command to run.
    pub command: String,
    /// The owner's current mode.
    pub current: SandboxMode,
    /// The mode asked for, for this one call.
    pub requested: SandboxMode,
    /// The model's reason.
    pub justification: String,
}

/// The host's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Approval {
    /// Run this one call with the requested mode.
    AllowedOnce,
    /// Refused.
    Denied,
    /// Nobody answered in time: refused.
    TimedOut,
}

/// Decides escalation requests (a human in a UI, or a host policy). Anything
/// but [`Approval::AllowedOnce`] refuses.
///
/// ```
/// use dsh_sandbox::{Approval, Approver, EscalationRequest};
/// #[derive(Debug)]
/// struct OnlyWorkspaceWrite;
/// #[async_trait::async_trait]
/// impl Approver for OnlyWorkspaceWrite {
///     async fn approve(&self, request: &EscalationRequest) -> Approval {
///         if request.requested == dsh_sandbox::SandboxMode::WorkspaceWrite {
///             Approval::AllowedOnce
///         } else {
///             Approval::Denied
///         }
///     }
/// }
/// ```
#[async_trait]
pub trait Approver: Send + Sync + std::fmt::Debug {
    /// Answers one request.
    async fn approve(&self, request: &EscalationRequest) -> Approval;
}

/// An approver that gives the same answer to every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedApprover(pub Approval);

#[async_trait]
impl Approver for FixedApprover {
    async fn approve(&self, _request: &EscalationRequest) -> Approval {
        self.0
    }
}
