//! The bash wrapper: what the tool types into bash for each call, built so
//! that nothing the model's command leaves behind can make it run something
//! else, hide its prompt, or hang it.
//!
//! The shell's init line defines two functions with random names, the
//! prologue and the epilogue, parsed once. One call is then one physical
//! line of three statements:
//!
//! 1. assignments only (nothing is looked up): the saved `POSIXLY_CORRECT`,
//!    `POSIXLY_CORRECT=y`, the call's abandon tag, and the command (with a
//!    call of the prologue before it) into a variable. An assignment that
//!    fails abandons the line, so a stale tag then shows that it failed. In
//!    POSIX mode bash finds special builtins (`eval`, `exec`, `set`, `unset`)
//!    before functions and does not expand aliases of reserved words, and
//!    `\eval` skips aliases, so no function, alias or hijack reaches the
//!    wrapper.
//! 2. `\eval` of: the next call's start marker (`PS0`); an inner `\eval` of
//!    the command variable, whose prologue sets the abandon prompt, restores
//!    the user's `PROMPT_COMMAND` and POSIX mode and raises a flag, so the
//!    command runs exactly as the user left the shell; the status; the
//!    epilogue; the end prompt. The outer `eval` goes on after a syntax error
//!    in the inner one, and its parse resets bash's prompt state. The
//!    epilogue points standard input, output and error back at the terminal
//!    if the command moved them (in POSIX mode just for that `exec`), notes
//!    `set -e`, and checks that no variable the protocol writes was made
//!    read-only. `PS1` becomes the end marker, the repair flags and the status.
//! 3. `(( flag )) ||` a fatal marker printed through `${unset?word}`, which
//!    looks nothing up: the prologue did not run (`eval` disabled) or could
//!    not restore POSIX mode (`set` and `unset` disabled).
//!
//! Inside the two functions a `DEBUG` trap does not fire (unless `functrace`
//! or `extdebug` is on), and their text is never parsed again.
//!
//! While the command runs, `PS1` is the *abandon prompt*: the shell's marker
//! prefix and abandon id, `${tag}` and `$?`, expanded when bash shows it. If
//! bash abandons the line (`SIGINT`, `set -u`, an error in a special builtin),
//! that prompt reports the status at once, and the tag says whether it was
//! this call (`k<call id>`), an epilogue step (a letter), or another bash
//! that inherited the exported `PS1` (empty: `exec bash`). Stored prompt values
//! carry one character as an octal escape, so `echo $PS1`, `set` or `env`
//! never print a marker; only the prompt itself does.

use crate::dialect::CommandSource;
use crate::quote::{bash_ansi_c, split_token};

/// Why the epilogue (or the line) stopped: the tag letter of a fatal marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fatal {
    /// The prologue did not run or could not restore POSIX mode: `eval`,
    /// `set` or `unset` is disabled (`enable -n`).
    Builtins,
    /// A variable the protocol writes (a prompt variable or one of its own)
    /// is read-only.
    ReadOnly,
    /// An epilogue step failed and bash abandoned the line.
    Epilogue,
}

impl Fatal {
    fn letter(self) -> char {
        match self {
            Fatal::Builtins => 'x',
            Fatal::ReadOnly => 'p',
            Fatal::Epilogue => 'r',
        }
    }

    pub(crate) fn from_tag(tag: &str) -> Option<Fatal> {
        [Fatal::Builtins, Fatal::ReadOnly, Fatal::Epilogue]
            .into_iter()
            .find(|f| tag.len() == 1 && tag.starts_with(f.letter()))
    }
}

/// Removes what bash printed around a fatal marker (`bash: <variable>: `)
/// from the end of a result: the tool's own diagnostics are not output.
pub(crate) fn strip_fatal_residue(text: &mut String) {
    const SHAPE: &str = "bash: _D01234567_z: ";
    let Some(i) = text.rfind("bash: _D") else {
        return;
    };
    let tail = &text[i..];
    if tail.len() == SHAPE.len() && tail.ends_with("_z: ") {
        text.truncate(i);
        if text.ends_with('\n') {
            text.pop();
        }
    }
}

/// What the epilogue repaired or noticed: the letters before the status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Repairs {
    /// Standard input did not read the terminal and was reopened on it.
    pub(crate) stdin: bool,
    /// Standard output did not go to the terminal and was reopened on it.
    pub(crate) stdout: bool,
    /// Standard error did not go to the terminal and was reopened on it.
    pub(crate) stderr: bool,
    /// `set -e` is on: the shell exits when a later command fails.
    pub(crate) errexit: bool,
}

impl Repairs {
    pub(crate) fn parse(flags: &str) -> Repairs {
        Repairs {
            stdin: flags.contains('i'),
            stdout: flags.contains('o'),
            stderr: flags.contains('e'),
            errexit: flags.contains('E'),
        }
    }
}

/// One shell's protocol: its marker prefix, abandon id and variable names.
#[derive(Debug, Clone)]
pub(crate) struct Protocol {
    prefix: String,
    abandon: String,
    /// `_D` + 8 random hex digits + `_`: the variables' common stem.
    stem: String,
}

