//! Per-call escalation: checking `sandbox_permissions` and `justification`,
//! and asking the approver.

use crate::{
    Approval, EscalationRequest, SandboxConfig, SandboxError, SandboxMode, SandboxRequest,
};

/// The mode this call runs in: the owner's, or the one an approver
/// allowed for this call only.
pub(crate) async fn escalation(
    config: &SandboxConfig,
    owner: &str,
    request: &SandboxRequest,
    current: SandboxMode,
) -> Result<(SandboxMode, bool), SandboxError> {
    let (requested, justification) = match (&request.sandbox_permissions, &request.justification) {
        (None, None) => return Ok((current, false)),
        (None, Some(_)) => return Err(SandboxError::JustificationWithoutPermissions),
        (Some(p), j) => (*p, j),
    };
    let justification = justification
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or(SandboxError::MissingJustification)?;
    if requested <= current {
        return Err(SandboxError::NotWider { current, requested });
    }
    let approver = config
        .approver
        .as_ref()
        .ok_or(SandboxError::NoApprover { current })?;
    let request = EscalationRequest {
        owner: owner.to_owned(),
        command: request.command.clone(),
        current,
        requested,
        justification: justification.to_owned(),
    };
    match approver.approve(&request).await {
        Approval::AllowedOnce => {
            tracing::info!(owner, %current, %requested, "escalation approved for one call");
            Ok((requested, true))
        }
        Approval::TimedOut => Err(SandboxError::ApprovalTimedOut { requested }),
        Approval::Denied => Err(SandboxError::Denied { requested }),
    }
}

/// The modes wider than `mode`, narrowest first.
pub(crate) fn wider_than(mode: SandboxMode) -> Vec<SandboxMode> {
    [SandboxMode::WorkspaceWrite, SandboxMode::DangerFullAccess]
        .into_iter()
        .filter(|m| *m > mode)
        .collect()
}
