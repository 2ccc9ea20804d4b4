//! Escalation approval through MCP elicitation: the client asks its user.

use std::collections::HashMap;
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
/// [`Approval::TimedOut`]. Each owner's escalations go to the client of
/// that owner's calls (over HTTP, each session's own).
#[derive(Debug)]
pub struct ElicitApprover {
    peers: Mutex<HashMap<String, Peer<RoleServer>>>,
    timeout: Duration,
}

impl ElicitApprover {
    /// An approver waiting at most `timeout` for each answer.
    pub fn new(timeout: Duration) -> Self {
        ElicitApprover {
            peers: Mutex::new(HashMap::new()),
            timeout,
        }
    }

    /// Remembers the client to ask for [`OWNER`](crate::OWNER), the stdio
    /// server's one owner (set on every tool call).
    pub fn set_peer(&self, peer: Peer<RoleServer>) {
        self.set_peer_of(crate::OWNER, peer);
    }

    /// Remembers the client to ask for `owner` (set on every tool call).
    pub fn set_peer_of(&self, owner: &str, peer: Peer<RoleServer>) {
        self.peers().insert(owner.to_owned(), peer);
    }

    /// Forgets `owner`'s client (its session ended).
    pub fn forget(&self, owner: &str) {
        self.peers().remove(owner);
    }

    fn peers(&self) -> std::sync::MutexGuard<'_, HashMap<String, Peer<RoleServer>>> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl Approver for ElicitApprover {
    async fn approve(&self, request: &EscalationRequest) -> Approval {
        let peer = self.peers().get(&request.owner).cloned();
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
