//! The variables of this process's environment a shell leaves out: those
//! whose names look like credentials.
//!
//! A shell started on this machine from this process's environment
//! ([`ShellConfig::inherit_env`], the default) gets every variable of it
//! except those [`looks_like_secret`] picks out (its docs give
//! the rules and why), so a host's API keys and
//! tokens never reach the model's shell unless the host hands one over on
//! purpose ([`ShellConfig::env`]) or turns the filter off
//! ([`ShellConfig::pass_secrets`]). A shell whose backend runs it elsewhere
//! (a container, another host) inherits nothing from this process: it gets
//! [`ShellConfig::env`] and the tool's own variables only, so the filter
//! has nothing to remove there.
//!
//! [`ShellConfig::inherit_env`]: crate::ShellConfig::inherit_env
//! [`ShellConfig::env`]: crate::ShellConfig::env
//! [`ShellConfig::pass_secrets`]: crate::ShellConfig::pass_secrets

use dsh_pty::SpawnSpec;

use crate::ShellConfig;

/// Parts of a name (in upper case) that make it a credential's wherever
/// they are (rule 1 of [`looks_like_secret`]).
pub const SECRET_NAME_PARTS: [&str; 7] = [
    "KEY",
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
];

/// Names of credentials that no part or word of [`looks_like_secret`]'s rules
/// catches.
pub const SECRET_NAMES: [&str; 2] = ["CI_JOB_JWT", "CI_JOB_JWT_V2"];

/// Names that hold a part of [`SECRET_NAME_PARTS`] but are settings that
/// ordinary tools read, never credentials: Hugging Face tokenizers'
/// threading, tiktoken's cache, Python keyring's backend (set to keep pip
/// from waiting on a desktop keyring).
pub const NOT_SECRET_NAMES: [&str; 3] = [
    "TOKENIZERS_PARALLELISM",
    "TIKTOKEN_CACHE_DIR",
    "PYTHON_KEYRING_BACKEND",
];

/// Words that begin with `AUTH` but say who wrote something or who vouches
/// for it, not how to get in.
const AUTH_NOT_SECRET: [&str; 3] = ["AUTHOR", "AUTHORS", "AUTHORITY"];

/// Words that, after a name's first, mark a password or access token.
const SECRET_WORDS: [&str; 3] = ["PASS", "PWD", "PAT"];

