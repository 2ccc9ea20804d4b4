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

/// `sh -c TREE_SCRIPT sh <tag> <op> <arg> <scratch dir>` (needs `grep -l -e`,
/// as GNU grep and BusyBox have; BusyBox's `-F` stops at the first NUL of
/// an `environ`, its `-e` does not); ops:
/// * `leader`: prints the leader's pid on that side;
/// * `fg SIG`: sends `SIG` to the terminal's foreground process group;
/// * `tree TENTHS`: `SIGTERM` to every member and `SIGHUP` to the leader,
///   up to `TENTHS` tenths of a second for them to leave, then `SIGSTOP` and
///   `SIGKILL` to what is left (twice, for processes forked meanwhile), then
///   removes the scratch directory. `tree 0` skips the polite part.
pub const TREE_SCRIPT: &str = r#"t="DSH_TREE=$1" op=$2 arg=$3 dir=$4 L=
# One grep lists the tagged processes: no process per process checked.
tagged_list() {
  list=" "
  for f in $(grep -l -e "$t" /proc/[0-9]*/environ 2>/dev/null); do
    f=${f#/proc/}
    list="$list${f%/environ} "
  done
}
tagged_list
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  case $list in *" $p "*) ;; *) continue ;; esac
  read -r s < "$d/stat" 2>/dev/null || continue
  set -- ${s##*) }
  case $list in *" $2 "*) continue ;; esac
  [ "$4" = "$p" ] && { L=$p; break; }
done
members() {
  n=0
  tagged_list
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$$" ] && continue
    read -r s < "$d/stat" 2>/dev/null || continue
    set -- "$1" ${s##*) }
    case $2 in Z|X) continue;; esac
    case $list in
      *" $p "*) ;;
      *) { [ -n "$L" ] && [ "$5" = "$L" ]; } || continue ;;
    esac
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

/// Parses one answer line of [`FOREGROUND_SCRIPT`]; `None` when the script
/// found no terminal (`- - 0`) or the line is not an answer.
///
/// ```
/// let fg = dsh_pty::remote::parse_foreground(b"42 40 1\n").unwrap();
/// assert_eq!((fg.pgid, fg.is_leader, fg.waiting_for_input), (42, false, true));
/// assert!(dsh_pty::remote::parse_foreground(b"- - 0\n").is_none());
/// ```
pub fn parse_foreground(line: &[u8]) -> Option<crate::Foreground> {
    let text = std::str::from_utf8(line).ok()?;
    let mut fields = text.split_whitespace();
    let pgid: i32 = fields.next()?.parse().ok()?;
    let leader: i32 = fields.next()?.parse().ok()?;
    let waiting = fields.next()? == "1";
    Some(crate::Foreground {
        pgid,
        is_leader: pgid == leader,
        waiting_for_input: waiting,
    })
}

/// A channel to a running [`FOREGROUND_SCRIPT`]: its standard input and
/// output, however the backend reaches them.
#[async_trait::async_trait]
pub trait ProbeLink: Send {
    /// Writes to the script's standard input; `false` when that failed.
    async fn send(&mut self, bytes: &[u8]) -> bool;
    /// The next chunk of its standard output; `None` once it ended.
    async fn recv(&mut self) -> Option<bytes::Bytes>;
}

/// How long one answer of the probe may take (the first also finds the
/// shell, which may still be starting).
const FIRST_ANSWER: std::time::Duration = std::time::Duration::from_secs(5);
const ANSWER: std::time::Duration = std::time::Duration::from_secs(1);

/// The foreground of a remote terminal, asked of [`FOREGROUND_SCRIPT`] on
/// demand ([`ForegroundProbe::refresh`], for
/// [`crate::PtySession::refresh_foreground`]) and kept for the synchronous
/// [`crate::PtySession::foreground`].
#[derive(Default)]
pub struct ForegroundProbe {
    link: tokio::sync::Mutex<Option<Asking>>,
    latest: std::sync::Mutex<Option<crate::Foreground>>,
}

impl std::fmt::Debug for ForegroundProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForegroundProbe")
            .field("latest", &self.latest())
            .finish_non_exhaustive()
    }
}

impl ForegroundProbe {
    /// A probe with no answer yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The latest answer.
    pub fn latest(&self) -> Option<crate::Foreground> {
        self.latest.lock().ok().and_then(|l| l.clone())
    }

    /// Asks once, starting the script with `start` when it does not run;
    /// any failure forgets the answer and the link (started again next time).
    pub async fn refresh<F, Fut>(&self, start: F)
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Option<Box<dyn ProbeLink>>>,
    {
        let mut link = self.link.lock().await;
        let first = link.is_none();
        if first {
            *link = start().await.map(|l| (l, Vec::new()));
        }
        let answer = match link.as_mut() {
            Some((l, pending)) => {
                let bound = if first { FIRST_ANSWER } else { ANSWER };
                tokio::time::timeout(bound, ask(l.as_mut(), pending))
                    .await
                    .ok()
                    .flatten()
            }
            None => None,
        };
        if answer.is_none() {
            *link = None;
        }
        if let Ok(mut latest) = self.latest.lock() {
            *latest = answer.flatten();
        }
    }
}

/// A running script and what it printed past its last answer.
type Asking = (Box<dyn ProbeLink>, Vec<u8>);

/// One question, one answer line: `None` when the link failed.
async fn ask(link: &mut dyn ProbeLink, pending: &mut Vec<u8>) -> Option<Option<crate::Foreground>> {
    if !link.send(b"?\n").await {
        return None;
    }
    loop {
        if let Some(at) = memchr::memchr(b'\n', pending) {
            let line: Vec<u8> = pending.drain(..=at).collect();
            return Some(parse_foreground(&line));
        }
        pending.extend_from_slice(&link.recv().await?);
    }
}
