//! The shell script that finds and signals a session's processes inside the
//! container.
//!
//! Every process the session starts carries `DSH_TREE=<random tag>` in its
//! environment (set on the exec, so the shell has it from its first
//! instruction, and inherited by everything it starts, including processes
//! that `setsid` or double-fork away from the terminal's session). The
//! script finds the session leader (the tagged process whose parent is
//! outside the container, i.e. `ppid` 0), then treats as members every live
//! process that is tagged *or* belongs to the leader's terminal session.
//! A process that both leaves the session and clears its environment
//! escapes it; a container made per session ([`crate::DockerBackend::per_session`])
//! is removed instead, which leaves nothing.

/// `sh -c TREE sh <tag> <op> <arg> <scratch dir>`; ops:
/// * `leader`: prints the leader's pid in the container;
/// * `fg SIG`: sends `SIG` to the terminal's foreground process group;
/// * `tree TENTHS`: `SIGTERM` to every member and `SIGHUP` to the leader,
///   up to `TENTHS` tenths of a second for them to leave, then `SIGSTOP` and
///   `SIGKILL` to what is left (twice, for processes forked meanwhile), then
///   removes the scratch directory. `tree 0` skips the polite part.
pub(crate) const SCRIPT: &str = r#"t="DSH_TREE=$1" op=$2 arg=$3 dir=$4 L=
tagged() { case $(cat "$1/environ" 2>/dev/null) in *"$t"*) return 0;; esac; return 1; }
for d in /proc/[0-9]*; do
  read -r s < "$d/stat" 2>/dev/null || continue
  set -- ${s##*) }
  [ "$2" = 0 ] && tagged "$d" && { L=${d#/proc/}; break; }
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
