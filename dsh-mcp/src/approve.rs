//! Escalation approval through MCP elicitation: the client asks its user.

use std::sync::Mutex;
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

/// Asks the connected client (and so its user) to approve each escalation.
/// Fails closed: a client that cannot elicit, declines, cancels or answers
/// anything but "approve" refuses; no answer within the timeout is
/// [`Approval::TimedOut`].
#[derive(Debug)]
pub struct ElicitApprover {
    peer: Mutex<Option<Peer<RoleServer>>>,
    timeout: Duration,
}

impl ElicitApprover {
    /// An approver waiting at most `timeout` for each answer.
    pub fn new(timeout: Duration) -> Self {
        ElicitApprover {
            peer: Mutex::new(None),
            timeout,
        }
    }

    /// Remembers the client to ask (set on every tool call).
    pub fn set_peer(&self, peer: Peer<RoleServer>) {
        *self.peer.lock().unwrap_or_else(|p| p.into_inner()) = Some(peer);
    }
}

#[async_trait]
impl Approver for ElicitApprover {
    async fn approve(&self, request: &EscalationRequest) -> Approval {
        let peer = self.peer.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(peer) = peer else {
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
