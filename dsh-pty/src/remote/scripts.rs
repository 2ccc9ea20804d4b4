//! The POSIX `sh` scripts a remote session runs next to its program.

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
/// standard input, one line `<foreground pgid> <leader pid> <waiting>
/// <leader state> <leader executable>` about the terminal of the session
/// tagged `<tag>` (found as [`TREE_SCRIPT`] finds it, retried for up to two
/// seconds): the terminal's foreground process group (`tpgid` of the
/// leader), the leader, `1` when a process of that group sleeps waiting
/// for input from the terminal, as Linux shows in `/proc/<pid>/syscall`
/// (x86-64 and AArch64 numbers): a `read` of it, an `epoll_wait` whose
/// interest list (`/proc/<pid>/fdinfo`) holds it for input, or a
/// `poll`/`select` whose set, read from `/proc/<pid>/mem` with `dd` and
/// `od`, asks for input from it (where that memory cannot be read: when
/// its standard input is the terminal), the leader's state letter (`T`:
/// stopped) and the target of its `/proc/<pid>/exe` (empty when
/// unreadable). It ends at end-of-file or when the leader is gone; `-`
/// answers mean "not found".
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
  x86_64) rd=" 0 19 17 295 327 " pl=" 7 271 " sl=" 23 270 " ep=" 232 281 441 " ;;
  aarch64) rd=" 63 65 67 69 286 " pl=" 73 " sl=" 72 " ep=" 22 441 " ;;
  *) rd=" " pl=" " sl=" " ep=" " ;;
esac
is_tty() { x=$(readlink "$d/fd/$1" 2>/dev/null); [ "$x" = "$tty" ] || [ "$x" = /dev/tty ]; }
# $1 bytes at address $2 of the process's memory, as unsigned numbers of
# $3 bytes each (empty when the memory cannot be read).
mem() { dd if="$d/mem" bs=1 skip="$2" count="$1" 2>/dev/null | od -An -v -tu"$3" 2>/dev/null; }
# Whether the process sleeps waiting for input from the terminal.
waits() {
  read -r nr a0 a1 rest < "$d/syscall" 2>/dev/null || return 1
  case $rd in *" $nr "*) is_tty $((a0)); return ;; esac
  case $ep in *" $nr "*)
    while read -r k fd e ev rest; do
      [ "$k" = tfd: ] && [ $((0x$ev & 67)) -ne 0 ] && is_tty "$fd" && return 0
    done < "$d/fdinfo/$((a0))" 2>/dev/null
    return 1 ;;
  esac
  case $pl in *" $nr "*)
    n=$((a1)); [ "$n" -gt 0 ] || return 1; [ "$n" -le 512 ] || n=512
    m=$(mem $((n * 8)) $((a0)) 4)
    [ -n "$m" ] || { is_tty 0; return; }
    set -- $m
    while [ $# -ge 2 ]; do
      [ $(($2 & 67)) -ne 0 ] && is_tty "$1" && return 0
      shift 2
    done
    return 1 ;;
  esac
  case $sl in *" $nr "*) ;; *) return 1 ;; esac
  n=$((a0)); [ "$n" -gt 0 ] && [ $((a1)) -ne 0 ] || return 1; [ "$n" -le 1024 ] || n=1024
  m=$(mem $(((n + 7) / 8)) $((a1)) 1)
  [ -n "$m" ] || { is_tty 0; return; }
  i=0
  for v in $m; do
    b=0
    while [ "$v" -gt 0 ]; do
      [ $((v & 1)) -eq 1 ] && [ $((i * 8 + b)) -lt "$n" ] && is_tty $((i * 8 + b)) && return 0
      v=$((v >> 1)) b=$((b + 1))
    done
    i=$((i + 1))
  done
  return 1
}
while read -r q; do
  if [ -z "$L" ] || ! read -r s < "/proc/$L/stat" 2>/dev/null; then echo "- - 0"; continue; fi
  set -- ${s##*) }
  tp=$6 st=$1 w=0
  for d in /proc/[0-9]*; do
    read -r s < "$d/stat" 2>/dev/null || continue
    set -- ${s##*) }
    [ "$3" = "$tp" ] && [ "$1" = S ] || continue
    if waits; then w=1; break; fi
  done
  echo "$tp $L $w $st $(readlink "/proc/$L/exe" 2>/dev/null)"
done
"#;
