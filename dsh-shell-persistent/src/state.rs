//! A bash shell's state, read from a live shell and written into a fresh
//! one: what a fork, a snapshot or a restore of an agent keeps of its shell.
//!
//! Capturing runs one command in the shell through the ordinary protocol
//! (so it waits for the owner's turn and is never shown to the model). The
//! command reads the state with bash builtins only (`declare -p`, `declare
//! -F`/`-f`, `alias -p`, `shopt -p`, `set +o`, `umask`, `pwd`), in the
//! shell itself, with `set -e`/`-u`/`-x`/`-v`, `expand_aliases` and
//! `nocasematch` off while it runs and put back as they were at its end
//! (the options as they were before it changed any: `BASHOPTS` goes stale
//! when POSIX mode changes options). When the shell runs on this machine,
//! each builtin's output is redirected into a file of its own in a private
//! directory (no subshell is forked, so a capture costs about what a call
//! does), and each file is read back only if it is the regular file the
//! shell wrote. Else (or if the shell cannot write there: it sees another
//! `/tmp`), each part is read by a command substitution and the ten are
//! printed on the terminal quoted by `printf %q` under `LC_ALL=C` (every
//! byte ASCII, so nothing the output path normalizes can change them),
//! between random markers, with their length, which shows whether anything
//! (a job printing to the terminal) came in between (then it is read again,
//! up to three times). The parts are decoded here, the names
//! bash and this library own are dropped, and the rest becomes a bash
//! script: [`ShellState`].

use std::fmt;
use std::sync::Arc;

use crate::quote::{bash_ansi_c_bytes, split_token};

/// A bash shell's state, captured from a live shell
/// ([`Shell::capture_state`](crate::Shell::capture_state),
/// [`ShellPool::capture_state`](crate::ShellPool::capture_state)) and
/// applied to another ([`Shell::apply_state`](crate::Shell::apply_state),
/// [`ShellPool::set_start_state`](crate::ShellPool::set_start_state)). It
/// is the bash script that recreates the state; cloning it is cheap.
///
/// **Kept:** the current directory; every shell variable, exported or not,
/// with its attributes (indexed and associative arrays, `-i` integer,
/// `-l`/`-u` case, `-n` nameref, `-r` read-only, `-x` exported, `-t`),
/// values with any bytes (newlines, quotes, invalid UTF-8) and of any
/// size; the functions (exported, traced and read-only ones with those
/// attributes); the aliases; the `set -o` options (`set -e`, `-u`,
/// `noclobber`, `pipefail`, POSIX mode, ...) and the `shopt` options; the
/// umask; the positional parameters (`set -- a b`). `PROMPT_COMMAND` is
/// kept as the user set it; `OLDPWD` too.
///
/// **Not kept:** processes (background jobs, coprocesses: a state holds
/// no process, and the job table of the new shell is empty), traps, open
/// file descriptors (a variable naming one, such as a coprocess's, is
/// kept but the descriptor is not), the history (off in these shells),
/// the directory stack (`pushd`), bash's own variables
/// (`BASH_VERSINFO`, `EUID`, `PPID`, `SHLVL`, `RANDOM`, `SECONDS`,
/// `LINENO`, `PIPESTATUS`, `FUNCNAME`, `BASH_REMATCH`, `COLUMNS`,
/// `LINES`, `HOSTNAME`, ...), the
/// library's own (every variable and function whose name is `_D`, two
/// characters and `_`, such as `_D3f_k`; the prompt variables `PS0`,
/// `PS1`, `PS2`), the options the library or the terminal owns (`set -o
/// history`, `histexpand`, `monitor`, `emacs`/`vi`, `privileged`,
/// `onecmd`, `noexec`; `shopt` `promptvars`, `login_shell`,
/// `restricted_shell` and the `compat*` ones, whose value is
/// `BASH_COMPAT`, kept), `$?`, `$_` and `PIPESTATUS` (every call starts
/// with the same ones anyway). Capturing runs one line in the shell, so
/// bash's `LINENO` counts it as it counts a call.
///
/// Applied to a shell, the state first removes that shell's aliases, then
/// sets, in order: the directory, the variables (unsetting those the state
/// does not name, such as one from the environment the source shell
/// unset), the aliases, the umask, the functions (parsed with `extglob`
/// on and aliases off, so that a function reads as it was defined), the
/// `shopt` options, the positional parameters, the `set` options, and
/// last POSIX mode, `set -e`, `-u`, `-v` and `-x`. A
/// function the new shell already had and the state does not name is
/// left as it was.
#[derive(Clone)]
pub struct ShellState {
    inner: Arc<Inner>,
}