/// Whether a variable named `name` is left out of a shell's environment by
/// default: its name looks like a credential's.
///
/// # The rules
///
/// A name (compared in upper case, so `openai_api_key` is caught too) looks
/// like a credential's when
///
/// 1. it holds one of [`SECRET_NAME_PARTS`] anywhere: `KEY`, `SECRET`,
///    `TOKEN`, `PASSWORD`, `PASSWD`, `PASSPHRASE`, `CREDENTIAL`
///    (`OPENAI_API_KEY`, `AWS_SECRET_ACCESS_KEY`, `GITHUB_TOKEN`,
///    `PGPASSWORD`, `GOOGLE_APPLICATION_CREDENTIALS`, `BORG_PASSPHRASE`);
/// 2. one of its `_`-separated words starts with `AUTH`, other than
///    `AUTHOR`, `AUTHORS` and `AUTHORITY` (`SSH_AUTH_SOCK`,
///    `NODE_AUTH_TOKEN`, `NGROK_AUTHTOKEN`, `HTTP_AUTHORIZATION`,
///    `NPM_CONFIG__AUTH`; not `GIT_AUTHOR_NAME` or `GIT_AUTHOR_EMAIL`,
///    which `git commit` needs, nor `XAUTHORITY`);
/// 3. a word after its first is `PASS`, `PWD` or `PAT` (`SMTP_PASS`,
///    `MYSQL_PWD`, `AZURE_DEVOPS_EXT_PAT`; not `PWD` or `OLDPWD`, the
///    shell's own directories, nor `GIT_ASKPASS`, a program's path);
/// 4. or it is one of [`SECRET_NAMES`], credentials no rule above catches
///    (GitLab's `CI_JOB_JWT`, `CI_JOB_JWT_V2`);
///
/// unless it is one of [`NOT_SECRET_NAMES`]: settings that hold a part of
/// rule 1 by accident and that ordinary tools read (`TOKENIZERS_PARALLELISM`,
/// `TIKTOKEN_CACHE_DIR`, `PYTHON_KEYRING_BACKEND`).
///
/// # Why these
///
/// Leaving a harmless variable out costs a host one `ShellConfig::env`
/// entry (`--env NAME` in `dsh-mcp`); letting a credential through hands
/// it to a model that prints what it finds. So the parts are matched
/// anywhere, as Codex matches `*KEY*`, `*SECRET*` and `*TOKEN*`, and names
/// are excepted only where a rule would take an ordinary, well-known
/// setting. What that costs, knowingly:
///
/// - `SSH_AUTH_SOCK` is left out: the agent's socket signs with the user's
///   keys (a `git push` over SSH as the user), which is a credential in
///   effect. Pass it with `--env SSH_AUTH_SOCK`.
/// - `KEY` catches names like `KEYBOARD`, `KEYMAP` or `GPG_KEY` (a public
///   key's id in Python's images); none of them is something a build, a
///   test run or a package manager reads.
/// - File paths to credentials (`GOOGLE_APPLICATION_CREDENTIALS`,
///   `AWS_SHARED_CREDENTIALS_FILE`) are left out with the rest: the path
///   leads to the secret.
///
/// What passes: every name without these parts, among them `PATH`, `HOME`,
/// `USER`, `SHELL`, `LANG`, `LC_*`, `TERM`, `TZ`, `TMPDIR`, `VIRTUAL_ENV`,
/// `PYTHONPATH`, `CARGO_HOME`, `RUSTUP_HOME`, `GOPATH`, `JAVA_HOME`,
/// `LD_LIBRARY_PATH`, the proxies, `PIP_INDEX_URL`, `SSL_CERT_FILE`,
/// `GIT_AUTHOR_*`, `GIT_COMMITTER_*`, `CUDA_VISIBLE_DEVICES`, `HF_HOME`,
/// `DISPLAY`, `XAUTHORITY`. The rules read names, never values: a
/// credential inside an ordinary variable's value (a password in
/// `DATABASE_URL` or in a proxy's URL) passes, so a host that keeps one
/// there clears it or confines the shell (`dsh-sandbox`'s workspace-write
/// or read-only), whose shells keep only a short list of the host's
/// variables.
///
/// ```
/// use dsh_shell_persistent::looks_like_secret;
/// assert!(looks_like_secret("OPENAI_API_KEY"));
/// assert!(looks_like_secret("github_token"));
/// assert!(looks_like_secret("SSH_AUTH_SOCK"));
/// assert!(!looks_like_secret("GIT_AUTHOR_NAME"));
/// assert!(!looks_like_secret("PATH"));
/// assert!(!looks_like_secret("TOKENIZERS_PARALLELISM"));
/// ```
pub fn looks_like_secret(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    if NOT_SECRET_NAMES.contains(&name.as_str()) {
        return false;
    }
    if SECRET_NAMES.contains(&name.as_str())
        || SECRET_NAME_PARTS.iter().any(|part| name.contains(part))
    {
        return true;
    }
    let mut words = name.split('_');
    let first = words.next().unwrap_or_default();
    let auth = |word: &str| word.starts_with("AUTH") && !AUTH_NOT_SECRET.contains(&word);
    auth(first) || words.any(|word| auth(word) || SECRET_WORDS.contains(&word))
}

