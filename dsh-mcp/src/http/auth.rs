//! The bearer token every `/mcp` request must carry.

use std::path::Path;

use subtle::ConstantTimeEq;

/// The shortest token the server accepts.
pub const MIN_TOKEN_LEN: usize = 16;

/// Words of the placeholders that documentation and templates put where a
/// token goes (`REPLACE-with-32-random-bytes-in-base64`, `changeme`): a token
/// holding one, in any case, is refused. Each is long enough that a random
/// token holds it by chance about once in 10^9 (a 44-character base64
/// token, `placeholder` aside).
const PLACEHOLDER_WORDS: [&str; 5] = ["replace", "changeme", "change-me", "placeholder", "example"];

/// Why a token cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The token file cannot be read.
    #[error("cannot read the token file {path}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The token is too short (or empty).
    #[error(
        "the token {from} is {len} characters long; use at least {MIN_TOKEN_LEN} (e.g. `head -c 32 /dev/urandom | base64`)"
    )]
    Short {
        /// Where it came from.
        from: String,
        /// Its length.
        len: usize,
    },
    /// The token is a placeholder copied from documentation or a template.
    #[error(
        "the token {from} is a placeholder ({why}), not a secret; make one with `head -c 32 /dev/urandom | base64`"
    )]
    Placeholder {
        /// Where it came from.
        from: String,
        /// What gave it away.
        why: String,
    },
    /// The token holds a character a header cannot carry.
    #[error(
        "the token {from} holds a character an Authorization header cannot carry (use printable ASCII without spaces)"
    )]
    Unprintable {
        /// Where it came from.
        from: String,
    },
}

/// A bearer token, compared in constant time; never printed.
#[derive(Clone)]
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// The token `text` (surrounding whitespace dropped), from `from` (for
    /// the error).
    pub fn new(text: &str, from: &str) -> Result<Token, TokenError> {
        let text = text.trim();
        if !text.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::Unprintable {
                from: from.to_owned(),
            });
        }
        if text.len() < MIN_TOKEN_LEN {
            return Err(TokenError::Short {
                from: from.to_owned(),
                len: text.len(),
            });
        }
        let lower = text.to_ascii_lowercase();
        let placeholder = PLACEHOLDER_WORDS
            .into_iter()
            .find(|word| lower.contains(word))
            .map(|word| format!("it holds \"{word}\""))
            .or_else(|| {
                // One character repeated (`xxxxxxxxxxxxxxxx`).
                let first = text.bytes().next()?;
                text.bytes()
                    .all(|b| b == first)
                    .then(|| "one character repeated".to_owned())
            });
        if let Some(why) = placeholder {
            return Err(TokenError::Placeholder {
                from: from.to_owned(),
                why,
            });
        }
        Ok(Token(text.as_bytes().to_vec()))
    }

    /// The token in the file at `path` (a trailing newline dropped).
    pub fn from_file(path: &Path) -> Result<Token, TokenError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
            path: path.to_owned(),
            source,
        })?;
        Token::new(&text, &format!("in {}", path.display()))
    }

    /// Whether an `Authorization` header's value presents this token
    /// (`Bearer TOKEN`, the scheme in any case). The comparison takes the
    /// same time wherever the first difference is.
    pub fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let Some(value) = authorization else {
            return false;
        };
        let Some((scheme, given)) = value.split_at_checked(7) else {
            return false;
        };
        scheme.eq_ignore_ascii_case(b"bearer ") && bool::from(given.ct_eq(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_token_is_admitted() {
        let token = Token::new("0123456789abcdef\n", "here").unwrap();
        assert!(token.admits(Some(b"Bearer 0123456789abcdef")));
        assert!(token.admits(Some(b"bearer 0123456789abcdef")));
        for wrong in [
            &b"Bearer 0123456789abcdeF"[..],
            b"Bearer 0123456789abcde",
            b"Bearer 0123456789abcdef0",
            b"Basic 0123456789abcdef",
            b"Bearer",
            b"",
            b"0123456789abcdef",
        ] {
            assert!(
                !token.admits(Some(wrong)),
                "{}",
                String::from_utf8_lossy(wrong)
            );
        }
        assert!(!token.admits(None));
        assert!(matches!(
            Token::new("short", "here"),
            Err(TokenError::Short { len: 5, .. })
        ));
        assert!(matches!(
            Token::new("0123456789 abcdef", "here"),
            Err(TokenError::Unprintable { .. })
        ));
        assert_eq!(format!("{token:?}"), "Token(..)");
        for placeholder in [
            "REPLACE-with-32-random-bytes-in-base64",
            "changeme-changeme-changeme",
            "<your-token-see-the-example>",
            "xxxxxxxxxxxxxxxxxxxxxxxx",
        ] {
            assert!(
                matches!(
                    Token::new(placeholder, "here"),
                    Err(TokenError::Placeholder { .. })
                ),
                "{placeholder}"
            );
        }
    }
}
