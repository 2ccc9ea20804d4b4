//! Snapshot ids and the random names of staging directories.

use std::fmt;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::WorkspaceError;

/// A snapshot's id: 64 random bits as 16 lowercase hexadecimal digits.
///
/// The bits come from the standard library's per-process random hash keys
/// (taken from the operating system) mixed with a counter and the time:
/// unique within a layers directory (a collision is retried) and not
/// guessable from another id, though not meant as a secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SnapshotId(u64);

impl SnapshotId {
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn random() -> SnapshotId {
        SnapshotId(random_u64())
    }
}

impl fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl FromStr for SnapshotId {
    type Err = WorkspaceError;

    fn from_str(s: &str) -> Result<SnapshotId, WorkspaceError> {
        let valid = s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        match u64::from_str_radix(s, 16) {
            Ok(n) if valid => Ok(SnapshotId(n)),
            _ => Err(WorkspaceError::InvalidSnapshotId {
                text: s.chars().take(64).collect(),
            }),
        }
    }
}

/// 64 bits no other call in this process returns (barring a collision of
/// SipHash outputs) and no outsider predicts.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.write_u32(std::process::id());
    h.finish()
}
