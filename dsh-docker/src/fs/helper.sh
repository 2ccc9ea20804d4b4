# The editor's helper in the container: one `sh` that answers DockerFs's
# requests on its standard input, in lockstep, until that input ends.
#
# A request is three lines, then `n` bytes of data:
#   <op> <token> <n>
#   -<path>            (or e<path> with `\` and newline as printf %b escapes)
#   <extra>            (the read limit, the expected version, or nothing)
# The answer is the operation's output (its standard error merged), then
# `\n<token> <code>\n`; the code line ends ` x` when the helper exits after
# it (the data could not be consumed). Exit codes: 2 not found,
# 13 refused, 16 changed since read, 17 exists, 20 not a directory,
# 21 a directory, 64 unknown request.
#
# The host sends nothing more until the answer came, so exactly `n` bytes
# wait in the pipe and `head -c` reads no further, even stdio-buffered.
# `ver` prints the version: device, inode, size, modification and
# status-change times to the nanosecond (GNU and BusyBox `stat` both do).
NL='
'
ver() { stat -L -c '%d %i %s %y %z' -- "$1"; }
code() { return "$1"; }
drain() { [ "$n" = 0 ] || head -c "$n" > /dev/null || lost=1; }
# The directory of $1, in d, without a process.
dir_of() {
  case $1 in
    */*) d=${1%/*}; [ -n "$d" ] || d=/ ;;
    *) d=. ;;
  esac
}
# Kind and link flags, size, mode, then the version on one line.
meta() {
  if [ -L "$1" ]; then l=L; else l=-; fi
  if [ ! -e "$1" ]; then
    [ "$l" = L ] || return 2
    printf 'o%s 0 - ' "$l"; stat -c '%d %i %s %y %z' -- "$1"; return 0
  fi
  if [ -d "$1" ]; then k=d; elif [ -f "$1" ]; then k=f; else k=o; fi
  printf '%s%s ' "$k" "$l"; stat -L -c '%s %a %d %i %s %y %z' -- "$1"
}
op_stat() { meta "$p"; }
op_read() {
  meta "$p" || return 2
  [ -d "$p" ] && return 21
  [ -e "$p" ] || return 2
  head -c "$x" -- "$p" || return 13
}
# A view: the metadata, then a regular file's first $x bytes.
op_view() {
  meta "$p" || return 2
  [ -f "$p" ] || return 0
  head -c "$x" -- "$p" || return 13
}
op_list() {
  [ -e "$p" ] || return 2
  [ -d "$p" ] || return 20
  (
    cd -- "$p" || exit 13
    for f in .* *; do
      case $f in .|..) continue;; esac
      [ -e "$f" ] || [ -L "$f" ] || continue
      if [ -L "$f" ]; then l=L; else l=-; fi
      if [ -d "$f" ]; then k=d; elif [ -f "$f" ]; then k=f; else k=o; fi
      printf '%s%s%s\0' "$k" "$l" "$f"
    done
  )
}
# Writes the request's data to $t (made anew); 13 if it cannot.
take() {
  true 2>/dev/null > "$t" || { drain; return 13; }
  [ "$n" = 0 ] || head -c "$n" > "$t" || { lost=1; rm -f -- "$t"; return 13; }
}
op_create() {
  if [ -e "$p" ] || [ -L "$p" ]; then drain; return 17; fi
  dir_of "$p"
  [ -d "$d" ] || mkdir -p -- "$d" 2>/dev/null || { drain; return 13; }
  t="$d/.dsh-new.$$"
  take || return 13
  ln -- "$t" "$p" 2>/dev/null; r=$?
  rm -f -- "$t"
  [ "$r" = 0 ] || { [ -e "$p" ] && return 17; return 13; }
}
op_replace() {
  q=$p
  if [ -L "$p" ]; then q=$(readlink -f -- "$p") || { drain; return 2; }; fi
  [ -f "$q" ] || { drain; return 2; }
  dir_of "$q"
  t="$d/.dsh-edit.$$"
  take || return 13
  # The old file's version, owner, mode, size and seconds, then the new one's.
  s=$(stat -L -c '%d %i %s %y %z|%u:%g %a %s %Y' -- "$q" "$t") || { rm -f -- "$t"; return 2; }
  a=${s%%"$NL"*} b=${s#*"$NL"}
  [ "${a%%|*}" = "$x" ] || { rm -f -- "$t"; return 16; }
  set -- ${a#*|} ${b#*|}
  [ "$1" = "$5" ] || chown "$1" "$t" 2>/dev/null
  [ "$2" = "$6" ] || chmod "$2" "$t" || { rm -f -- "$t"; return 13; }
  # Same size within the old file's second (or the one before: file times
  # come from the kernel's coarse clock): wait for the next second and
  # stamp the new file then, so that caches keyed on (whole seconds, size),
  # as Python's bytecode, see the edit, and no time is in the future (as
  # LocalFs does; make warns of those).
  if [ "$3" = "$7" ] && [ "$8" -le "$4" ] && [ $(($4 - $8)) -le 1 ]; then
    w=0
    while [ "$(date +%s)" -le "$4" ] && [ $w -lt 30 ]; do
      sleep 0.1 2>/dev/null || sleep 1
      w=$((w + 1))
    done
    touch -c -- "$t" || { rm -f -- "$t"; return 13; }
  fi
  mv -f -- "$t" "$q" || { rm -f -- "$t"; return 13; }
  ver "$q"
}
# What the operations run: a container without one of them gets an error
# naming each missing one at the first request, not a failure halfway.
missing=
for c in stat head ln mv readlink rm mkdir chmod chown touch date sleep; do
  command -v "$c" >/dev/null 2>&1 || missing="$missing $c"
done
if [ -n "$missing" ]; then printf 'dsh-missing%s\n' "$missing"; exit 127; fi
while IFS=' ' read -r op tok n && IFS= read -r p && IFS= read -r x; do
  case $p in
    e*) p=$(printf '%bx' "${p#e}"); p=${p%x} ;;
    *) p=${p#-} ;;
  esac
  lost=
  case $op in
    stat|read|view|list|create|replace) "op_$op" 2>&1 ;;
    *) drain; code 64 ;;
  esac
  c=$?
  printf '\n%s %s%s\n' "$tok" "$c" "${lost:+ x}"
  [ -z "$lost" ] || exit 1
done
