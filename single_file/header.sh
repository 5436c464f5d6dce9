#!/bin/sh
# dtrain @VERSION@ as one self-extracting file: this POSIX sh header, then a
# gzip-compressed tar of bin/deno, js/ (dtrain bundled), lib/ (the native
# libraries), deno.json and manifest.json. The first start unpacks it into
# the cache folder (DTRAIN_CACHE) under a temporary name, checks every file's
# sha256 and publishes the folder with one rename, so any number of
# simultaneous first starts are safe; later starts run from the folder at once.
# Tools needed: sh, tail, gzip, tar, mkdir, mktemp, mv, rm. scripts/build_single.ts
# fills in the @...@ fields.
set -u
payload_offset=@OFFSET@
payload_id=@PAYLOAD_ID@
unpacked_mb=@UNPACKED_MB@

die() {
  printf 'dtrain: %s\n' "$*" >&2
  exit 1
}

case $0 in
  /*) self=$0 ;;
  *) self=$(pwd)/${0#./} ;;
esac

if [ -n "${DTRAIN_CACHE:-}" ]; then
  cache=$DTRAIN_CACHE
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
  cache=$XDG_CACHE_HOME/dtrain
elif [ -n "${HOME:-}" ]; then
  cache=$HOME/.cache/dtrain
else
  die "cannot choose a folder to unpack into: HOME is not set. Set DTRAIN_CACHE to a writable folder with $unpacked_mb MB free"
fi
dir=$cache/$payload_id
advice="Set DTRAIN_CACHE to a writable folder with $unpacked_mb MB free (it is $cache)"

nl='
'
unpack() {
  # The system's reason is the text after the last ": " of the tool's message.
  err=$(mkdir -p "$cache" 2>&1) || die "cannot create the cache folder $cache: ${err##*: }. $advice"
  tmp=$(mktemp -d "$cache/.unpack-XXXXXX" 2>&1) || {
    err=$tmp
    die "cannot write to the cache folder $cache: ${err##*: }. $advice"
  }
  trap 'rm -rf "$tmp"' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  if ! err=$({ tail -c +"$payload_offset" "$self" | gzip -dc | tar -xf - -C "$tmp"; } 2>&1); then
    case $err in
      *"No space"*) die "the cache folder $cache is full (No space left on device while unpacking). $advice" ;;
      *"quota"*) die "the cache folder $cache is over its disk quota. $advice" ;;
      *) die "cannot unpack into the cache folder $cache: ${err%%"$nl"*}. $advice" ;;
    esac
  fi
  DENO_DIR=$tmp/.verify_deno_dir DENO_NO_UPDATE_CHECK=1 \
    "$tmp/bin/deno" run -A --no-config "$tmp/js/verify.js" "$tmp" "$self"
  case $? in
    0) ;;
    126 | 127)
      die "cannot run programs unpacked in $cache: the folder may be on a file system mounted noexec, or this machine is not x86_64 Linux (glibc >= 2.27). Set DTRAIN_CACHE to a folder that allows running programs"
      ;;
    *) exit 1 ;; # verify.js said what is wrong
  esac
  rm -rf "$tmp/.verify_deno_dir"
  # Publish with one rename. When another start published first, mv puts our
  # copy inside the winner's folder instead: remove it there.
  mv "$tmp" "$dir" 2>/dev/null
  rm -rf "$dir/${tmp##*/}" "$tmp"
  trap - EXIT INT TERM
  [ -f "$dir/.verified" ] ||
    die "the folder $dir exists but is not a complete, verified unpacking: delete it and start dtrain again"
}

[ -f "$dir/.verified" ] || unpack

export DTRAIN_SFX_FILE="$self"
export DENO_DIR="$dir/deno_dir"
export DENO_NO_UPDATE_CHECK=1
exec "$dir/bin/deno" run -A --config "$dir/deno.json" "$dir/js/dtrain.js" ${1+"$@"}
