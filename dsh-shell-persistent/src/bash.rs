//! The bash wrapper: what the tool types into bash for each call, built so
//! that nothing the model's command leaves behind can make it run something
//! else, hide its prompt, or hang it.
//!
//! The shell's init line defines six functions with random names (the
//! prologue in two forms, the one that keeps the status and its rare path,
//! the epilogue and its rare repair path), parsed once and made read-only
//! (`readonly -f`): a command cannot redefine, unset or replace them, so a
//! call through their random names (with `\` before it, so no alias)
//! reaches them whatever the command defined. The init line ends by entering POSIX mode
//! (`POSIXLY_CORRECT` set to the random stem of the protocol's names unless
//! the user set it; it is set exactly when bash is in POSIX mode), and so
//! does every call's epilogue: bash waits for each call line in POSIX mode,
//! where it does not expand aliases of reserved words and finds special
//! builtins (`eval`, `exec`, `set`, `unset`) before functions. One call is
//! then one physical line, parsed once, before any of it runs (so `set -v`
//! never echoes it):
//!
//! 1. assignments only (nothing is looked up): the prologue's flag cleared,
//!    the call's abandon tag, the command (with a call of the prologue
//!    before it, and a final newline: two after a final backslash, see
//!    [`command_end`]) into a variable, and the next call's start marker
//!    (`PS0`). An assignment that fails abandons the line, so a stale tag
//!    then shows that it failed.
//! 2. after a call whose status was 2, a throwaway `[[` (below).
//! 3. `\eval` of the command variable, whose prologue sets the abandon
//!    prompt, restores the user's `PROMPT_COMMAND`, `set -x`/`-v` (its
//!    traced form, called only when the last call left one on or did not
//!    end through its epilogue) and POSIX mode and raises the flag, so the
//!    command runs exactly as the user left the shell. A syntax error in it
//!    ends only this `eval`.
//! 4. a function called with standard error closed that keeps the status
//!    and the options, turns `set -x`/`-v` off, so no later step is traced
//!    or echoed, and assigns every variable the protocol writes in one
//!    statement: an assignment to a read-only variable abandons the rest of
//!    the line (the abandon prompt then shows the tag `p` it set first), so
//!    the tag it sets last (`q` and the attributes of a set
//!    `POSIXLY_CORRECT` and `PS0`) shows that all went through.
//!    With `set -x`/`-v`/`-e` on or after status 2 it calls its rare path,
//!    which turns `-x`/`-v` off, notes the three in the repair flags and
//!    the tag (so that the epilogue takes its repair path) and, after
//!    status 2, parses an empty `eval` in POSIX mode, which clears what a
//!    syntax error left in bash's parser (else the next prompt shows a
//!    stale `PS1`).
//! 5. the epilogue, called with the end prompt, one statement: if the
//!    prologue ran, the tag is exactly `q` and every standard stream is the
//!    terminal, it makes `PS1` the end marker and the
//!    status and enters POSIX mode; else it calls its repair path, which
//!    prints a fatal marker through `${unset?word}` if a protocol variable
//!    is read-only (the tag does not start with `q` or has an `r`) or the
//!    prologue did not run or could not restore POSIX mode (`eval`, `set`
//!    or `unset` disabled), points standard input, output and error back at
//!    the terminal (in POSIX mode just for that `exec`), and makes `PS1`
//!    the end marker, the repair flags (`T`: `set -x`/`-v` on, `E`: `set
//!    -e` on, and the streams it reopened) and the status, entering POSIX
//!    mode.
//!
//! When the previous call did not come back through its epilogue (bash
//! abandoned its line, or it was ended by the timeout or cancelled), bash
//! may wait outside POSIX mode, where an alias of `{` would expand in the
//! line: that line enters POSIX mode in its first assignments and runs
//! steps 3 to 5 through `\eval '…'`, parsed once it is in POSIX mode.
//! After a `[[` syntax error, bash 5.x fails to parse the next `[[` once;
//! the throwaway of step 2 takes that failure, in POSIX mode.
//!
//! Inside the functions a `DEBUG` trap does not fire (unless `functrace` or
//! `extdebug` is on), and their text is never parsed again. bash copies a
//! function's body at every call, so the common path's bodies are kept
//! small and each rare path is a function of its own.
//!
//! While the command runs, `PS1` is the *abandon prompt*: the shell's marker
//! prefix and abandon id, `${tag}` and `$?`, expanded when bash shows it. If
//! bash abandons the line (`SIGINT`, `set -u`, an error in a special builtin),
//! that prompt reports the status at once, and the tag says whether it was
//! this call (`k<call id>`), an epilogue step (a letter), or another bash
//! that inherited the exported `PS1` (empty: `exec bash`). Stored prompt values
//! carry one character as an octal escape, so `echo $PS1`, `set` or `env`
//! never print a marker; only the prompt itself does.

