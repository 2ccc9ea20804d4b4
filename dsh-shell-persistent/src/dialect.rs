//! What differs between bash, POSIX sh and PowerShell: argv, the lines that
//! set up the shell and wrap each command, and the names in the contract.

use std::path::Path;

use crate::bash::{Protocol, Var};
use crate::quote::{bash_ansi_c, has_control, posix_single, pwsh_single, split_token};

/// Commands whose wrapped line would be longer than this many bytes are
/// passed through a file, so the terminal's 4 KiB line limit never cuts them.
pub(crate) const MAX_INLINE: usize = 3000;

/// The shell language of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Dialect {
    /// GNU bash (4.4 or newer): the default on Linux and macOS.
    #[cfg_attr(not(windows), default)]
    Bash,
    /// A POSIX shell such as dash or busybox ash.
    Sh,
    /// PowerShell 7 (`pwsh`): the default on Windows.
    #[cfg_attr(windows, default)]
    Pwsh,
}

impl Dialect {
    /// Every dialect, by [`Dialect::tool_name`]: bash, sh, pwsh.
    pub const ALL: [Dialect; 3] = [Dialect::Bash, Dialect::Sh, Dialect::Pwsh];

    /// The tool's name, which is also the shell's name in messages.
    pub fn tool_name(self) -> &'static str {
        match self {
            Dialect::Bash => "bash",
            Dialect::Sh => "sh",
            Dialect::Pwsh => "pwsh",
        }
    }

    /// The default program and arguments.
    pub fn default_argv(self, rc_files: bool) -> Vec<String> {
        let v: &[&str] = match (self, rc_files) {
            (Dialect::Bash, false) => &["bash", "--noprofile", "--norc", "--noediting", "-i"],
            (Dialect::Bash, true) => &["bash", "--login", "--noediting", "-i"],
            (Dialect::Sh, _) => &["sh", "-i"],
            (Dialect::Pwsh, false) => &["pwsh", "-NoLogo", "-NoProfile"],
            (Dialect::Pwsh, true) => &["pwsh", "-NoLogo"],
        };
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    /// The default tool description: persistence facts only.
    pub fn default_description(self) -> String {
        format!(
            "Run commands in a persistent {} shell. State, including the current directory and exported environment variables, persists across calls for this agent.",
            self.tool_name()
        )
    }

    /// The default description of a non-persistent tool.
    pub fn one_shot_description(self) -> String {
        format!(
            "Run commands in a fresh {} shell. Nothing persists between calls: each call starts in the workspace with a fresh current directory and environment.",
            self.tool_name()
        )
    }

    /// The description of the `command` parameter.
    pub fn command_description(self) -> String {
        format!(
            "The {} command to run. Relative path is preferred in the command.",
            self.tool_name()
        )
    }

    /// The line that ends every result whose shell was reset.
    pub fn reset_line(self) -> String {
        let name = self.tool_name();
        format!(
            "The persistent {name} shell was reset; the next {name} call starts from the workspace with a fresh current directory and environment."
        )
    }

    /// The line written once after spawning; the shell answers with a prompt
    /// showing the `ready` marker. For bash it also installs the protocol and
    /// sets the first call's start marker. Ids are appended to the
    /// protocol's prefix.
    pub(crate) fn init_line(self, proto: &Protocol, ready: &str, first_start: &str) -> String {
        let ready = proto.marker(ready);
        match self {
            Dialect::Bash => proto.init_line(&ready, first_start),
            Dialect::Sh => format!("unset PS1 PS2 ENV; PS2=; PS1={}\n", split_token(&ready)),
            Dialect::Pwsh => format!(
                "$ErrorActionPreference = 'Stop'; Remove-Module PSReadLine -ErrorAction SilentlyContinue; function global:prompt {{ {} }}\n",
                pwsh_concat(&ready)
            ),
        }
    }

    /// How the command reaches the shell: inline, or through a file.
    pub(crate) fn needs_file(self, command: &str) -> bool {
        match self {
            Dialect::Bash => bash_ansi_c(command).len() > MAX_INLINE,
            Dialect::Sh => has_control(command) || command.len() > MAX_INLINE,
            Dialect::Pwsh => command.len() * 4 / 3 > MAX_INLINE,
        }
    }

    /// The one physical line that runs `source` (the command inline, or the
    /// file holding it) between the markers.
    ///
    /// * bash: see [`crate::bash`].
    /// * sh: the start marker is printed with `printf`, the end marker is `PS1`.
    /// * pwsh: markers are written with `[Console]::Write`, the status taken
    ///   from `$LASTEXITCODE` when the command set it, else from `$?`.
    pub(crate) fn call_line(
        self,
        proto: &Protocol,
        source: &CommandSource<'_>,
        ids: &CallIds,
    ) -> String {
        let start = || proto.marker(&ids.start);
        let end = || proto.marker(&ids.end);
        match self {
            Dialect::Bash => proto.call_line(source, ids),
            Dialect::Sh => {
                let run = match source {
                    CommandSource::Inline(cmd) => format!("\\eval {}", posix_single(cmd)),
                    CommandSource::File { path, .. } => {
                        format!(". {}", posix_single(&path.to_string_lossy()))
                    }
                };
                format!(
                    "{{ PS1=${{{u}-}}; }} 2>/dev/null; printf '%s%s' {}; {run}; \
{{ {st}=$?; {u}=${{PS1-}}; jobs >/dev/null; PS1={end}\"${st}\"'#'; }} 2>/dev/null\n",
                    split_token(&start()).replacen("''", "' '", 1),
                    end = split_token(&end()),
                    u = proto.var(Var::UserPromptCommand),
                    st = proto.var(Var::Status),
                )
            }
            Dialect::Pwsh => {
                let run = match source {
                    CommandSource::Inline(cmd) => format!(
                        "Invoke-Expression ([Text.Encoding]::UTF8.GetString([Convert]::FromBase64String('{}')))",
                        base64(cmd.as_bytes())
                    ),
                    CommandSource::File { path, .. } => format!(
                        "Invoke-Expression ([IO.File]::ReadAllText({}))",
                        pwsh_single(&path.to_string_lossy())
                    ),
                };
                format!(
                    "$global:LASTEXITCODE = $null; [Console]::Write({}); $__dsh_ok = $true; try {{ {run}; $__dsh_ok = $? }} catch {{ $__dsh_ok = $false; [Console]::Error.WriteLine(($_ | Out-String).TrimEnd()) }}; \
$__dsh_s = if ($null -ne $global:LASTEXITCODE) {{ $global:LASTEXITCODE }} elseif ($__dsh_ok) {{ 0 }} else {{ 1 }}; function global:prompt {{ {} + $__dsh_s + '#' }}\n",
                    pwsh_concat(&start()),
                    pwsh_concat(&end()),
                )
            }
        }
    }

    /// Whether the start marker of the next call is chosen one call ahead.
    pub(crate) fn start_is_preset(self) -> bool {
        self == Dialect::Bash
    }
}

