//! Escalation approval through MCP elicitation: the client asks its user.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use dsh_sandbox::{Approval, Approver, EscalationRequest};
use rmcp::RoleServer;
use rmcp::service::{ElicitationError, Peer, ServiceError};
use serde::Deserialize;

/// The form the client shows its user.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct ApprovalForm {
    /// Allow this one command to run with the requested access?
    approve: bool,
}

rmcp::elicit_safe!(ApprovalForm);

tokio::task_local! {
    /// The client of the tool call being run (set by [`DshServer`](crate::DshServer)
    /// around each call): the one an escalation of that call asks.
    static CALLER: Peer<RoleServer>;
}

/// Runs `call` with `peer` as the client its escalations ask. The peer is
/// no owner's state: it goes with the call, and ends with it.
pub(crate) async fn asked_by<T>(peer: Peer<RoleServer>, call: impl Future<Output = T>) -> T {
    CALLER.scope(peer, call).await
}

/// Asks the connected client (and so its user) to approve each escalation.
/// Fails closed: a client that cannot elicit, declines, cancels or answers
/// anything but "approve" refuses; no answer within the timeout is
/// [`Approval::TimedOut`]. Each escalation goes to the client of the tool
/// call that asked for it (over HTTP, its session's), which
/// [`DshServer`](crate::DshServer) hands over with the call; a request
/// from anywhere else (no call of a `DshServer` under way) is
/// [`Approval::Denied`].
#[derive(Debug)]
pub struct ElicitApprover {
    timeout: Duration,
}

impl ElicitApprover {
    /// An approver waiting at most `timeout` for each answer.
    pub fn new(timeout: Duration) -> Self {
        ElicitApprover { timeout }
    }
}

#[async_trait]
impl Approver for ElicitApprover {
    async fn approve(&self, request: &EscalationRequest) -> Approval {
        let Ok(peer) = CALLER.try_with(Peer::clone) else {
            return Approval::Denied;
        };
        let message = format!(
            "The agent asks to run one command with {} access (it is in {} mode):\n\n{}\n\nReason: {}\n\nAllow it this once?",
            request.requested, request.current, request.command, request.justification
        );
        match peer
            .elicit_with_timeout::<ApprovalForm>(message, Some(self.timeout))
            .await
        {
            Ok(Some(ApprovalForm { approve: true })) => Approval::AllowedOnce,
            Err(ElicitationError::Service(ServiceError::Timeout { .. })) => Approval::TimedOut,
            Ok(_) | Err(_) => Approval::Denied,
        }
    }
}