/// `spec` with the variables of this process's environment that look like
/// secrets removed, when the shell starts from this process's environment
/// on this machine and `config` does not pass them. Variables set later on
/// the spec ([`ShellConfig::env`]) are applied after the removals, so a
/// host's own choice wins.
pub(crate) fn without_secrets(mut spec: SpawnSpec, config: &ShellConfig) -> SpawnSpec {
    if !config.inherit_env || config.pass_secrets || !config.backend.is_local() {
        return spec;
    }
    for (name, _) in std::env::vars_os() {
        if looks_like_secret(&name.to_string_lossy()) {
            spec = spec.env_remove(name);
        }
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Credentials the filter is for, by name.
    const SECRETS: &[&str] = &[
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "WANDB_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AZURE_CLIENT_SECRET",
        "DB_PASSWORD",
        "PGPASSWORD",
        "MYSQL_PWD",
        "SMTP_PASS",
        "DB_PASS_FILE",
        "NPM_TOKEN",
        "NODE_AUTH_TOKEN",
        "NPM_CONFIG__AUTH",
        "CARGO_REGISTRY_TOKEN",
        "TWINE_PASSWORD",
        "VAULT_TOKEN",
        "SSH_AUTH_SOCK",
        "NGROK_AUTHTOKEN",
        "HTTP_AUTHORIZATION",
        "AUTH_HEADER",
        "BASIC_AUTH",
        "BORG_PASSPHRASE",
        "DOCKER_AUTH_CONFIG",
        "CI_JOB_JWT",
        "CI_JOB_JWT_V2",
        "AZURE_DEVOPS_EXT_PAT",
        "GITHUB_PAT",
        "openai_api_key",
        "Github_Token",
        "MY_APIKEY",
    ];

    /// Ordinary variables a shell's work needs, which must pass.
    const ORDINARY: &[&str] = &[
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "LC_MESSAGES",
        "TERM",
        "COLORTERM",
        "TZ",
        "TMPDIR",
        "PWD",
        "OLDPWD",
        "EDITOR",
        "PAGER",
        "VIRTUAL_ENV",
        "PYTHONPATH",
        "PYTHONHASHSEED",
        "CONDA_PREFIX",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "RUST_LOG",
        "RUST_BACKTRACE",
        "GOPATH",
        "JAVA_HOME",
        "NODE_PATH",
        "LD_LIBRARY_PATH",
        "HTTP_PROXY",
        "https_proxy",
        "NO_PROXY",
        "PIP_INDEX_URL",
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_ASKPASS",
        "SSH_ASKPASS",
        "CUDA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "HF_HOME",
        "WANDB_MODE",
        "TOKENIZERS_PARALLELISM",
        "TIKTOKEN_CACHE_DIR",
        "PYTHON_KEYRING_BACKEND",
        "DISPLAY",
        "XAUTHORITY",
        "XDG_RUNTIME_DIR",
        "DBUS_SESSION_BUS_ADDRESS",
        "MAKEFLAGS",
        "DEBIAN_FRONTEND",
        "HOSTNAME",
        "DSH_WORKSPACE",
        "PATHEXT",
        "SSL_CERT_AUTHORITY",
    ];

    #[test]
    fn credentials_are_caught() {
        for name in SECRETS {
            assert!(looks_like_secret(name), "{name} passes");
        }
    }

    #[test]
    fn ordinary_variables_pass() {
        for name in ORDINARY {
            assert!(!looks_like_secret(name), "{name} is left out");
        }
    }

    #[test]
    fn the_lists_are_upper_case_and_apart() {
        for name in SECRET_NAME_PARTS
            .iter()
            .chain(&SECRET_NAMES)
            .chain(&NOT_SECRET_NAMES)
        {
            assert_eq!(*name, name.to_ascii_uppercase());
        }
        for name in NOT_SECRET_NAMES {
            assert!(!SECRET_NAMES.contains(&name));
        }
    }

    proptest! {
        /// Case never matters.
        #[test]
        fn case_is_ignored(name in "[A-Za-z0-9_]{0,24}") {
            prop_assert_eq!(
                looks_like_secret(&name),
                looks_like_secret(&name.to_ascii_lowercase())
            );
        }

        /// A part anywhere in a name makes it a credential's, whatever
        /// surrounds it (the exceptions are whole names).
        #[test]
        fn a_part_anywhere_is_caught(
            before in "[A-Za-z0-9_]{0,12}",
            after in "[A-Za-z0-9_]{0,12}",
            part in proptest::sample::select(SECRET_NAME_PARTS.to_vec()),
            lower in any::<bool>(),
        ) {
            let part = if lower { part.to_ascii_lowercase() } else { part.to_owned() };
            let name = format!("{before}{part}{after}");
            prop_assert!(looks_like_secret(&name), "{} passes", name);
        }

        /// Names made of words that hold none of the parts, start with no
        /// `AUTH` and are no `PASS`, `PWD` or `PAT`, pass.
        #[test]
        fn other_names_pass(words in proptest::collection::vec("[B-Z][A-Z0-9]{0,7}", 1..5)) {
            let name = words.join("_");
            let ours = SECRET_NAME_PARTS.iter().any(|p| name.contains(p))
                || SECRET_NAMES.contains(&name.as_str())
                || words.iter().any(|w| w.starts_with("AUTH"))
                || words[1..].iter().any(|w| SECRET_WORDS.contains(&w.as_str()));
            prop_assume!(!ours);
            prop_assert!(!looks_like_secret(&name), "{} is left out", name);
        }
    }
}