impl Protocol {
    /// `prefix` and `abandon` are 16 hex digits, `stem_hex` 8.
    pub(crate) fn new(prefix: &str, abandon: &str, stem_hex: &str) -> Protocol {
        Protocol {
            prefix: prefix.to_owned(),
            abandon: abandon.to_owned(),
            stem: format!("_D{stem_hex}_"),
        }
    }

    /// A full marker: the prefix and `id`.
    pub(crate) fn marker(&self, id: &str) -> String {
        format!("{}{id}", self.prefix)
    }

    /// The prefix every marker of this shell starts with.
    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The abandon prompt's id.
    pub(crate) fn abandon_id(&self) -> &str {
        &self.abandon
    }

    /// The name of protocol variable `c` in this shell.
    pub(crate) fn var(&self, c: char) -> String {
        format!("{}{c}", self.stem)
    }

    /// The prompt-string form of a marker: the full text, one character
    /// written as an octal escape that bash decodes only when it shows the
    /// prompt.
    fn prompt_form(&self, id: &str) -> String {
        let marker = format!("{}{id}", self.prefix);
        let (head, rest) = marker.split_at(8);
        let mut chars = rest.chars();
        let c = chars.next().map_or(0, u32::from);
        format!("{head}\\{c:03o}{}", chars.as_str())
    }

    /// The text `${unset?word}` prints for a fatal stop: the abandon marker,
    /// its letter and a status, written in pieces.
    fn fatal_word(&self, fatal: Fatal) -> String {
        format!(
            "{}{}:0#",
            split_token(&format!("{}{}", self.prefix, self.abandon)),
            fatal.letter()
        )
    }

    /// The line written once after spawning: it installs the protocol (the
    /// prologue and epilogue as functions, parsed once) and answers with a
    /// prompt showing the `ready` marker (a full marker); `first_start` is
    /// the first call's start id.
    pub(crate) fn init_line(&self, ready: &str, first_start: &str) -> String {
        let v = |c| self.var(c);
        let abandon_prompt = format!("{}${{{}}}:$?#", self.prompt_form(&self.abandon), v('k'));
        let functions = format!(
            "{pre}() {{\n{prec}}}\n{post}() {{\n{postc}}}\n",
            pre = v('P'),
            prec = self.prologue(),
            post = v('E'),
            postc = self.epilogue(),
        );
        format!(
            "set +o history +H; unset HISTFILE PS0 PS1 PS2 PROMPT_COMMAND; PS2=; {u}= {f}= {s}=0 {k}= {c}=0 {q}= {w}= {m}=; {a}={ap}; \\eval {functions}; export PS1; PS0={ps0}; PS1={ready}\n",
            u = v('u'),
            f = v('f'),
            s = v('s'),
            k = v('k'),
            c = v('c'),
            q = v('q'),
            w = v('w'),
            m = v('m'),
            a = v('a'),
            ap = bash_ansi_c(&abandon_prompt),
            functions = bash_ansi_c(&functions),
            ps0 = bash_ansi_c(&self.prompt_form(first_start)),
            ready = split_token(ready),
        )
    }

    /// Assignments that save the user's `POSIXLY_CORRECT` and enter POSIX
    /// mode (nothing is looked up).
    fn enter_posix(&self) -> String {
        format!(
            "{q}=${{POSIXLY_CORRECT+1}} {w}=${{POSIXLY_CORRECT-}} POSIXLY_CORRECT=y",
            q = self.var('q'),
            w = self.var('w')
        )
    }

    /// Back to the mode [`Protocol::enter_posix`] saved (run while still in
    /// POSIX mode, so `set` and `unset` are the builtins).
    fn restore_posix(&self) -> String {
        format!(
            "(( {q} )) && POSIXLY_CORRECT=${{{w}}} || set +o posix || unset POSIXLY_CORRECT",
            q = self.var('q'),
            w = self.var('w')
        )
    }

    /// Runs in POSIX mode before the command and leaves it as the user had
    /// it, first: should a later assignment fail, the command still runs in
    /// the user's mode.
    fn prologue(&self) -> String {
        let v = |c| self.var(c);
        format!(
            "{{ {restore} && {c}=1; PS1=${{{a}}} PROMPT_COMMAND=${{{u}}}; }} 2>&-\n",
            restore = self.restore_posix(),
            a = v('a'),
            u = v('u'),
            c = v('c'),
        )
    }

