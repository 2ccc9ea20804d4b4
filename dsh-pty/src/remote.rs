//! What backends whose programs run elsewhere (a container, another host)
//! need to reach a session's processes there: a POSIX `sh` script, run next
//! to them with the session's user, that finds and signals them through
//! that side's `/proc`.
//!
//! Every process of a session carries [`TAG_VAR`]`=<random tag>` in its
//! environment: the backend sets it on the program it starts, and
//! everything the program starts inherits it, including processes that
//! `setsid` or double-fork away from the terminal's session. The script
//! finds the session leader (the tagged process that leads its terminal
//! session and whose parent is not tagged), then treats as members every live process that is
//! tagged *or* belongs to the leader's terminal session. A process that both
//! leaves the session and clears its environment escapes it.

/// The environment variable that tags a session's processes.
pub const TAG_VAR: &str = "DSH_TREE";

/// A new random session tag: 16 hexadecimal digits.
pub fn new_tag() -> Result<String, crate::PtyError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| crate::PtyError::Io {
        what: "drawing a random session tag",
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The end of a helper's standard error (at most 500 bytes), trimmed, as
/// text for an error message.
pub fn tail_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    let mut start = text.len().saturating_sub(500);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_owned()
}

/// `sh -c SCRATCH_SCRIPT sh <dir> <name>`, standard input the content:
/// writes a scratch file readable by the session's user only (see
/// [`crate::PtySession::put_scratch_file`]).
pub const SCRATCH_SCRIPT: &str = r#"umask 077 && mkdir -p -- "$1" && cat > "$1/$2""#;

/// The directory [`TREE_SCRIPT`] removes at the end of a session: the
/// session's scratch files (see [`crate::PtySession::put_scratch_file`]).
pub fn scratch_dir(tag: &str) -> String {
    format!("/tmp/.dsh-{tag}")
}

/// `sh -c TREE_SCRIPT sh <tag> <op> <arg> <scratch dir>`; ops:
/// * `leader`: prints the leader's pid on that side;
/// * `fg SIG`: sends `SIG` to the terminal's foreground process group;
/// * `tree TENTHS`: `SIGTERM` to every member and `SIGHUP` to the leader,
///   up to `TENTHS` tenths of a second for them to leave, then `SIGSTOP` and
///   `SIGKILL` to what is left (twice, for processes forked meanwhile), then
///   removes the scratch directory. `tree 0` skips the polite part.
pub const TREE_SCRIPT: &str = r#"t="DSH_TREE=$1" op=$2 arg=$3 dir=$4 L=
tagged() { case $(cat "$1/environ" 2>/dev/null) in *"$t"*) return 0;; esac; return 1; }
for d in /proc/[0-9]*; do
  read -r s < "$d/stat" 2>/dev/null || continue
  set -- ${s##*) }
  [ "$4" = "${d#/proc/}" ] && tagged "$d" && ! tagged "/proc/$2" && { L=${d#/proc/}; break; }
done
members() {
  n=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$$" ] && continue
    read -r s < "$d/stat" 2>/dev/null || continue
    set -- "$1" ${s##*) }
    case $2 in Z|X) continue;; esac
    { [ -n "$L" ] && [ "$5" = "$L" ]; } || tagged "$d" || continue
    n=$((n+1))
    [ -n "$1" ] && kill "-$1" "$p" 2>/dev/null
  done
  [ "$n" -gt 0 ]
}
case $op in
leader) [ -n "$L" ] && echo "$L" ;;
fg)
  [ -n "$L" ] || exit 3
  read -r s < "/proc/$L/stat" || exit 3
  set -- ${s##*) }
  kill "-$arg" -- "-$6" 2>/dev/null || kill "-$arg" "$L" ;;
tree)
  if [ "$arg" -gt 0 ]; then
    members TERM
    [ -n "$L" ] && kill -HUP "$L" 2>/dev/null
    i=0
    while [ "$i" -lt "$arg" ] && members ""; do
      sleep 0.1 2>/dev/null || sleep 1
      i=$((i+1))
    done
  fi
  for round in 1 2; do members STOP; members KILL; done
  [ -n "$dir" ] && rm -rf -- "$dir"
  : ;;
esac
"#;

/// `sh -c FOREGROUND_SCRIPT sh <tag>`: answers, for each line read on its
/// standard input, one line `<foreground pgid> <leader pid> <waiting>` about
/// the terminal of the session tagged `<tag>` (found as [`TREE_SCRIPT`]
/// finds it, retried for up to two seconds): the terminal's foreground
/// process group (`tpgid` of the leader), the leader, and `1` when a
/// process of that group sleeps in a read of the terminal (a `read` on it,
/// or a `poll`/`select` while its standard input is the terminal), as Linux
/// shows in `/proc/<pid>/syscall` (x86-64 and AArch64 numbers). It ends at
/// end-of-file or when the leader is gone; `-` answers mean "not found".
pub const FOREGROUND_SCRIPT: &str = r#"t="DSH_TREE=$1" L=
tagged() { case $(cat "$1/environ" 2>/dev/null) in *"$t"*) return 0;; esac; return 1; }
i=0
while [ -z "$L" ] && [ "$i" -lt 40 ]; do
  for d in /proc/[0-9]*; do
    read -r s < "$d/stat" 2>/dev/null || continue
    set -- ${s##*) }
    [ "$4" = "${d#/proc/}" ] && tagged "$d" && ! tagged "/proc/$2" && { L=${d#/proc/}; break; }
  done
  [ -n "$L" ] || { sleep 0.05 2>/dev/null || sleep 1; }
  i=$((i+1))
done
tty=$(readlink "/proc/$L/fd/0" 2>/dev/null)
case $(uname -m) in
  x86_64) rd=" 0 19 17 " pl=" 7 23 270 271 " ;;
  aarch64) rd=" 63 65 67 " pl=" 72 73 " ;;
  *) rd=" " pl=" " ;;
esac
while read -r q; do
  if [ -z "$L" ] || ! read -r s < "/proc/$L/stat" 2>/dev/null; then echo "- - 0"; continue; fi
  set -- ${s##*) }
  tp=$6 w=0
  for d in /proc/[0-9]*; do
    read -r s < "$d/stat" 2>/dev/null || continue
    set -- ${s##*) }
    [ "$3" = "$tp" ] && [ "$1" = S ] || continue
    read -r nr fd rest < "$d/syscall" 2>/dev/null || continue
    case $rd in *" $nr "*) f=$((fd)) ;; *) case $pl in *" $nr "*) f=0 ;; *) continue ;; esac ;; esac
    x=$(readlink "$d/fd/$f" 2>/dev/null)
    if [ "$x" = "$tty" ] || [ "$x" = /dev/tty ]; then w=1; break; fi
  done
  echo "$tp $L $w"
done
"#;