struct Inner {
    /// The script that recreates the state.
    script: Vec<u8>,
    /// The current directory, as bash's `pwd` showed it.
    cwd: Vec<u8>,
}

impl fmt::Debug for ShellState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The script holds the shell's variables, secrets among them.
        f.debug_struct("ShellState")
            .field("cwd", &String::from_utf8_lossy(&self.inner.cwd))
            .field("script_bytes", &self.inner.script.len())
            .finish()
    }
}

impl ShellState {
    /// The bash script that recreates the state (for inspection: its form
    /// may change in any release).
    pub fn script(&self) -> &[u8] {
        &self.inner.script
    }

    /// The shell's current directory when the state was captured.
    #[cfg(unix)]
    pub fn cwd(&self) -> &std::path::Path {
        use std::os::unix::ffi::OsStrExt;
        std::path::Path::new(std::ffi::OsStr::from_bytes(&self.inner.cwd))
    }

    /// The command a call runs to apply the state: the script itself when
    /// it is UTF-8 (the call's command may be any text), else the script
    /// quoted as ASCII and `eval`ed (which bash parses twice).
    pub(crate) fn apply_command(&self) -> String {
        match std::str::from_utf8(&self.inner.script) {
            Ok(script) => script.to_owned(),
            Err(_) => {
                let mut command = String::from("\\builtin eval ");
                command.push_str(&bash_ansi_c_bytes(&self.inner.script));
                command
            }
        }
    }
}

/// Variables bash sets or owns, never kept: their values belong to the
/// shell they are read in (or cannot be assigned), or the protocol sets
/// them (`PS0`-`PS2`), or the directory carries them (`PWD`), or POSIX mode
/// does (`POSIXLY_CORRECT`, set by `set -o posix`).
pub(crate) const NOT_KEPT_VARIABLES: &[&str] = &[
    "BASH",
    "BASHOPTS",
    "BASHPID",
    "BASH_ALIASES",
    "BASH_ARGC",
    "BASH_ARGV",
    "BASH_ARGV0",
    "BASH_CMDS",
    "BASH_COMMAND",
    "BASH_EXECUTION_STRING",
    "BASH_LINENO",
    "BASH_MONOSECONDS",
    "BASH_REMATCH",
    "BASH_SOURCE",
    "BASH_SUBSHELL",
    "BASH_TRAPSIG",
    "BASH_VERSINFO",
    "BASH_VERSION",
    "BASH_XTRACEFD",
    "COLUMNS",
    "COMP_CWORD",
    "COMP_KEY",
    "COMP_LINE",
    "COMP_POINT",
    "COMP_TYPE",
    "COMP_WORDBREAKS",
    "COMP_WORDS",
    "DIRSTACK",
    "EPOCHREALTIME",
    "EPOCHSECONDS",
    "EUID",
    "FUNCNAME",
    "GROUPS",
    "HISTCMD",
    "HOSTNAME",
    "HOSTTYPE",
    "LINENO",
    "LINES",
    "MACHTYPE",
    "OSTYPE",
    "PIPESTATUS",
    "POSIXLY_CORRECT",
    "PPID",
    "PS0",
    "PS1",
    "PS2",
    "PWD",
    "RANDOM",
    "READLINE_ARGUMENT",
    "READLINE_LINE",
    "READLINE_MARK",
    "READLINE_POINT",
    "SECONDS",
    "SHELLOPTS",
    "SHLVL",
    "SRANDOM",
    "UID",
    "_",
];

/// `set -o` options the library or the terminal owns.
const NOT_KEPT_SET: &[&str] = &[
    "emacs",
    "histexpand",
    "history",
    "monitor",
    "noexec",
    "onecmd",
    "privileged",
    "vi",
];

