#!/usr/bin/env bash
# Builds the lab's kube-apiserver binaries from the nested modules under
# lab/kubeapiserver/, into .cache/kube-apiserver/VERSION/kube-apiserver.
# A binary is rebuilt only when its module (go.mod, go.sum) or the Go
# toolchain changed: the stamp beside it records what it was built from.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
out=${BREAKGLASS_KUBE_BIN_DIR:-$top/.cache/kube-apiserver}
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
  for d in "$top"/lab/kubeapiserver/v*/; do versions+=("$(basename "$d")"); done
fi
for v in "${versions[@]}"; do
  mod=$top/lab/kubeapiserver/$v
  [ -f "$mod/go.mod" ] || { echo "build-kube-apiserver: no module for $v under lab/kubeapiserver" >&2; exit 2; }
  stamp=$( (cat "$mod/go.mod" "$mod/go.sum"; go version) | sha256sum | cut -d' ' -f1)
  bin=$out/$v/kube-apiserver
  if [ -x "$bin" ] && [ "$(cat "$out/$v/stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "kube-apiserver $v: up to date ($bin)"
    continue
  fi
  echo "kube-apiserver $v: building (about 3 minutes on 2 cores)..."
  mkdir -p "$out/$v"
  minor=${v#v1.}; minor=${minor%%.*}
  pkg=k8s.io/component-base/version
  ldflags="-s -w -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  (cd "$mod" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin.part" k8s.io/kubernetes/cmd/kube-apiserver)
  mv "$bin.part" "$bin"
  echo "$stamp" > "$out/$v/stamp"
  "$bin" --version
done
