#!/usr/bin/env bash
# make dist: the release binaries, cross-compiled, static (no cgo), stripped
# and reproducible: -trimpath, no build ID, no VCS stamp from the tree (the
# version, commit and date are given, the date the commit's, never the
# clock's), so two builds of one commit with one Go toolchain give the same
# bytes. Into DIR (default dist/) with SHA256SUMS.
#
#   VERSION=... COMMIT=... BUILD_DATE=... scripts/dist.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
: "${VERSION:?}" "${COMMIT:?}" "${BUILD_DATE:?}"
oncall=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)
labs=(linux/amd64 linux/arm64)
max_oncall=45000000 # bytes: what a person downloads at 3 a.m.

rm -rf "$out"
mkdir -p "$out"
ldflags="-s -w -buildid= -X main.version=$VERSION -X main.commit=$COMMIT -X main.buildDate=$BUILD_DATE"
# grpcnotrace: grpc without golang.org/x/net/trace, whose debug pages
# (html/template) would cost the linker its method dead-code elimination
# (cmd/breakglass/deps_test.go).
tags=grpcnotrace
build() { # NAME OS/ARCH
  local os=${2%/*} arch=${2#*/}
  env -u GOFLAGS CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOAMD64=v1 GOARM64=v8.0 \
    go build -trimpath -buildvcs=false -tags "$tags" -ldflags "$ldflags" -o "$out/$1-$os-$arch" "./cmd/$1"
}
for p in "${oncall[@]}"; do build breakglass "$p"; done
for p in "${labs[@]}"; do build breakglass-lab "$p"; done

cd "$out"
if command -v sha256sum >/dev/null; then sha256sum breakglass-* >SHA256SUMS; else shasum -a 256 breakglass-* >SHA256SUMS; fi
ls -l breakglass-* | awk '{printf "%-32s %6.1f MB\n", $NF, $5 / 1e6}'
for f in breakglass-{linux,darwin}-*; do
  size=$(wc -c <"$f")
  if [ "$size" -gt "$max_oncall" ]; then
    echo "dist: $f is $size bytes, over the $max_oncall the on-call binary may weigh" >&2
    exit 1
  fi
done
echo "dist: $VERSION ($COMMIT, $BUILD_DATE) in $out/, checksums in $out/SHA256SUMS"