/// `set -o` options set last, in this order: POSIX mode after the
/// functions (whose names it may refuse), the others last of all, since
/// each changes how the statements after it run.
const SET_LAST: &[&str] = &["posix", "errexit", "nounset", "verbose", "xtrace"];

/// The `set -o` options `$-` shows, and their letters.
const SET_LETTERS: &[(&str, u8)] = &[
    ("allexport", b'a'),
    ("braceexpand", b'B'),
    ("errexit", b'e'),
    ("errtrace", b'E'),
    ("functrace", b'T'),
    ("hashall", b'h'),
    ("keyword", b'k'),
    ("noclobber", b'C'),
    ("noglob", b'f'),
    ("notify", b'b'),
    ("nounset", b'u'),
    ("physical", b'P'),
    ("verbose", b'v'),
    ("xtrace", b'x'),
];

/// `shopt` options the library owns or bash refuses to set.
const NOT_KEPT_SHOPT: &[&str] = &["login_shell", "promptvars", "restricted_shell"];

/// Whether a variable or function name is the library's own: `_D`, two
/// characters, `_` (the protocol's names, [`crate::bash`], and the
/// capture's own).
fn library_name(name: &[u8]) -> bool {
    name.len() >= 5 && name.starts_with(b"_D") && name[4] == b'_'
}

/// Whether variable `name` is kept in a state.
fn kept_variable(name: &[u8]) -> bool {
    !library_name(name) && !NOT_KEPT_VARIABLES.iter().any(|n| n.as_bytes() == name)
}

/// One capture: its random markers, the command that prints the state
/// between them, and the reading of its output.
#[derive(Debug)]
pub(crate) struct Capture {
    begin: String,
    end: String,
    /// A private directory the shell writes the state into, when it runs
    /// on this machine: a file takes it whole, where a job printing to the
    /// terminal can come in between the writes of a long line.
    dir: Option<tempfile::TempDir>,
}

/// How many words the capture prints.
const WORDS: usize = 10;

impl Capture {
    /// A capture with fresh random markers; through a file if `local`
    /// (the shell runs on this machine) and a private directory can be
    /// made, else through the terminal.
    pub(crate) fn new(local: bool) -> Result<Capture, crate::ShellError> {
        let hex = dsh_pty::random_hex(32).map_err(crate::ShellError::Random)?;
        let (begin, end) = hex.split_at(16);
        let dir = local
            .then(|| tempfile::Builder::new().prefix("dsh-state-").tempdir().ok())
            .flatten();
        Ok(Capture {
            begin: format!("S{begin}"),
            end: format!("E{end}"),
            dir,
        })
    }