use crate::dialect::{CallIds, CommandSource};
use crate::marker::Prompt;
use crate::quote::{bash_ansi_c, push_ansi_c_body, split_token};

/// The first letter of a call's abandon tag; the call's id follows.
const CALL_TAG: char = 'k';

/// What a prompt the scanner found means for the call: decided once, from
/// which prompt it is and its tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// This call's end prompt, with what the epilogue repaired.
    End(Repairs),
    /// This call's abandon prompt: bash abandoned the line (if the shell
    /// itself waits at it; a command may print it).
    Abandoned,
    /// A fatal marker: the protocol stopped itself.
    Fatal(Fatal),
    /// The previous call's end prompt, or an earlier call's abandon prompt:
    /// none of this call's wrapper ran.
    Stale,
    /// The tag was not expanded: prompt expansion is off.
    NoPromptExpansion,
    /// An abandon prompt without a tag: a bash that inherited the exported
    /// prompt but not the tag (the shell itself, if it was replaced).
    Inherited,
    /// An abandon prompt with another tag: nothing to act on.
    Other,
}

impl Seen {
    /// What prompt `which` with `tag` means for the call `call_id`.
    pub(crate) fn of(which: Prompt, tag: &str, call_id: &str) -> Seen {
        match which {
            Prompt::End => Seen::End(Repairs::parse(tag)),
            Prompt::Stale => Seen::Stale,
            Prompt::Abandon => {
                if let Some(fatal) = Fatal::from_tag(tag) {
                    Seen::Fatal(fatal)
                } else if tag.starts_with("${") {
                    Seen::NoPromptExpansion
                } else if tag.is_empty() {
                    Seen::Inherited
                } else if let Some(call) = tag.strip_prefix(CALL_TAG) {
                    if call == call_id {
                        Seen::Abandoned
                    } else {
                        Seen::Stale
                    }
                } else {
                    Seen::Other
                }
            }
        }
    }
}

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
    const HEAD: &str = "bash: _D";
    const TAIL: &str = "_z: ";
    let Some(i) = text.rfind(HEAD) else {
        return;
    };
    let tail = &text[i..];
    if tail.len() == HEAD.len() + STEM_HEX + TAIL.len() && tail.ends_with(TAIL) {
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
    /// `set -x` or `set -v` is on: the next call's prologue turns it back
    /// on.
    pub(crate) traced: bool,
}

impl Repairs {
    pub(crate) fn parse(flags: &str) -> Repairs {
        Repairs {
            stdin: flags.contains('i'),
            stdout: flags.contains('o'),
            stderr: flags.contains('e'),
            errexit: flags.contains('E'),
            traced: flags.contains('T'),
        }
    }
}

/// The protocol's variables (and its three functions): each shell's names
/// are its random stem and the letter here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Var {
    /// The user's `PROMPT_COMMAND`, kept while the tool's runs.
    UserPromptCommand = b'u',
    /// The letters of the streams the epilogue repaired (`e`, `o`, `i`) and `E` for `set -e`.
    Repaired = b'f',
    /// The command's status.
    Status = b's',
    /// What the abandon prompt shows: `k<call id>` while the command runs, a letter in the epilogue.
    Tag = b'k',
    /// `1` once the prologue ran: the epilogue's test.
    PrologueRan = b'c',
    /// The call's command, with the prologue's call before it.
    Command = b'm',
    /// The abandon prompt, installed as `PS1` by the prologue.
    AbandonPrompt = b'a',
    /// Never set: `${unset?word}` prints the fatal markers.
    Unset = b'z',
    /// Assigned only to expand the fatal markers.
    Sink = b'y',
    /// The shell's options (`$-`) when the command ended: the prologue of
    /// the next call turns `set -x` and `set -v` back on from it.
    Options = b'o',
    /// The prologue function.
    Prologue = b'P',
    /// The prologue that first turns `set -x` and `set -v` back on.
    PrologueTraced = b'X',
    /// The epilogue function.
    Epilogue = b'E',
    /// The function that keeps the command's status and options, first
    /// after the command, with standard error closed.
    Ended = b'Q',
    /// The epilogue's rare path: reopens standard streams on the terminal
    /// and shows the repair flags.
    Repair = b'R',
    /// The status keeper's rare path: turns `set -x` and `set -v` off, notes
    /// them and `set -e` and, after status 2, resets bash's parser, in POSIX
    /// mode.
    Settle = b'W',
}

