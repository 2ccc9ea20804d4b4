//! Random identifiers from the operating system.

/// `len` random lowercase hex digits (`len` even, at most 64) from one
/// request to the operating system: the shell's markers, a remote
/// session's tag. Its error is an `io::Error` (with the OS error code
/// where there is one).
///
/// ```
/// let hex = dsh_pty::random_hex(16)?;
/// assert_eq!(hex.len(), 16);
/// assert!(hex.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn random_hex(len: usize) -> std::io::Result<String> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; 32];
    let bytes = &mut bytes[..len.div_ceil(2).min(32)];
    getrandom::fill(bytes).map_err(|e| {
        e.raw_os_error().map_or_else(
            || std::io::Error::other(e.to_string()),
            std::io::Error::from_raw_os_error,
        )
    })?;
    let mut hex = String::with_capacity(len);
    for b in bytes.iter() {
        hex.push(char::from(DIGITS[usize::from(b >> 4)]));
        hex.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    hex.truncate(len);
    Ok(hex)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::random_hex;

    #[test]
    fn ids_are_fresh_lowercase_hex_of_the_length_asked() {
        for len in [8, 16, 32, 40, 64] {
            let hex = random_hex(len).unwrap();
            assert_eq!(hex.len(), len);
            assert!(hex.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
        }
        assert_ne!(random_hex(40).unwrap(), random_hex(40).unwrap());
    }
}
