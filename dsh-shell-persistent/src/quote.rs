//! Quoting a string so that a shell reads back exactly that string.

/// Bash ANSI-C quoting (`$'...'`): every byte below 0x20, DEL, `\` and `'`
/// are escaped, so the result is one physical line that the terminal's line
/// discipline passes through untouched (no Ctrl-C, Ctrl-D, erase or kill
/// characters reach it raw).
///
/// ```
/// use dsh_shell_persistent::__private::bash_ansi_c;
/// assert_eq!(bash_ansi_c("it's\n\t$HOME\\"), r"$'it\'s\n\t$HOME\\'");
/// ```
pub fn bash_ansi_c(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 3);
    out.push_str("$'");
    push_ansi_c_body(&mut out, s);
    out.push('\'');
    out
}

/// Appends `s` as the inside of a bash ANSI-C quoted string (what
/// [`bash_ansi_c`] puts between `$'` and `'`).
pub(crate) fn push_ansi_c_body(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len());
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'\\' => "\\\\",
            b'\'' => "\\'",
            b'\n' => "\\n",
            b'\t' => "\\t",
            b'\r' => "\\r",
            b if b < 0x20 || b == 0x7f => "\\x",
            _ => continue,
        };
        // Every byte escaped is ASCII, so `plain..i` and `i + 1..` are
        // character boundaries.
        out.push_str(&s[plain..i]);
        out.push_str(escape);
        if escape == "\\x" {
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        }
        plain = i + 1;
    }
    out.push_str(&s[plain..]);
}

/// [`bash_ansi_c`] of any bytes (text in any encoding): every byte that is
/// not printable ASCII is written as `\xHH`, so the result is ASCII.
pub(crate) fn bash_ansi_c_bytes(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() + bytes.len() / 8 + 3);
    out.push_str("$'");
    for &b in bytes {
        match b {
            b'\\' => out.push_str("\\\\"),
            b'\'' => out.push_str("\\'"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                out.push_str("\\x");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 15)]));
            }
        }
    }
    out.push('\'');
    out
}

/// POSIX single quoting (`'` becomes `'\''`), the workspace's one
/// ([`dsh_pty::sh_quote`]). Only for text without control characters (the
/// result must stay one physical line).
pub(crate) use dsh_pty::sh_quote as posix_single;

/// PowerShell single quoting: `'` (and its typographic variants, which
/// PowerShell also treats as quotes) are doubled.
pub(crate) fn pwsh_single(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        out.push(c);
        if matches!(c, '\'' | '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}') {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

/// `true` if `s` holds a character that must not be written raw to a
/// terminal line (control characters and DEL).
pub(crate) fn has_control(s: &str) -> bool {
    s.bytes().any(|b| b < 0x20 || b == 0x7f)
}

/// Splits a marker token in two quoted halves, so the assembled token never
/// appears in what is written to the terminal.
pub(crate) fn split_token(token: &str) -> String {
    let mid = token.len() / 2;
    format!("'{}''{}'", &token[..mid], &token[mid..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(bash_ansi_c("\x03\x04\x7f"), r"$'\x03\x04\x7f'");
        assert!(!has_control(&bash_ansi_c("a\u{1}b\nc\r")));
        assert_eq!(split_token("abcd"), "'ab''cd'");
    }

    #[test]
    fn single_quotes_are_escaped() {
        assert_eq!(posix_single("it's $x"), r"'it'\''s $x'");
        assert_eq!(pwsh_single("it's $x"), "'it''s $x'");
    }

    mod through_bash {
        use super::super::{bash_ansi_c, posix_single};
        use proptest::prelude::*;

        fn bash_printf(quoted: &str) -> Vec<u8> {
            let out = std::process::Command::new("bash")
                .args([
                    "--norc",
                    "--noprofile",
                    "-c",
                    &format!("printf %s {quoted}"),
                ])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            out.stdout
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(48))]

            /// Any string (but NUL, which no shell string can hold) quoted for
            /// bash comes back from real bash byte for byte.
            #[test]
            fn ansi_c_quoting_round_trips_through_bash(s in "[^\\x00]{0,40}") {
                prop_assert_eq!(bash_printf(&bash_ansi_c(&s)), s.as_bytes());
            }

            #[test]
            fn posix_quoting_round_trips_through_bash(s in "[^\\x00-\\x1f\\x7f]{0,40}") {
                prop_assert_eq!(bash_printf(&posix_single(&s)), s.as_bytes());
            }
        }
    }
}
