#!/usr/bin/env bash
# Puts the lab's kube-apiserver binaries into the user's cache, once per
# machine (as Go keeps its module and build caches): $BREAKGLASS_KUBE_BIN_DIR,
# else ${XDG_CACHE_HOME:-~/.cache}/breakglass/kube-apiserver, as VERSION/kube-apiserver.
#
#   build-kube-apiserver.sh                      every version under lab/kubeapiserver
#   build-kube-apiserver.sh v1.32.13 v1.34.4     just those
#   build-kube-apiserver.sh --print-dir          the cache directory, nothing done
#
# Each binary comes from the first of these that has it:
#  1. setup-envtest's binaries, the convention Kubernetes developers already
#     keep: $KUBEBUILDER_ASSETS/kube-apiserver, or
#     ${XDG_DATA_HOME:-~/.local/share}/kubebuilder-envtest/k8s/X.Y.Z-linux-ARCH/kube-apiserver
#     (copied; taken only if its --version says VERSION);
#  2. the official release, $BREAKGLASS_KUBE_RELEASE_URL/VERSION/bin/linux/ARCH/kube-apiserver
#     (default https://dl.k8s.io/release), taken only if its sha512 is the
#     published one (the .sha512 beside it): a ~100 MB download. A host that
#     does not answer within seconds is not asked again in this run;
#  3. a build of the nested module lab/kubeapiserver/VERSION from the Go module
#     proxy: 7 to 15 minutes each on 2 cores.
# A binary taken (1, 2) is keyed by its version and checksum: the stamp beside
# it records its sha512, checked on every run. A binary built (3) is rebuilt
# only when what it was built from changed (its module's go.mod and go.sum, the
# Go toolchain): its stamp records that, so a second clone on the same machine
# does nothing. Versions that are needed go side by side, up to
# $BREAKGLASS_BUILD_JOBS at once (default: one per core; one build alone leaves
# cores idle while it links), one progress line per binary. Two clones getting
# the same version at once wait for each other (flock).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
out=${BREAKGLASS_KUBE_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/breakglass/kube-apiserver}
if [ "${1:-}" = "--print-dir" ]; then echo "$out"; exit 0; fi
release=${BREAKGLASS_KUBE_RELEASE_URL:-https://dl.k8s.io/release}
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  for d in "$top"/lab/kubeapiserver/v*/; do versions+=("$(basename "$d")"); done
fi
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
jobs=${BREAKGLASS_BUILD_JOBS:-$cores}
case $(uname -m) in x86_64) arch=amd64 ;; aarch64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

stamp_of() { (cat "$top/lab/kubeapiserver/$1/go.mod" "$top/lab/kubeapiserver/$1/go.sum"; go version) | sha256sum | cut -d' ' -f1; }
sha512_of() { sha512sum "$1" | cut -d' ' -f1; }
up_to_date() {
  local bin=$out/$1/kube-apiserver stamp
  [ -x "$bin" ] && stamp=$(cat "$out/$1/stamp" 2>/dev/null) || return 1
  case $stamp in
  sha512:*) stamp=${stamp#sha512:} && [ "$(sha512_of "$bin")" = "${stamp%% *}" ] ;; # taken
  *) [ "$stamp" = "$(stamp_of "$1")" ] ;;                                            # built
  esac
}

# take VERSION FILE FROM: FILE becomes VERSION's binary if it says it is
# VERSION (the .part, then a rename: a reader never sees half a binary).
take() {
  local v=$1 dir=$out/$1 got
  got=$("$2" --version 2>/dev/null) || true
  if [ "$got" != "Kubernetes $v" ]; then echo "kube-apiserver $v: $3 says '$got', not taken" >&2; return 1; fi
  cp "$2" "$dir/kube-apiserver.part" && chmod 0755 "$dir/kube-apiserver.part"
  echo "sha512:$(sha512_of "$dir/kube-apiserver.part") $3" >"$dir/stamp.part"
  mv "$dir/kube-apiserver.part" "$dir/kube-apiserver" && mv "$dir/stamp.part" "$dir/stamp"
}

from_envtest() {
  local f
  for f in ${KUBEBUILDER_ASSETS:+"$KUBEBUILDER_ASSETS/kube-apiserver"} \
    "${XDG_DATA_HOME:-$HOME/.local/share}/kubebuilder-envtest/k8s/${1#v}-linux-$arch/kube-apiserver"; do
    [ -x "$f" ] && take "$1" "$f" "$f" 2>/dev/null && return 0
  done
  return 1
}