/// How many random hex digits the protocol's names carry: few, since bash
/// lexes each name in the call line and prints each statement it runs into
/// `BASH_COMMAND` (a digit less is about 3k instructions less a call). They
/// are random so that no script's own names meet them by chance; no
/// guarantee rests on them being secret (`set` lists them), but on the
/// functions being read-only and the variables checked at every call.
pub(crate) const STEM_HEX: usize = 2;

/// One shell's protocol: its marker prefix, abandon id and variable names.
#[derive(Debug, Clone)]
pub(crate) struct Protocol {
    prefix: String,
    abandon: String,
    /// `_D` + [`STEM_HEX`] random hex digits + `_`: the variables' common
    /// stem.
    stem: String,
}

impl Protocol {
    /// `prefix` and `abandon` are 16 hex digits, `stem_hex` [`STEM_HEX`].
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

    /// The name of protocol variable `var` in this shell.
    pub(crate) fn var(&self, var: Var) -> String {
        let mut name = String::with_capacity(self.stem.len() + 1);
        self.push_var(&mut name, var);
        name
    }

    /// The prompt-string form of a marker: the full text, one character
    /// written as an octal escape that bash decodes only when it shows the
    /// prompt.
    fn prompt_form(&self, id: &str) -> String {
        let mut form = String::with_capacity(self.prefix.len() + id.len() + 3);
        self.push_prompt_form(&mut form, id);
        form
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
        let abandon_prompt = format!(
            "{}${{{}}}:$?#",
            self.prompt_form(&self.abandon),
            v(Var::Tag)
        );
        let functions = format!(
            "{pre}() {{\n{prec}}}\n{pret}() {{\n{pretc}}}\n{ended}() {{\n{endedc}}}\n{settle}() {{\n{settlec}}}\n{post}() {{\n{postc}}}\n{repair}() {{\n{repairc}}}\n",
            pre = v(Var::Prologue),
            prec = self.prologue(false),
            pret = v(Var::PrologueTraced),
            pretc = self.prologue(true),
            ended = v(Var::Ended),
            endedc = self.ended(),
            settle = v(Var::Settle),
            settlec = self.settle(),
            post = v(Var::Epilogue),
            postc = self.epilogue(),
            repair = v(Var::Repair),
            repairc = self.repair(),
        );
        format!(
            "set +o history +H; unset HISTFILE PS0 PS1 PS2 PROMPT_COMMAND; PS2=; {u}= {f}= {s}=0 {k}= {c}=0 {m}= {o}=; {a}={ap}; \\eval {functions}; readonly -f {pre} {pret} {ended} {settle} {post} {repair}; export PS1; PS0={ps0}; PS1={ready} {enter}\n",
            enter = self.enter_posix(),
            u = v(Var::UserPromptCommand),
            f = v(Var::Repaired),
            s = v(Var::Status),
            k = v(Var::Tag),
            c = v(Var::PrologueRan),
            m = v(Var::Command),
            o = v(Var::Options),
            a = v(Var::AbandonPrompt),
            ap = bash_ansi_c(&abandon_prompt),
            functions = bash_ansi_c(&functions),
            pre = v(Var::Prologue),
            pret = v(Var::PrologueTraced),
            ended = v(Var::Ended),
            settle = v(Var::Settle),
            post = v(Var::Epilogue),
            repair = v(Var::Repair),
            ps0 = bash_ansi_c(&self.prompt_form(first_start)),
            ready = split_token(ready),
        )
    }

