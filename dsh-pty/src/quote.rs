//! Quoting for POSIX shells.

/// `text` as one POSIX `sh` word that the shell reads back exactly: in
/// single quotes, each `'` written `'\''`. Control characters pass as they
/// are (quoted, they are the word's own), so a line meant to be typed into
/// a terminal needs text without them.
///
/// ```
/// assert_eq!(dsh_pty::sh_quote("it's $HOME"), r"'it'\''s $HOME'");
/// assert_eq!(dsh_pty::sh_quote(""), "''");
/// ```
pub fn sh_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}