# download VERSION: the release binary, verified against its published sha512.
download() {
  local v=$1 url=$release/$1/bin/linux/$arch/kube-apiserver file=$out/$1/kube-apiserver.download err=$tmp/$1.err want rc=0 start=$SECONDS
  command -v curl >/dev/null && [ ! -e "$tmp/offline" ] || return 1
  # The small checksum first: it tells within seconds whether the host answers.
  want=$(curl -fsSL --connect-timeout 5 --max-time 10 "$url.sha512" 2>"$err") || rc=$?
  if [ "$rc" != 0 ]; then
    # 22: an HTTP error (no such release); else the host did not answer: ask it no more.
    [ "$rc" = 22 ] || touch "$tmp/offline"
    echo "kube-apiserver $v: no release from $release after $((SECONDS - start)) s ($(tail -1 "$err")): building it" >&2
    return 1
  fi
  # A stalled transfer (under 100 kB/s for 30 s) ends rather than hangs.
  if ! curl -fsSL --connect-timeout 5 --speed-limit 100000 --speed-time 30 -o "$file" "$url" 2>"$err"; then
    echo "kube-apiserver $v: download of $url failed ($(tail -1 "$err")): building it" >&2
    rm -f "$file"
    return 1
  fi
  if [ "$(sha512_of "$file")" != "${want%% *}" ]; then
    echo "kube-apiserver $v: $url does not match its published sha512 ($url.sha512): refused, building it" >&2
    rm -f "$file"
    return 1
  fi
  chmod 0755 "$file"
  take "$v" "$file" "$url" || rc=$?
  rm -f "$file"
  return "$rc"
}

# build VERSION: from its nested module; its output goes to VERSION/build.log.
build() {
  local v=$1 mod=$top/lab/kubeapiserver/$1 dir=$out/$1 minor=${1#v1.} pkg=k8s.io/component-base/version
  minor=${minor%%.*}
  local ldflags="-s -w -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  if ! (cd "$mod" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$dir/kube-apiserver.part" k8s.io/kubernetes/cmd/kube-apiserver) >"$dir/build.log" 2>&1; then
    echo "kube-apiserver $v: build FAILED; the last lines of $dir/build.log:" >&2
    tail -20 "$dir/build.log" >&2
    return 1
  fi
  local got
  got=$("$dir/kube-apiserver.part" --version)
  if [ "$got" != "Kubernetes $v" ]; then echo "kube-apiserver $v: the build says '$got'" >&2; return 1; fi
  mv "$dir/kube-apiserver.part" "$dir/kube-apiserver"
  stamp_of "$v" >"$dir/stamp"
}

# get VERSION: from the first source that has it, under a lock on its directory.
get() {
  local v=$1 dir=$out/$1 start=$SECONDS how
  mkdir -p "$dir"
  exec 9>"$dir/.lock"
  flock 9
  if up_to_date "$v"; then how="up to date"
  elif from_envtest "$v"; then how="taken from setup-envtest's $(cut -d' ' -f2- "$dir/stamp")"
  elif download "$v"; then how="downloaded and verified in $((SECONDS - start)) s"
  elif build "$v"; then how="built in $((SECONDS - start)) s"
  else
    echo "kube-apiserver $v: FAILED after $((SECONDS - start)) s" >&2
    return 1
  fi
  echo "kube-apiserver $v: $how ($dir/kube-apiserver)"
}

todo=()
for v in "${versions[@]}"; do
  [ -f "$top/lab/kubeapiserver/$v/go.mod" ] || { echo "build-kube-apiserver: no module for $v under lab/kubeapiserver (there are: $(ls "$top/lab/kubeapiserver" | tr '\n' ' '))" >&2; exit 2; }
  if up_to_date "$v"; then echo "kube-apiserver $v: up to date ($out/$v/kube-apiserver)"; else todo+=("$v"); fi
done
[ ${#todo[@]} -eq 0 ] && exit 0
echo "kube-apiserver: getting ${todo[*]} into $out, $jobs at a time (setup-envtest's if there; else the release from $release, a ~100 MB download each; else built, 7 to 15 minutes each on 2 cores; once per machine)"
mkdir "$tmp/failed"
for v in "${todo[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  echo "kube-apiserver $v: getting..."
  (get "$v" || touch "$tmp/failed/$v") &
done
wait
if [ -n "$(ls "$tmp/failed")" ]; then
  echo "build-kube-apiserver: failed: $(ls "$tmp/failed" | tr '\n' ' ')" >&2
  exit 1
fi
