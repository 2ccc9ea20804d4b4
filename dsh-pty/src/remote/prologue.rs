//! The one command line every remote backend starts its program with.

use crate::SpawnSpec;
use crate::sh_quote;

/// The POSIX `sh` command line that starts `spec`'s program on the other
/// side, tagged `tag`: change to its working directory, then `exec env`
/// with `-i` for a cleared environment ([`SpawnSpec::env_clear`]), `-u NAME`
/// for each removed variable ([`SpawnSpec::env_remove`]), the variables it
/// sets and [`TAG_VAR`](super::TAG_VAR)`=tag`, and the program with its
/// arguments (each word quoted with [`sh_quote`]). A backend runs it with
/// `sh -c` (Docker) or hands it to the user's login shell (SSH); the
/// program replaces the shell, so its process is the one the engine
/// started. Needs `env` with `-i` and `-u` on that side (GNU coreutils,
/// BusyBox and the BSDs have them).
///
/// ```
/// use dsh_pty::SpawnSpec;
/// let spec = SpawnSpec::new("bash")
///     .arg("-i")
///     .cwd("/work")
///     .env_remove("BASH_ENV")
///     .env("TERM", "dumb");
/// assert_eq!(
///     dsh_pty::remote::command_line(&spec, "0f"),
///     "cd -- '/work' && exec env -u 'BASH_ENV' 'TERM=dumb' DSH_TREE=0f 'bash' '-i'"
/// );
/// let cleared = SpawnSpec::new("sh").env_clear().env("PATH", "/bin");
/// assert_eq!(
///     dsh_pty::remote::command_line(&cleared, "0f"),
///     "exec env -i 'PATH=/bin' DSH_TREE=0f 'sh'"
/// );
/// ```
pub fn command_line(spec: &SpawnSpec, tag: &str) -> String {
    let lossy = |s: &std::ffi::OsStr| sh_quote(&s.to_string_lossy());
    let mut line = String::new();
    if let Some(dir) = spec.get_cwd() {
        line.push_str("cd -- ");
        line.push_str(&lossy(dir.as_os_str()));
        line.push_str(" && ");
    }
    line.push_str("exec env");
    // `env` takes its options before the assignments.
    if spec.is_env_cleared() {
        line.push_str(" -i");
    }
    for (key, _) in spec.get_env().iter().filter(|(_, v)| v.is_none()) {
        line.push_str(" -u ");
        line.push_str(&lossy(key));
    }
    for (key, value) in spec.get_env() {
        if let Some(value) = value {
            let pair = format!("{}={}", key.to_string_lossy(), value.to_string_lossy());
            line.push(' ');
            line.push_str(&sh_quote(&pair));
        }
    }
    line.push_str(&format!(" {}={tag}", super::TAG_VAR));
    line.push(' ');
    line.push_str(&lossy(spec.program()));
    for arg in spec.get_args() {
        line.push(' ');
        line.push_str(&lossy(arg));
    }
    line
}