    /// The assignment that enters POSIX mode (nothing is looked up): a
    /// `POSIXLY_CORRECT` the user set keeps its value (it is set exactly
    /// when bash is in POSIX mode: `set -o posix` sets it, `set +o posix`
    /// unsets it), an unset one becomes the stem, which tells
    /// [`Protocol::restore_posix`] to leave POSIX mode again.
    fn enter_posix(&self) -> String {
        let mut text = String::new();
        self.push_enter_posix(&mut text);
        text
    }

    /// Appends [`Protocol::enter_posix`].
    fn push_enter_posix(&self, line: &mut String) {
        line.push_str("POSIXLY_CORRECT=${POSIXLY_CORRECT-");
        line.push_str(&self.stem);
        line.push('}');
    }

    /// Back to the mode [`Protocol::enter_posix`] found (run while still in
    /// POSIX mode, so `set` and `unset` are the builtins): out of POSIX mode
    /// if it put the stem there, else nothing to do. Unsetting
    /// `POSIXLY_CORRECT` leaves POSIX mode; `set +o posix` (which also
    /// rebuilds `SHELLOPTS`, about 7k instructions more) only if `unset` is
    /// disabled.
    fn restore_posix(&self) -> String {
        format!(
            "case ${{POSIXLY_CORRECT-}} in {}) unset POSIXLY_CORRECT || set +o posix;; esac",
            self.stem
        )
    }

    /// Runs in POSIX mode before the command and leaves it as the user had
    /// it, first: should a later assignment fail, the command still runs in
    /// the user's mode. The `traced` form ([`Var::PrologueTraced`]) first
    /// turns `set -x` and `set -v` back on as the last command left them;
    /// the library calls it only when the last end prompt said one was on
    /// ([`Repairs::traced`]) or the last call did not end through its
    /// epilogue, so the common form skips that test (about 9k instructions
    /// a call).
    fn prologue(&self, traced: bool) -> String {
        let v = |c| self.var(c);
        let o = v(Var::Options);
        let trace = if traced {
            format!("case ${o} in *[xv]*) set -${{{o}//[^xv]/}};; esac; ")
        } else {
            String::new()
        };
        format!(
            "{{ {trace}{restore} && {c}=1; PS1=${{{a}}} PROMPT_COMMAND=${{{u}}}; }} 2>&-\n",
            restore = self.restore_posix(),
            a = v(Var::AbandonPrompt),
            u = v(Var::UserPromptCommand),
            c = v(Var::PrologueRan),
        )
    }

    /// Runs first after the command, as `{ \ended; } 2>&-` (so that not
    /// even its call is traced): keeps the command's status (`$?` when a
    /// function starts is the status before its call) and options, and
    /// turns `set -x` and `set -v` off until the next command's prologue
    /// turns them back on, so no step of the protocol is traced or echoed.
    ///
    /// It is also the read-only check: its first statement assigns every
    /// variable the protocol writes (most the value it has, the others the
    /// empty value they need next, `PROMPT_COMMAND` after saving the user's),
    /// and an assignment to a read-only variable makes bash abandon the rest
    /// of the call line (or of the `\eval` that runs its steps), this
    /// function's remainder and the epilogue with it, and show the abandon
    /// prompt with the tag `p` (standard error is closed, so bash's message
    /// goes nowhere). Only if that
    /// statement went through does its last assignment make the tag `q`
    /// followed by the attributes of `POSIXLY_CORRECT` if it is set (an
    /// assignment would put bash in POSIX mode, so it is checked by its
    /// attributes) and of `PS0` (assigned in the call line; bash 5.2 reads
    /// freed memory when `PS0` is assigned again here after a parse that
    /// met the end of the command's text): the epilogue's common path needs
    /// exactly `q`, and its repair path stops at a tag without `q` or with
    /// `r` (read-only). With `set -x`, `-v` or `-e` on, or after status 2,
    /// it calls [`Protocol::settle`]. The last statement's status is 0 (with
    /// `set -e`, the function's status would end the shell).
    fn ended(&self) -> String {
        let v = |c| self.var(c);
        format!(
            "{k}=p {s}=$? {o}=$- {c}=${{{c}-}} {m}= {f}= {u}=${{PROMPT_COMMAND-}} PROMPT_COMMAND= PS1=${{PS1-}} {k}=q${{POSIXLY_CORRECT+${{POSIXLY_CORRECT@a}}}}${{PS0+${{PS0@a}}}}\n\
case ${o}:${s} in *[xve]*|*:2) \\{settle};; esac\n",
            k = v(Var::Tag),
            s = v(Var::Status),
            o = v(Var::Options),
            c = v(Var::PrologueRan),
            m = v(Var::Command),
            f = v(Var::Repaired),
            u = v(Var::UserPromptCommand),
            settle = v(Var::Settle),
        )
    }

