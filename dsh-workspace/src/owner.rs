//! Owner names to layer directory names.

use crate::WorkspaceError;

/// The longest directory name an owner maps to (`NAME_MAX` is 255).
const MAX_ENCODED: usize = 240;

/// Maps an owner name to a directory name, one to one: ASCII letters,
/// digits, `-` and `_` stay; every other byte becomes `%XX` (so `.`, `/`
/// and NUL never reach the filesystem as themselves). An `o` in front keeps
/// the name from being empty.
pub(crate) fn encode(owner: &str) -> Result<String, WorkspaceError> {
    let mut out = String::with_capacity(owner.len() + 1);
    out.push('o');
    for b in owner.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push_str(&format!("{b:02X}"));
        }
        if out.len() > MAX_ENCODED {
            return Err(WorkspaceError::InvalidOwner {
                owner: owner.chars().take(64).collect(),
                reason: "it is too long (at most 239 bytes of letters, digits, '-' and '_'; other bytes count three)",
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_are_safe() {
        assert_eq!(encode("").unwrap(), "o");
        assert_eq!(encode("..").unwrap(), "o%2E%2E");
        assert_eq!(encode("a/b").unwrap(), "oa%2Fb");
        assert_eq!(encode("sess-1_X").unwrap(), "osess-1_X");
        assert!(encode(&"x".repeat(500)).is_err());
    }

    proptest! {
        #[test]
        fn encoding_is_one_to_one(a in ".{0,16}", b in ".{0,16}") {
            let (ea, eb) = (encode(&a).unwrap(), encode(&b).unwrap());
            prop_assert_eq!(a == b, ea == eb);
            prop_assert!(ea.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_%".contains(&c)));
        }
    }
}
