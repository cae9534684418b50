#!/usr/bin/env bash
# Run a build command with its output kept in a log, showing on stderr what is being compiled, how far along it is
# and for how long, instead of minutes of silence. Usage: scripts/build-progress.sh WHAT LOG -- COMMAND [ARG...]
# It understands ninja's "[12/98] ..." and make's "[ 12%] ..." lines (CMake's two generators); on failure it shows
# the log's last lines. BUILD_PROGRESS_EVERY_S (default 10) is how often a progress line is printed at most.
set -uo pipefail
what="$1"
log="$2"
shift 2
[ "${1:-}" = "--" ] && shift
every="${BUILD_PROGRESS_EVERY_S:-10}"
: >"$log"

elapsed() { printf '%dm%02ds' $((SECONDS / 60)) $((SECONDS % 60)); }

# What a build line works on: the source file it compiles (`-c FILE`), or the library it links (`-o lib...`),
# shown from the vendored tree's root; CMake's make lines already say it in words; other steps (symlinks, install)
# are the build finishing.
subject() {
  local line="$1" word previous="" source="" output=""
  for word in $line; do
    [ "$previous" = "-c" ] && source="$word"
    [ "$previous" = "-o" ] && output="$word"
    previous="$word"
  done
  if [ -n "$source" ]; then
    printf '%s' "${source##*/vendor/}"
  elif [ -n "$output" ]; then
    printf 'linking %s' "${output##*/}"
  elif [[ $line == Building* || $line == Linking* ]]; then
    printf '%s' "${line:0:100}"
  else
    printf 'finishing'
  fi
}

SECONDS=0
echo "infill-ls: installing $what; the first install compiles it (minutes), once: pip caches the wheel (log: $log)" >&2
last_shown=-1
"$@" 2>&1 | {
  while true; do
    if IFS= read -r -t 15 line; then
      printf '%s\n' "$line" >>"$log"
      line="${line#"${line%%[![:space:]]*}"}" # pip -v indents the build's lines
      if [[ $line =~ ^\[([0-9]+)/([0-9]+)\]\ (.*)$ ]]; then
        step="${BASH_REMATCH[1]}/${BASH_REMATCH[2]}"
        done_now=$([ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] && echo 1 || echo 0)
        rest="${BASH_REMATCH[3]}"
      elif [[ $line =~ ^\[\ *([0-9]+)%\]\ (.*)$ ]]; then
        step="${BASH_REMATCH[1]}%"
        done_now=$([ "${BASH_REMATCH[1]}" = 100 ] && echo 1 || echo 0)
        rest="${BASH_REMATCH[2]}"
      else
        continue
      fi
      if [ "$last_shown" -lt 0 ] || [ $((SECONDS - last_shown)) -ge "$every" ] || [ "$done_now" = 1 ]; then
        echo "infill-ls:   [$step] $(subject "$rest"), $(elapsed) so far" >&2
        last_shown=$SECONDS
      fi
    elif [ $? -gt 128 ]; then
      echo "infill-ls:   still working on $what, $(elapsed) so far" >&2
    else
      break
    fi
  done
}
status="${PIPESTATUS[0]}"
if [ "$status" -ne 0 ]; then
  echo "infill-ls: building $what failed (exit $status) after $(elapsed); the log's last lines ($log):" >&2
  tail -n 40 "$log" >&2
  exit "$status"
fi
echo "infill-ls: $what done in $(elapsed)" >&2