    /// The rare path of [`Protocol::ended`], its own function because bash
    /// copies a function's body at every call: in POSIX mode (so `set` and
    /// `eval` are the builtins; entered unless the tag says
    /// `POSIXLY_CORRECT` is read-only, which means set, so bash is in POSIX
    /// mode already, and assigning it would abandon the line before the
    /// epilogue could report it), turns `set -x` and `set -v` off and notes
    /// them (`T`) and `set -e` (`E`) in the repair flags, adding `S` to the
    /// tag so that the epilogue takes its repair path, which shows the
    /// flags in the end prompt; after status 2 (a syntax error) parses an
    /// empty `eval`, which resets the parser state the error left (else the
    /// next prompt shows a stale `PS1`).
    fn settle(&self) -> String {
        format!(
            "case ${k} in *r*) ;; *) {enter};; esac\ncase ${o} in *[xv]*) set +xv; {f}=T {k}=${{{k}}}S;; esac\ncase ${o} in *e*) {f}=${{{f}}}E {k}=${{{k}}}S;; esac\ncase ${s} in 2) \\eval '';; esac\n{leave}\n",
            o = self.var(Var::Options),
            s = self.var(Var::Status),
            f = self.var(Var::Repaired),
            k = self.var(Var::Tag),
            enter = self.enter_posix(),
            leave = self.restore_posix(),
        )
    }

    /// Runs after the command, in the mode the command left, one statement:
    /// if the prologue ran, [`Protocol::ended`] got through its assignments
    /// (tag exactly `q`: with `set -e`, `-x` or `-v` on, [`Protocol::settle`]
    /// added to it) and every standard stream is the terminal, makes `PS1`
    /// the end marker (its argument) and the status; else
    /// calls the repair path with the end marker. Either way its status is 0
    /// (with `set -e`, the function's status would end the shell).
    fn epilogue(&self) -> String {
        format!(
            "[[ ${k}${c} == q1 && -t 2 && -t 1 && -t 0 ]] && PS1=$1:${{{s}}}# {enter} || \\{repair} \"$1\"\n",
            enter = self.enter_posix(),
            k = self.var(Var::Tag),
            c = self.var(Var::PrologueRan),
            s = self.var(Var::Status),
            repair = self.var(Var::Repair),
        )
    }

    /// The epilogue's rare path, a function of its own so that the common
    /// one is small (bash copies a function's body at every call): prints
    /// the read-only fatal marker unless [`Protocol::ended`] got through its
    /// assignments and `POSIXLY_CORRECT` is not read-only (the tag starts
    /// with `q` and has no `r`), and the fatal marker of a call whose
    /// prologue did not run or could not restore POSIX mode (`eval`, `set`
    /// or `unset` disabled); then (tag `r`: an `exec` that fails abandons
    /// the line) points standard error, output and input back at the
    /// terminal if the command moved them, entering POSIX mode just for the
    /// `exec` (the special builtin), and makes `PS1` the end marker (its
    /// argument), the repair flags (with those [`Protocol::settle`] set) and
    /// the status.
    fn repair(&self) -> String {
        let v = |c| self.var(c);
        let (f, k, z, y) = (v(Var::Repaired), v(Var::Tag), v(Var::Unset), v(Var::Sink));
        let enter = self.enter_posix();
        let leave = format!("{{ {}; }} 2>&-", self.restore_posix());
        format!(
            "[[ ${k} == q* && ${k} != *r* ]] || {y}=${{{z}?{ro}}}\n\
[[ ${c} == 1 ]] || {y}=${{{z}?{bi}}}\n\
{k}=r\n\
[[ -t 2 ]] || {{ {enter}; exec 2>/dev/tty; {leave}; {f}=${{{f}}}e; }}\n\
{{ [[ -t 1 ]] || {{ {enter}; exec 1>/dev/tty; {leave}; {f}=${{{f}}}o; }}; [[ -t 0 ]] || {{ {enter}; exec 0</dev/tty; {leave}; {f}=${{{f}}}i; }}; }} 2>&-\n\
PS1=$1${{{f}}}:${{{s}}}# {enter}\n",
            s = v(Var::Status),
            c = v(Var::PrologueRan),
            ro = self.fatal_word(Fatal::ReadOnly),
            bi = self.fatal_word(Fatal::Builtins),
        )
    }

