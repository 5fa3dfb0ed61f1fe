#!/usr/bin/env bash
# Builds the real talosctl v1.13.8 the lab's tests drive the emulated nodes with, from
# the nested module lab/talosctl (its go.mod pins talosctl and the few module versions
# the proxy serves in place of those it does not), into the user's cache, once per
# machine: $BREAKGLASS_TALOSCTL, else ${XDG_CACHE_HOME:-~/.cache}/breakglass/talosctl/talosctl.
#
#   build-talosctl.sh               build it unless up to date; prints its path
#   build-talosctl.sh --print-path  the path, nothing built
#
# Rebuilt only when what it was built from changed (lab/talosctl's go.mod and go.sum,
# the Go toolchain): the stamp beside it records that. About 6 minutes on 2 cores.
# Two clones building at once wait for each other (flock).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
mod=$top/lab/talosctl
out=${BREAKGLASS_TALOSCTL:-${XDG_CACHE_HOME:-$HOME/.cache}/breakglass/talosctl/talosctl}
if [ "${1:-}" = "--print-path" ]; then echo "$out"; exit 0; fi
dir=$(dirname "$out")
mkdir -p "$dir"
stamp_of() { (cat "$mod/go.mod" "$mod/go.sum"; go version) | sha256sum | cut -d' ' -f1; }
exec 9>"$dir/.lock"
flock 9
if [ -x "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$(stamp_of)" ]; then
  echo "talosctl: up to date ($out)" >&2
  echo "$out"
  exit 0
fi
echo "talosctl v1.13.8: building into $out (about 6 minutes on 2 cores, once per machine)..." >&2
start=$SECONDS
if ! (cd "$mod" && GOFLAGS=-mod=readonly GONOSUMDB=github.com/siderolabs/wgctrl-go CGO_ENABLED=0 \
  go build -trimpath -ldflags "-s -w" \
  -o "$out.part" github.com/siderolabs/talos/cmd/talosctl) >"$dir/build.log" 2>&1; then
  echo "talosctl: FAILED after $((SECONDS - start)) s; the last lines of $dir/build.log:" >&2
  tail -20 "$dir/build.log" >&2
  exit 1
fi
got=$("$out.part" version --client --short 2>/dev/null | tr -d '\r' || true)
case "$got" in
*v1.13.8*) ;;
*) echo "talosctl: the build says '$got', want v1.13.8" >&2; exit 1 ;;
esac
mv "$out.part" "$out"
stamp_of >"$out.stamp"
echo "talosctl: built in $((SECONDS - start)) s ($out)" >&2
echo "$out"