/// The fresh ids of one call (hex, appended to the shell's marker prefix).
#[derive(Debug, Clone)]
pub(crate) struct CallIds {
    /// This call's abandon tag (bash).
    pub(crate) call: String,
    /// The start marker's id.
    pub(crate) start: String,
    /// The end prompt's id.
    pub(crate) end: String,
    /// The next call's start id (bash sets it one call ahead).
    pub(crate) next_start: String,
    /// The previous call ended with status 2 (bash: a syntax error).
    pub(crate) after_syntax_error: bool,
    /// bash waits at its prompt in POSIX mode: the previous call ended
    /// through its epilogue (or none ran since the init line).
    pub(crate) in_posix: bool,
    /// The last call's end prompt said `set -x` or `set -v` was on (bash:
    /// the prologue's traced form turns it back on).
    pub(crate) traced: bool,
}

/// Where the wrapper finds the command.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CommandSource<'a> {
    /// The command itself, quoted in the line.
    Inline(&'a str),
    /// A file holding `command`, which the shell reads.
    File {
        /// Where the file is, as the shell sees it.
        path: &'a Path,
        /// What it holds.
        command: &'a str,
    },
}

/// `'abc' + 'def'`: a PowerShell expression for the token, in two halves.
fn pwsh_concat(token: &str) -> String {
    let mid = token.len() / 2;
    format!("('{}' + '{}')", &token[..mid], &token[mid..])
}

fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            *group.get(1).unwrap_or(&0),
            *group.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(char::from(TABLE[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "0011223344556677";

    #[test]
    fn wrappers_are_one_line_and_never_hold_a_whole_marker() {
        let proto = Protocol::new(P, "8899aabbccddeeff", "0123");
        let ids = CallIds {
            call: "c0c0c0c0".into(),
            start: "1111111111111111".into(),
            end: "2222222222222222".into(),
            next_start: "3333333333333333".into(),
            after_syntax_error: true,
            in_posix: false,
            traced: true,
        };
        let markers = [&ids.start, &ids.end, &ids.next_start].map(|id| proto.marker(id));
        for dialect in [Dialect::Bash, Dialect::Sh, Dialect::Pwsh] {
            for cmd in ["echo hi", "cat <<EOF\nx\nEOF", "printf '\\x03'\u{3}\t"] {
                let source = if dialect.needs_file(cmd) {
                    CommandSource::File {
                        path: Path::new("/tmp/d/cmd"),
                        command: cmd,
                    }
                } else {
                    CommandSource::Inline(cmd)
                };
                let line = dialect.call_line(&proto, &source, &ids);
                assert_eq!(line.matches('\n').count(), 1, "{dialect:?}: {line}");
                assert!(line.ends_with('\n'));
                assert!(
                    !has_control(line.trim_end_matches('\n')),
                    "{dialect:?}: {line:?}"
                );
                for m in &markers {
                    assert!(!line.contains(m.as_str()), "{dialect:?}: {line}");
                }
            }
            let init = dialect.init_line(&proto, &ids.start, &ids.end);
            for m in &markers {
                assert!(!init.contains(m.as_str()), "{dialect:?}: {init}");
            }
        }
    }

    #[test]
    fn names_follow_the_dialect() {
        assert_eq!(
            Dialect::Bash.reset_line(),
            "The persistent bash shell was reset; the next bash call starts from the workspace with a fresh current directory and environment."
        );
        assert_eq!(Dialect::Pwsh.tool_name(), "pwsh");
        assert_eq!(
            Dialect::Bash.default_description(),
            "Run commands in a persistent bash shell. State, including the current directory and exported environment variables, persists across calls for this agent."
        );
    }

    #[test]
    fn pwsh_quoting_round_trips_through_base64() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(
            base64("Write-Output 'ä'".as_bytes()),
            "V3JpdGUtT3V0cHV0ICfDpCc="
        );
        assert_eq!(pwsh_concat("abcd"), "('ab' + 'cd')");
    }
}