    /// The tag the abandon prompt shows for this call.
    #[cfg(test)]
    fn abandon_tag(call_id: &str) -> String {
        format!("{CALL_TAG}{call_id}")
    }

    /// The one physical line of a call (`ids.start` was set one call
    /// ahead). The call id goes into the abandon tag;
    /// `after_syntax_error` (the previous call's status was 2) adds a
    /// throwaway `[[` in POSIX mode: after a `[[` syntax error, bash 5.x
    /// fails to parse the next `[[` once, and that should not be the model's.
    /// `in_posix` says that bash waits in POSIX mode (the previous call's
    /// epilogue ran, or the init line): the line's own `{ }` are then safe
    /// from aliases. Otherwise (a line bash abandoned, a call ended by the
    /// timeout or cancelled) the line enters POSIX mode itself and `\eval`s
    /// its steps, which bash then parses in POSIX mode. The command calls
    /// the prologue's traced form when `traced` (the last end prompt said
    /// `set -x` or `-v` was on) or not `in_posix` (no end prompt said what
    /// the options were).
    pub(crate) fn call_line(&self, source: &CommandSource<'_>, ids: &CallIds) -> String {
        let CallIds {
            call: call_id,
            end,
            next_start,
            after_syntax_error,
            in_posix,
            traced,
            ..
        } = ids;
        let (after_syntax_error, in_posix) = (*after_syntax_error, *in_posix);
        let source_len = match source {
            CommandSource::Inline(cmd) => cmd.len(),
            CommandSource::File { path, .. } => path.as_os_str().len(),
        };
        // One buffer, in the order of the line: `{c}=0 [{enter} ]{k}={tag}
        // {m}={command} PS0='{start}'; [\eval '[[ -n x ]]' 2>&-; ]{steps}`,
        // the steps `\eval "${m}"; { \{ended}; } 2>&-; \{epilogue} '{end}'`,
        // or (not `in_posix`) `\eval '{steps}'` with each `'` of the steps
        // as `'\''`.
        let mut line = String::with_capacity(source_len + source_len / 8 + 256);
        self.push_var(&mut line, Var::PrologueRan);
        line.push_str("=0 ");
        if !in_posix {
            self.push_enter_posix(&mut line);
            line.push(' ');
        }
        self.push_var(&mut line, Var::Tag);
        line.push('=');
        line.push(CALL_TAG);
        line.push_str(call_id);
        line.push(' ');
        self.push_var(&mut line, Var::Command);
        line.push('=');
        self.push_command(&mut line, source, *traced || !in_posix);
        line.push_str(" PS0='");
        self.push_prompt_form(&mut line, next_start);
        line.push_str("'; ");
        if after_syntax_error {
            line.push_str("\\eval '[[ -n x ]]' 2>&-; ");
        }
        let quote = if in_posix {
            "'"
        } else {
            line.push_str("\\eval '");
            "'\\''"
        };
        line.push_str("\\eval \"$");
        self.push_var(&mut line, Var::Command);
        line.push_str("\"; { \\");
        self.push_var(&mut line, Var::Ended);
        line.push_str("; } 2>&-; \\");
        self.push_var(&mut line, Var::Epilogue);
        line.push(' ');
        line.push_str(quote);
        self.push_prompt_form(&mut line, end);
        line.push_str(quote);
        if !in_posix {
            line.push('\'');
        }
        line.push('\n');
        line
    }

    /// Appends the name of protocol variable `var` (as [`Protocol::var`]).
    fn push_var(&self, line: &mut String, var: Var) {
        line.push_str(&self.stem);
        line.push(char::from(var as u8));
    }