    /// Runs after the command, in the mode the command left (it enters
    /// POSIX mode only around an `exec` that repairs a stream, to find the
    /// special builtin). An error inside a function ends only the function,
    /// so the read-only check comes before any assignment to a variable the
    /// user can reach, and the body ends with a command whose status is 0
    /// (with `set -e`, the function's status would end the shell). Groups
    /// run with standard error closed (`2>&-`, cheaper than opening
    /// `/dev/null`) so `set -x` traces of the tool's steps go nowhere.
    fn epilogue(&self) -> String {
        let v = |c| self.var(c);
        let (f, k, z, y) = (v('f'), v('k'), v('z'), v('y'));
        let enter = self.enter_posix();
        let leave = format!("{{ {}; }} 2>&-", self.restore_posix());
        let watched: String = ['k', 'c', 'q', 'w', 's', 'f', 'u', 'a', 'm']
            .iter()
            .map(|&c| format!("${{{}@a}}", v(c)))
            .collect();
        let user: String = ["PS0", "PS1", "PROMPT_COMMAND", "POSIXLY_CORRECT"]
            .iter()
            .map(|name| format!("${{{name}+${{{name}@a}}}}"))
            .collect();
        format!(
            "{k}=r\n\
[[ {user}{watched} == *r* ]] && {y}=${{{z}?{ro}}}\n\
{f}=\n\
[[ -t 2 ]] || {{ {enter}; exec 2>/dev/tty; {leave}; {f}=e; }}\n\
{{ [[ -t 1 ]] || {{ {enter}; exec 1>/dev/tty; {leave}; {f}=${{{f}}}o; }}; [[ -t 0 ]] || {{ {enter}; exec 0</dev/tty; {leave}; {f}=${{{f}}}i; }}; [[ -o errexit ]] && {f}=${{{f}}}E; {u}=${{PROMPT_COMMAND-}} PROMPT_COMMAND=; }} 2>&-\n\
{k}=r\n",
            u = v('u'),
            ro = self.fatal_word(Fatal::ReadOnly),
        )
    }

    /// The tag the abandon prompt shows for this call.
    pub(crate) fn abandon_tag(call_id: &str) -> String {
        format!("k{call_id}")
    }

    /// The one physical line of a call. `call_id` goes into the abandon tag;
    /// `after_syntax_error` (the previous call's status was 2) adds a
    /// throwaway `[[` in POSIX mode: after a `[[` syntax error, bash 5.x
    /// fails to parse the next `[[` once, and that should not be the model's.
    pub(crate) fn call_line(
        &self,
        source: &CommandSource<'_>,
        call_id: &str,
        end: &str,
        next_start: &str,
        after_syntax_error: bool,
    ) -> String {
        let v = |c| self.var(c);
        let command = match source {
            CommandSource::Inline(cmd) => bash_ansi_c(&format!("\\{}\n{cmd}\n", v('P'))),
            CommandSource::File(path) => format!(
                "{}\"$(< {})\"$'\\n'",
                bash_ansi_c(&format!("\\{}\n", v('P'))),
                bash_ansi_c(&path.to_string_lossy())
            ),
        };
        let throwaway = if after_syntax_error {
            "\\eval '[[ -n x ]]' 2>&-\n"
        } else {
            ""
        };
        let outer = bash_ansi_c(&format!(
            "PS0='{start}'\n{throwaway}\\eval \"${m}\"\n{k}=p {s}=$?\n\\{e}\nPS1='{end}'\"${{{f}}}:${{{s}}}#\"\n",
            start = self.prompt_form(next_start),
            m = v('m'),
            k = v('k'),
            s = v('s'),
            e = v('E'),
            end = self.prompt_form(end),
            f = v('f'),
        ));
        format!(
            "{c}=0 {enter} {k}={tag} {m}={command}; \\eval {outer}; (( {c} )) || {y}=${{{z}?{bi}}}\n",
            c = v('c'),
            enter = self.enter_posix(),
            k = v('k'),
            tag = Self::abandon_tag(call_id),
            m = v('m'),
            y = v('y'),
            z = v('z'),
            bi = self.fatal_word(Fatal::Builtins),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quote::has_control;

    const P: &str = "0123456789abcdef";

    #[test]
    fn no_line_holds_a_whole_marker() {
        let proto = Protocol::new(P, "aaaabbbbccccdddd", "12345678");
        let ids = ["1111222233334444", "5555666677778888", "9999000011112222"];
        let init = proto.init_line(ids[0], ids[1]);
        let line = proto.call_line(
            &CommandSource::Inline("echo 'it's"),
            "c0ffee00",
            ids[1],
            ids[2],
            true,
        );
        for text in [&init, &line] {
            assert_eq!(text.matches('\n').count(), 1, "{text}");
            assert!(!has_control(text.trim_end_matches('\n')), "{text:?}");
            for id in ids.iter().chain(["aaaabbbbccccdddd"].iter()) {
                assert!(!text.contains(&format!("{P}{id}")), "{text}");
            }
        }
    }

    #[test]
    fn the_prompt_form_escapes_one_character() {
        let proto = Protocol::new(P, "aaaabbbbccccdddd", "12345678");
        assert_eq!(proto.prompt_form("ffff"), r"01234567\0709abcdefffff");
        assert_eq!(Fatal::from_tag("p"), Some(Fatal::ReadOnly));
        let mut text = "bash: eval: command not found\nbash: _D0a1b2c3d_z: ".to_owned();
        strip_fatal_residue(&mut text);
        assert_eq!(text, "bash: eval: command not found");
        assert_eq!(Fatal::from_tag("k12"), None);
        assert_eq!(
            Repairs::parse("oE"),
            Repairs {
                stdout: true,
                errexit: true,
                ..Repairs::default()
            }
        );
    }
}