    /// The command that writes the state. Its first line only assigns and
    /// calls builtins through `\builtin` (no word a user alias could
    /// replace); from the second on, aliases are off. Through files, each
    /// part is a builtin's output redirected into a file of its own (no
    /// subshell is forked: a capture costs about what a call does); through
    /// the terminal, each part is read by a command substitution and
    /// printed quoted. It leaves no variable behind and ends with the
    /// options it found.
    pub(crate) fn command(&self) -> String {
        // Through files: the options written before any changes; if that
        // fails (the shell sees another `/tmp`), the terminal's way.
        let to_files = match &self.dir {
            Some(dir) => format!(
                r#"_Dst_D={dir}; \builtin shopt -p 2>/dev/null >| "$_Dst_D/S" && \builtin set +o >| "$_Dst_D/O" && _Dst_m=f || "#,
                dir = bash_ansi_c_bytes(dir.path().as_os_str().as_encoded_bytes()),
            ),
            None => String::new(),
        };
        format!(
            r#"_Dst_d=$- _Dst_e= _Dst_m=t; \builtin shopt -q expand_aliases && _Dst_e+=a; \builtin shopt -q nocasematch && _Dst_e+=n; {to_files}_Dst_S=$(\builtin shopt -p) _Dst_O=$(\builtin set +o); \builtin set +euxv 2>/dev/null; \builtin shopt -u expand_aliases nocasematch
_Dst_a=; if [[ $# -gt 0 ]]; then LC_ALL=C \builtin printf -v _Dst_a '%q ' "$@"; fi
if [[ $_Dst_m == f ]]; then
\builtin declare -p >| "$_Dst_D/V"; \builtin declare -F >| "$_Dst_D/F"; \builtin alias -p >| "$_Dst_D/A"; \builtin umask >| "$_Dst_D/u"; {{ \builtin pwd; \builtin printf x; }} >| "$_Dst_D/w"; \builtin printf %s "$_Dst_d" >| "$_Dst_D/d"; \builtin printf %s "$_Dst_a" >| "$_Dst_D/a"
_Dst_k=(); \builtin mapfile -t _Dst_L < "$_Dst_D/F"
for _Dst_l in "${{_Dst_L[@]}}"; do _Dst_n=${{_Dst_l#declare -* }}; case $_Dst_n in _D??_*|'') ;; *) _Dst_k+=("$_Dst_n");; esac; done
>| "$_Dst_D/f"; if [[ ${{#_Dst_k[@]}} -gt 0 ]]; then if [[ -o posix ]]; then \builtin printf %s "$(\builtin set +o posix; \builtin declare -f -- "${{_Dst_k[@]}}")" >| "$_Dst_D/f"; else \builtin declare -f -- "${{_Dst_k[@]}}" >| "$_Dst_D/f"; fi; fi
\builtin printf '%s F %s\n' {begin} {end}
else
_Dst_V=$(\builtin declare -p) _Dst_F=$(\builtin declare -F) _Dst_A=$(\builtin alias -p) _Dst_u=$(\builtin umask) _Dst_w=$(\builtin pwd; \builtin printf x) _Dst_k=() _Dst_f=
_Dst_G=$_Dst_F$'\n'
while [[ -n $_Dst_G ]]; do _Dst_l=${{_Dst_G%%$'\n'*}}; _Dst_G=${{_Dst_G#*$'\n'}}; _Dst_n=${{_Dst_l#declare -* }}; case $_Dst_n in _D??_*|'') ;; *) _Dst_k+=("$_Dst_n");; esac; done
if [[ ${{#_Dst_k[@]}} -gt 0 ]]; then _Dst_f=$(\builtin set +o posix; \builtin declare -f -- "${{_Dst_k[@]}}"); fi
LC_ALL=C \builtin printf -v _Dst_p '%q %q %q %q %q %q %q %q %q %q' "$_Dst_V" "$_Dst_F" "$_Dst_f" "$_Dst_A" "$_Dst_S" "$_Dst_O" "$_Dst_d" "$_Dst_u" "$_Dst_w" "$_Dst_a"
\builtin printf '%s %s %s %s\n' {begin} "${{#_Dst_p}}" "$_Dst_p" {end}
fi
_Dst_t='\builtin unset -v _Dst_a _Dst_d _Dst_e _Dst_m _Dst_D _Dst_L _Dst_V _Dst_F _Dst_A _Dst_S _Dst_O _Dst_u _Dst_w _Dst_k _Dst_f _Dst_G _Dst_l _Dst_n _Dst_p _Dst_t;'
case $_Dst_e in *a*) _Dst_t+=' \builtin shopt -s expand_aliases;';; esac
case $_Dst_e in *n*) _Dst_t+=' \builtin shopt -s nocasematch;';; esac
_Dst_d=${{_Dst_d//[!euxv]/}}
if [[ -n $_Dst_d ]]; then _Dst_t+=" \\builtin set -$_Dst_d"; fi
\builtin eval "$_Dst_t""#,
            begin = split_token(&self.begin),
            end = split_token(&self.end),
        )
    }

    /// The state the command printed in `output` (the call's output, as
    /// the model would see it) or wrote into its file, or why it cannot
    /// be read.
    pub(crate) fn read(&self, output: &str) -> Result<ShellState, Unread> {
        let Some(at) = output.find(&self.begin) else {
            return Err(Unread::Other(
                "the shell did not print it (a function named `builtin` can stop it)",
            ));
        };
        let rest = &output[at + self.begin.len()..];
        let torn = || Unread::Torn;
        let rest = rest.strip_prefix(' ').ok_or_else(torn)?;
        let words = match rest.strip_prefix("F ") {
            Some(after) if after.starts_with(&self.end) => self.read_files()?,
            Some(_) => return Err(torn()),
            None => self.read_words(rest)?,
        };
        let [
            vars,
            fnames,
            funcs,
            aliases,
            shopt,
            set,
            flags,
            umask,
            cwd,
            args,
        ] = words;
        let cwd = cwd
            .strip_suffix(b"\nx")
            .ok_or(Unread::Other("`pwd` failed: the current directory is gone"))?
            .to_vec();
        let umask = String::from_utf8(umask)
            .ok()
            .filter(|u| (3..=4).contains(&u.len()) && u.bytes().all(|b| (b'0'..=b'7').contains(&b)))
            .ok_or(Unread::Other("`umask` printed no octal mask"))?;
        let parts = Parts {
            vars: &vars,
            fnames: &fnames,
            funcs: &funcs,
            aliases: &aliases,
            shopt: &shopt,
            set: &set,
            flags: &flags,
            args: &args,
            umask: &umask,
            cwd: &cwd,
        };
        Ok(ShellState {
            inner: Arc::new(Inner {
                script: parts.script(),
                cwd,
            }),
        })
    }
}

impl Capture {
    /// The ten parts the shell wrote into files of the private directory,
    /// each read back only if it is the regular file the shell wrote;
    /// trailing newlines dropped as a command substitution drops them
    /// (but for the directory, which ends in `x`, and the parts written
    /// with `printf %s`).
    fn read_files(&self) -> Result<[Vec<u8>; WORDS], Unread> {
        let dir = self.dir.as_ref().ok_or(Unread::Torn)?;
        let read = |name: &str, trim: bool| {
            let mut bytes = read_own_file(&dir.path().join(name)).ok_or(Unread::NoFile)?;
            if trim {
                let kept = bytes.len() - bytes.iter().rev().take_while(|&&b| b == b'\n').count();
                bytes.truncate(kept);
            }
            Ok::<_, Unread>(bytes)
        };
        Ok([
            read("V", true)?,
            read("F", true)?,
            read("f", true)?,
            read("A", true)?,
            read("S", true)?,
            read("O", true)?,
            read("d", false)?,
            read("u", true)?,
            read("w", false)?,
            read("a", false)?,
        ])
    }

    /// The ten words printed on the terminal after the capture's first
    /// marker (`rest`): their length, the words, the end marker.
    fn read_words(&self, rest: &str) -> Result<[Vec<u8>; WORDS], Unread> {
        let torn = || Unread::Torn;
        let (len, rest) = rest.split_once(' ').ok_or_else(torn)?;
        let len: usize = len.parse().map_err(|_| torn())?;
        let payload = rest.get(..len).ok_or_else(torn)?;
        let after = rest
            .get(len..)
            .and_then(|a| a.strip_prefix(' '))
            .ok_or_else(torn)?;
        if !after.starts_with(&self.end) {
            return Err(torn());
        }
        let mut words = Vec::with_capacity(WORDS);
        let mut input = payload.as_bytes();
        while words.len() < WORDS {
            let (word, rest) = decode_word(input).ok_or_else(torn)?;
            words.push(word);
            input = match rest.split_first() {
                Some((b' ', rest)) => rest,
                None => rest,
                Some(_) => return Err(torn()),
            };
        }
        if !input.is_empty() {
            return Err(torn());
        }
        <[Vec<u8>; WORDS]>::try_from(words).map_err(|_| torn())
    }
}

/// The contents of `path` if it is a regular file (never what a link the
/// shell's owner put there points to).
fn read_own_file(path: &std::path::Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let before = std::fs::symlink_metadata(path).ok()?;
    if !before.file_type().is_file() {
        return None;
    }
    let mut file = std::fs::File::open(path).ok()?;
    let opened = file.metadata().ok()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if (opened.dev(), opened.ino()) != (before.dev(), before.ino()) {
            return None;
        }
    }
    let mut bytes = Vec::with_capacity(usize::try_from(opened.len()).unwrap_or(0));
    file.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// Why a capture's output could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unread {
    /// Other output came in between (a job printing to the terminal): a
    /// capture again may read it.
    Torn,
    /// The shell wrote the state into a file this process could not read
    /// back whole: a capture through the terminal may read it.
    NoFile,
    /// Why, as a phrase.
    Other(&'static str),
}

impl Unread {
    /// Why, as a phrase.
    pub(crate) fn why(self) -> &'static str {
        match self {
            Unread::Torn | Unread::NoFile => {
                "other output (a job printing to the terminal) came in between, each time it was read"
            }
            Unread::Other(why) => why,
        }
    }
}

/// What the capture printed, decoded.
struct Parts<'a> {
    /// `declare -p`.
    vars: &'a [u8],
    /// `declare -F`.
    fnames: &'a [u8],
    /// `declare -f` of the functions kept.
    funcs: &'a [u8],
    /// `alias -p`.
    aliases: &'a [u8],
    /// `shopt -p`, read before the capture changed any (`BASHOPTS` can
    /// be stale: bash does not update it when POSIX mode changes options).
    shopt: &'a [u8],
    /// `set +o` in a subshell, read before the capture changed any.
    set: &'a [u8],
    /// `$-` of the shell itself: the options with a letter as they are (a
    /// subshell clears some).
    flags: &'a [u8],
    /// The positional parameters, each quoted by `printf %q` and followed
    /// by a space.
    args: &'a [u8],
    umask: &'a str,
    cwd: &'a [u8],
}

impl Parts<'_> {
    /// The script that recreates the state (see [`ShellState`] for the
    /// order).
    fn script(&self) -> Vec<u8> {
        let mut s =
            Vec::with_capacity(self.vars.len() + self.funcs.len() + self.aliases.len() + 1024);
        s.extend_from_slice(
            b"\\builtin unalias -a\n\\builtin shopt -u expand_aliases\n\\builtin shopt -s extglob\n\\builtin cd -- ",
        );
        s.extend_from_slice(bash_ansi_c_bytes(self.cwd).as_bytes());
        s.push(b'\n');
        let kept: Vec<(&[u8], &[u8])> = entries(self.vars, b"declare -")
            .filter_map(|entry| Some((entry_name(entry, b"declare -")?, entry)))
            .filter(|(name, _)| kept_variable(name))
            .collect();
        // The shell's variables the state does not name are unset (but
        // bash's own and the library's): every set variable's name starts
        // with a letter or `_`.
        s.extend_from_slice(b"for _Dst_n in");
        for first in (b'A'..=b'Z').chain(b'a'..=b'z').chain([b'_']) {
            s.extend_from_slice(b" ${!");
            s.push(first);
            s.extend_from_slice(b"*}");
        }
        s.extend_from_slice(b"; do case $_Dst_n in _D??_*");
        for name in NOT_KEPT_VARIABLES
            .iter()
            .map(|n| n.as_bytes())
            .chain(kept.iter().map(|(name, _)| *name))
        {
            s.push(b'|');
            s.extend_from_slice(name);
        }
        s.extend_from_slice(
            b") ;; *) \\builtin unset -v \"$_Dst_n\";; esac; done; \\builtin unset -v _Dst_n\n",
        );
        for (_, entry) in kept {
            s.extend_from_slice(entry);
            s.push(b'\n');
        }
        if !self.aliases.is_empty() {
            s.extend_from_slice(self.aliases);
            s.push(b'\n');
        }
        s.extend_from_slice(b"\\builtin umask ");
        s.extend_from_slice(self.umask.as_bytes());
        s.push(b'\n');
        if !self.funcs.is_empty() {
            s.extend_from_slice(self.funcs);
            s.push(b'\n');
        }
        for line in self.fnames.split(|&b| b == b'\n') {
            let Some(rest) = line.strip_prefix(b"declare -f") else {
                continue;
            };
            let Some(space) = rest.iter().position(|&b| b == b' ') else {
                continue;
            };
            let (flags, name) = (&rest[..space], &rest[space + 1..]);
            if flags.is_empty() || library_name(name) {
                continue;
            }
            s.extend_from_slice(b"\\builtin declare -f");
            s.extend_from_slice(flags);
            s.extend_from_slice(b" -- ");
            s.extend_from_slice(bash_ansi_c_bytes(name).as_bytes());
            s.push(b'\n');
        }
        let (mut set_on, mut set_off) = (Vec::new(), Vec::new());
        for (name, on) in options(self.shopt, b"shopt ") {
            if NOT_KEPT_SHOPT.iter().any(|n| n.as_bytes() == name) || name.starts_with(b"compat") {
                continue;
            }
            if on { &mut set_on } else { &mut set_off }.push(name);
        }
        for (flag, names) in [(&b"-s"[..], &set_on), (b"-u", &set_off)] {
            if !names.is_empty() {
                s.extend_from_slice(b"\\builtin shopt ");
                s.extend_from_slice(flag);
                for name in names {
                    s.push(b' ');
                    s.extend_from_slice(name);
                }
                s.push(b'\n');
            }
        }
        // An option with a letter is as `$-` of the shell itself shows
        // it (a subshell clears some, such as `-e` and `-v`).
        if !self.args.is_empty() {
            s.extend_from_slice(b"\\builtin set -- ");
            s.extend_from_slice(self.args);
            s.push(b'\n');
        }
        let set: Vec<(&[u8], bool)> = options(self.set, b"set ")
            .map(|(name, on)| {
                let letter = SET_LETTERS.iter().find(|(n, _)| n.as_bytes() == name);
                (name, letter.map_or(on, |(_, l)| self.flags.contains(l)))
            })
            .collect();
        let general: Vec<(&[u8], bool)> = set
            .iter()
            .filter(|(name, _)| {
                !NOT_KEPT_SET.iter().any(|n| n.as_bytes() == *name)
                    && !SET_LAST.iter().any(|n| n.as_bytes() == *name)
            })
            .copied()
            .collect();
        let last = SET_LAST.iter().map(|n| {
            let on = set.iter().any(|(name, on)| *name == n.as_bytes() && *on);
            (n.as_bytes(), on)
        });
        for options in [general, last.collect()] {
            if options.is_empty() {
                continue;
            }
            s.extend_from_slice(b"\\builtin set");
            for (name, on) in options {
                s.extend_from_slice(if on { b" -o " } else { b" +o " });
                s.extend_from_slice(name);
            }
            s.push(b'\n');
        }
        s
    }
}

/// The entries of a listing whose entries each start a line with `head`
/// (`declare -p`): a line that does not is the rest of the entry before
/// (a value over several lines, from a bash that prints one so).
fn entries<'a>(text: &'a [u8], head: &'a [u8]) -> impl Iterator<Item = &'a [u8]> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = 0;
        loop {
            match rest[end..].iter().position(|&b| b == b'\n') {
                Some(nl)
                    if rest[end + nl + 1..].starts_with(head) || end + nl + 1 == rest.len() =>
                {
                    let entry = &rest[..end + nl];
                    rest = &rest[end + nl + 1..];
                    return Some(entry);
                }
                Some(nl) => end += nl + 1,
                None => {
                    let entry = rest;
                    rest = &[];
                    return Some(entry);
                }
            }
        }
    })
}

/// The name in an entry `head` + flags + ` ` + name [`=` value].
fn entry_name<'a>(entry: &'a [u8], head: &[u8]) -> Option<&'a [u8]> {
    let rest = entry.strip_prefix(head)?;
    let space = rest.iter().position(|&b| b == b' ')?;
    let rest = &rest[space + 1..];
    let end = rest
        .iter()
        .position(|&b| b == b'=' || b == b'\n')
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The options of `shopt -p` or `set +o` lines (`shopt -s name`, `set
/// +o name`; `head` is `shopt ` or `set `) and whether each is on (`-s`,
/// `-o`).
fn options<'a>(text: &'a [u8], head: &'a [u8]) -> impl Iterator<Item = (&'a [u8], bool)> {
    text.split(|&b| b == b'\n').filter_map(move |line| {
        let rest = line.strip_prefix(head)?;
        let on = match rest.get(..3)? {
            b"-s " | b"-o " => true,
            b"-u " | b"+o " => false,
            _ => return None,
        };
        let name = &rest[3..];
        let plain = name
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        (!name.is_empty() && plain).then_some((name, on))
    })
}

/// One word as bash's `printf %q` writes it under `LC_ALL=C` (`''`, a
/// `$'...'` string, or backslash escapes), decoded, and the input after
/// it; `None` if it is not such a word.
fn decode_word(input: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    if let Some(rest) = input.strip_prefix(b"''") {
        return Some((Vec::new(), rest));
    }
    let mut out = Vec::new();
    if let Some(mut rest) = input.strip_prefix(b"$'") {
        loop {
            let (&c, after) = rest.split_first()?;
            rest = after;
            match c {
                b'\'' => return Some((out, rest)),
                b'\\' => {
                    let (&e, after) = rest.split_first()?;
                    rest = after;
                    let byte = match e {
                        b'a' => 0x07,
                        b'b' => 0x08,
                        b'e' | b'E' => 0x1b,
                        b'f' => 0x0c,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'v' => 0x0b,
                        b'\\' | b'\'' | b'"' | b'?' => e,
                        b'0'..=b'7' => {
                            let mut value = u32::from(e - b'0');
                            for _ in 0..2 {
                                match rest.first() {
                                    Some(&d @ b'0'..=b'7') => {
                                        value = value * 8 + u32::from(d - b'0');
                                        rest = &rest[1..];
                                    }
                                    _ => break,
                                }
                            }
                            u8::try_from(value).ok()?
                        }
                        b'x' => {
                            let mut value = 0u8;
                            let mut digits = 0;
                            while digits < 2 {
                                match rest.first().and_then(|&d| char::from(d).to_digit(16)) {
                                    Some(d) => {
                                        value = value * 16 + d as u8;
                                        rest = &rest[1..];
                                        digits += 1;
                                    }
                                    None => break,
                                }
                            }
                            if digits == 0 {
                                return None;
                            }
                            value
                        }
                        _ => return None,
                    };
                    out.push(byte);
                }
                _ => out.push(c),
            }
        }
    }
    let mut rest = input;
    while let Some((&c, after)) = rest.split_first() {
        match c {
            b' ' => break,
            b'\\' => {
                let (&e, after) = after.split_first()?;
                out.push(e);
                rest = after;
                continue;
            }
            b'\'' | b'"' => return None,
            _ => out.push(c),
        }
        rest = after;
    }
    (!out.is_empty()).then_some((out, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_decode() {
        let (w, rest) = decode_word(br"$'a\nb\303\251\'\\ c' next").unwrap();
        assert_eq!(w, b"a\nb\xc3\xa9'\\ c");
        assert_eq!(rest, b" next");
        let (w, rest) = decode_word(br"a\ b\$c\~ d").unwrap();
        assert_eq!(w, b"a b$c~");
        assert_eq!(rest, b" d");
        let (w, rest) = decode_word(b"'' x").unwrap();
        assert!(w.is_empty());
        assert_eq!(rest, b" x");
        assert!(decode_word(br"$'unterminated").is_none());
        assert!(decode_word(br"$'\q'").is_none());
    }

    #[test]
    fn variables_are_filtered_by_name() {
        let vars = b"declare -- A=\"1\"\ndeclare -ir BASHPID=\"3\"\ndeclare -- _D3f_k=\"\"\ndeclare -x PS1=\"x\"\ndeclare -a arr=([0]=\"a\")\ndeclare -- multi=\"line1\nline2\"\ndeclare -- B\n";
        let kept: Vec<&[u8]> = entries(vars, b"declare -")
            .filter(|e| entry_name(e, b"declare -").is_some_and(kept_variable))
            .collect();
        assert_eq!(
            kept,
            [
                &b"declare -- A=\"1\""[..],
                b"declare -a arr=([0]=\"a\")",
                b"declare -- multi=\"line1\nline2\"",
                b"declare -- B",
            ]
        );
    }

    #[cfg(unix)]
    mod through_bash {
        use super::super::decode_word;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(32))]

            /// Any bytes (but NUL) quoted by bash's `printf %q` under
            /// `LC_ALL=C` decode back to themselves.
            #[test]
            fn printf_q_decodes(bytes in proptest::collection::vec(1u8..=255, 0..40)) {
                let arg: std::ffi::OsString = std::os::unix::ffi::OsStringExt::from_vec(bytes.clone());
                let out = std::process::Command::new("bash")
                    .args(["--norc", "--noprofile", "-c", "LC_ALL=C printf %q \"$1\"", "bash"])
                    .arg(arg)
                    .output()
                    .unwrap();
                prop_assert!(out.status.success());
                let (word, rest) = decode_word(&out.stdout).unwrap();
                prop_assert!(rest.is_empty());
                prop_assert_eq!(word, bytes);
            }
        }
    }
}