    /// Appends the command word of a call line: the prologue's call and the
    /// command, ANSI-C quoted (a file: its contents read by bash), and
    /// [`command_end`].
    fn push_command(&self, line: &mut String, source: &CommandSource<'_>, traced: bool) {
        let mut head = String::with_capacity(self.stem.len() + 3);
        head.push('\\');
        let prologue = if traced {
            Var::PrologueTraced
        } else {
            Var::Prologue
        };
        self.push_var(&mut head, prologue);
        head.push('\n');
        match source {
            CommandSource::Inline(cmd) => {
                line.push_str("$'");
                push_ansi_c_body(line, &head);
                push_ansi_c_body(line, cmd);
                push_ansi_c_body(line, command_end(cmd));
                line.push('\'');
            }
            CommandSource::File { path, command } => {
                line.push_str("$'");
                push_ansi_c_body(line, &head);
                line.push_str("'\"$(< $'");
                push_ansi_c_body(line, &path.to_string_lossy());
                line.push_str("')\"$'");
                // `$(< )` drops the file's final newlines.
                push_ansi_c_body(line, command_end(command.trim_end_matches('\n')));
                line.push('\'');
            }
        }
    }

    /// Appends [`Protocol::prompt_form`] of `id`.
    fn push_prompt_form(&self, line: &mut String, id: &str) {
        let (head, rest) = self.prefix.split_at(8);
        line.push_str(head);
        // The first character of `rest` then `id` in octal, then the others.
        let (c, rest, id) = match (rest.chars().next(), id.chars().next()) {
            (Some(c), _) => (u32::from(c), &rest[c.len_utf8()..], id),
            (None, Some(c)) => (u32::from(c), rest, &id[c.len_utf8()..]),
            (None, None) => (0, rest, id),
        };
        line.push('\\');
        for shift in [6, 3, 0] {
            line.push(char::from(b'0' + ((c >> shift) & 7) as u8));
        }
        line.push_str(rest);
        line.push_str(id);
    }
}

