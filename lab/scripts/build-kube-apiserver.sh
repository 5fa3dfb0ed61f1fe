#!/usr/bin/env bash
# Builds the lab's kube-apiserver binaries from the nested modules under
# lab/kubeapiserver/ into the user's cache, once per machine (as Go keeps
# its module and build caches): $BREAKGLASS_KUBE_BIN_DIR, else
# ${XDG_CACHE_HOME:-~/.cache}/breakglass/kube-apiserver, as VERSION/kube-apiserver.
#
#   build-kube-apiserver.sh                      every version under lab/kubeapiserver
#   build-kube-apiserver.sh v1.32.13 v1.34.4     just those
#   build-kube-apiserver.sh --print-dir          the cache directory, nothing built
#
# A binary is rebuilt only when what it was built from changed (its module's
# go.mod and go.sum, the Go toolchain): the stamp beside it records that, so a
# second clone on the same machine builds nothing. Builds that are needed run
# side by side, up to $BREAKGLASS_BUILD_JOBS at once (default: one per core;
# one build alone leaves cores idle while it links), one progress line per binary.
# Two clones building the same version at once wait for each other (flock).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
out=${BREAKGLASS_KUBE_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/breakglass/kube-apiserver}
if [ "${1:-}" = "--print-dir" ]; then echo "$out"; exit 0; fi
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  for d in "$top"/lab/kubeapiserver/v*/; do versions+=("$(basename "$d")"); done
fi
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
jobs=${BREAKGLASS_BUILD_JOBS:-$cores}
mkdir -p "$out"

stamp_of() { (cat "$top/lab/kubeapiserver/$1/go.mod" "$top/lab/kubeapiserver/$1/go.sum"; go version) | sha256sum | cut -d' ' -f1; }
up_to_date() { [ -x "$out/$1/kube-apiserver" ] && [ "$(cat "$out/$1/stamp" 2>/dev/null)" = "$(stamp_of "$1")" ]; }

# build VERSION: one binary, under a lock on its directory; its output goes
# to VERSION/build.log, and one line says how it ended.
build() {
  local v=$1 mod=$top/lab/kubeapiserver/$1 dir=$out/$1
  mkdir -p "$dir"
  exec 9>"$dir/.lock"
  flock 9
  if up_to_date "$v"; then echo "kube-apiserver $v: up to date ($dir/kube-apiserver)"; return 0; fi
  local start=$SECONDS minor=${v#v1.} pkg=k8s.io/component-base/version
  minor=${minor%%.*}
  local ldflags="-s -w -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  if ! (cd "$mod" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dir/kube-apiserver.part" k8s.io/kubernetes/cmd/kube-apiserver) >"$dir/build.log" 2>&1; then
    echo "kube-apiserver $v: FAILED after $((SECONDS - start)) s; the last lines of $dir/build.log:" >&2
    tail -20 "$dir/build.log" >&2
    return 1
  fi
  local got
  got=$("$dir/kube-apiserver.part" --version)
  if [ "$got" != "Kubernetes $v" ]; then echo "kube-apiserver $v: the build says '$got'" >&2; return 1; fi
  mv "$dir/kube-apiserver.part" "$dir/kube-apiserver"
  stamp_of "$v" > "$dir/stamp"
  echo "kube-apiserver $v: built in $((SECONDS - start)) s ($dir/kube-apiserver)"
}

todo=()
for v in "${versions[@]}"; do
  [ -f "$top/lab/kubeapiserver/$v/go.mod" ] || { echo "build-kube-apiserver: no module for $v under lab/kubeapiserver (there are: $(ls "$top/lab/kubeapiserver" | tr '\n' ' '))" >&2; exit 2; }
  if up_to_date "$v"; then echo "kube-apiserver $v: up to date ($out/$v/kube-apiserver)"; else todo+=("$v"); fi
done
[ ${#todo[@]} -eq 0 ] && exit 0
echo "kube-apiserver: building ${todo[*]} into $out, $jobs at a time (about 3 to 10 minutes each on 2 cores, once per machine)"
failed=$(mktemp -d)
trap 'rm -rf "$failed"' EXIT
for v in "${todo[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  echo "kube-apiserver $v: building..."
  (build "$v" || touch "$failed/$v") &
done
wait
if [ -n "$(ls "$failed")" ]; then
  echo "build-kube-apiserver: failed: $(ls "$failed" | tr '\n' ' ')" >&2
  exit 1
fi