/// What ends the command text the prologue's `\eval` runs: a newline, and
/// a second one after a final backslash, so that the command ends at a
/// newline rather than at the end of the string. bash 5.2 keeps the last
/// token of a parse that met the end of an `eval`'d string inside a
/// command, and the next prompt then shows a stale `PS1`.
fn command_end(text: &str) -> &'static str {
    if text.ends_with('\\') { "\n\n" } else { "\n" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_prompt_means_one_thing() {
        let call = "0123abcd";
        let tag = Protocol::abandon_tag(call);
        let cases = [
            (Prompt::End, "", Seen::End(Repairs::default())),
            (
                Prompt::End,
                "oE",
                Seen::End(Repairs {
                    stdout: true,
                    errexit: true,
                    ..Repairs::default()
                }),
            ),
            (Prompt::Stale, "", Seen::Stale),
            (Prompt::Abandon, tag.as_str(), Seen::Abandoned),
            (Prompt::Abandon, "kffffffff", Seen::Stale),
            (Prompt::Abandon, "x", Seen::Fatal(Fatal::Builtins)),
            (Prompt::Abandon, "p", Seen::Fatal(Fatal::ReadOnly)),
            (Prompt::Abandon, "r", Seen::Fatal(Fatal::Epilogue)),
            (Prompt::Abandon, "${_D0_k}", Seen::NoPromptExpansion),
            (Prompt::Abandon, "", Seen::Inherited),
            (Prompt::Abandon, "zz", Seen::Other),
        ];
        for (which, tag, want) in cases {
            assert_eq!(Seen::of(which, tag, call), want, "{which:?} {tag:?}");
        }
    }
    /// The ids of one call (the start id is unused by the line).
    fn call_ids(
        call: &str,
        end: &str,
        next_start: &str,
        after_syntax_error: bool,
        in_posix: bool,
        traced: bool,
    ) -> CallIds {
        CallIds {
            call: call.to_owned(),
            start: String::new(),
            end: end.to_owned(),
            next_start: next_start.to_owned(),
            after_syntax_error,
            in_posix,
            traced,
        }
    }

    /// The call line as it was written with `format!`: the one-buffer
    /// version must write the same text.
    fn call_line_reference(proto: &Protocol, source: &CommandSource<'_>, ids: &CallIds) -> String {
        let (after_syntax_error, in_posix, traced) =
            (ids.after_syntax_error, ids.in_posix, ids.traced);
        let v = |c| proto.var(c);
        let prologue = v(if traced || !in_posix {
            Var::PrologueTraced
        } else {
            Var::Prologue
        });
        let command = match source {
            CommandSource::Inline(cmd) => bash_ansi_c(&format!(
                "\\{prologue}\n{cmd}\n{}",
                if cmd.ends_with('\\') { "\n" } else { "" }
            )),
            CommandSource::File { path, command } => format!(
                "{}\"$(< {})\"{}",
                bash_ansi_c(&format!("\\{prologue}\n")),
                bash_ansi_c(&path.to_string_lossy()),
                if command.trim_end_matches('\n').ends_with('\\') {
                    "$'\\n\\n'"
                } else {
                    "$'\\n'"
                }
            ),
        };
        let end = proto.prompt_form(&ids.end);
        let steps = format!(
            "\\eval \"${m}\"; {{ \\{ended}; }} 2>&-; \\{epilogue} '{end}'",
            m = v(Var::Command),
            ended = v(Var::Ended),
            epilogue = v(Var::Epilogue),
        );
        format!(
            "{c}=0 {enter}{k}={tag} {m}={command} PS0='{start}'; {throwaway}{steps}\n",
            c = v(Var::PrologueRan),
            enter = if in_posix {
                String::new()
            } else {
                format!("{} ", proto.enter_posix())
            },
            k = v(Var::Tag),
            tag = Protocol::abandon_tag(&ids.call),
            m = v(Var::Command),
            start = proto.prompt_form(&ids.next_start),
            throwaway = if after_syntax_error {
                "\\eval '[[ -n x ]]' 2>&-; "
            } else {
                ""
            },
            steps = if in_posix {
                steps
            } else {
                format!("\\eval {}", crate::quote::posix_single(&steps))
            },
        )
    }

    #[test]
    fn call_line_is_the_formatted_line() {
        let proto = Protocol::new(P, "aaaabbbbccccdddd", "1234");
        let path = std::path::Path::new("/tmp/it's \\ a\tfile\u{7f}é");
        let sources = [
            CommandSource::Inline(""),
            CommandSource::Inline("echo 'it's' \\ \"$x\"\n\tnext\r\x01\x1b[0m\x7f héllo ✓"),
            CommandSource::Inline("echo \\"),
            CommandSource::File {
                path,
                command: "echo hi",
            },
            CommandSource::File {
                path,
                command: "echo \\\n\n",
            },
        ];
        for source in &sources {
            let flags = (0..8).map(|n| (n & 1 != 0, n & 2 != 0, n & 4 != 0));
            for (after, in_posix, traced) in flags {
                let ids = call_ids(
                    "0123abcd",
                    "feedface01234567",
                    "9876543210abcdef",
                    after,
                    in_posix,
                    traced,
                );
                let got = proto.call_line(source, &ids);
                let want = call_line_reference(&proto, source, &ids);
                assert_eq!(got, want, "{source:?} {after} {in_posix} {traced}");
            }
        }
    }

    use crate::quote::has_control;

    const P: &str = "0123456789abcdef";

    #[test]
    fn no_line_holds_a_whole_marker() {
        let proto = Protocol::new(P, "aaaabbbbccccdddd", "1234");
        let ids = ["1111222233334444", "5555666677778888", "9999000011112222"];
        let init = proto.init_line(ids[0], ids[1]);
        let lines = [true, false].map(|in_posix| {
            proto.call_line(
                &CommandSource::Inline("echo 'it's"),
                &call_ids("c0ffee00", ids[1], ids[2], true, in_posix, false),
            )
        });
        for text in [&init, &lines[0], &lines[1]] {
            assert_eq!(text.matches('\n').count(), 1, "{text}");
            assert!(!has_control(text.trim_end_matches('\n')), "{text:?}");
            for id in ids.iter().chain(["aaaabbbbccccdddd"].iter()) {
                assert!(!text.contains(&format!("{P}{id}")), "{text}");
            }
        }
    }

    #[test]
    fn the_prompt_form_escapes_one_character() {
        let proto = Protocol::new(P, "aaaabbbbccccdddd", "1234");
        assert_eq!(proto.prompt_form("ffff"), r"01234567\0709abcdefffff");
        assert_eq!(Fatal::from_tag("p"), Some(Fatal::ReadOnly));
        let mut text = "bash: eval: command not found\nbash: _D0a_z: ".to_owned();
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
        assert_eq!(
            Repairs::parse("TEi"),
            Repairs {
                stdin: true,
                errexit: true,
                traced: true,
                ..Repairs::default()
            }
        );
    }
}
