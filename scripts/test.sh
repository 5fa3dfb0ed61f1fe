#!/usr/bin/env bash
# make test: builds the rehearsal's pair of kube-apiserver binaries (what most
# lab tests need), then runs the tests while the other binaries build beside
# them. The lab's tests mostly wait for the kubelet's pace, so on a new machine
# the builds use that time; a test that needs one of the other binaries waits
# until it is there, or the builds end (BREAKGLASS_KUBE_BUILDS_DONE, see
# lab.Binaries, the lab's one lookup of its binaries). On
# a machine that has them all, nothing builds and nothing waits. talosctl (for the
# lab's talosctl tests) builds beside the pair, before the tests start.
#
#   REHEARSE_VERSIONS="v1.32.13 v1.34.4" scripts/test.sh go test -count=1 ./...
set -uo pipefail
cd "$(dirname "$0")/.."
build=lab/scripts/build-kube-apiserver.sh
# The real talosctl the lab's talosctl tests type the disaster-recovery guide with,
# built once per machine beside the rehearsal's pair (lab/scripts/build-talosctl.sh).
lab/scripts/build-talosctl.sh >/dev/null &
talosctl_builder=$!
# shellcheck disable=SC2086 # a list of versions
$build ${REHEARSE_VERSIONS:?} || exit 1
wait "$talosctl_builder" || { echo "make test: building talosctl failed" >&2; exit 1; }
BREAKGLASS_TALOSCTL=$(lab/scripts/build-talosctl.sh --print-path)
export BREAKGLASS_TALOSCTL
bin_dir=$($build --print-dir)
# The done file lives in the directory the builds write into: the lab waits
# for a missing binary only there (lab.Binaries), never in a test's own.
done_file=$(mktemp "$bin_dir/.builds-done.XXXXXX")
rm -f "$done_file" # it appears, holding the builds' exit code, when they end
trap 'rm -f "$done_file" "$done_file.part"' EXIT
($build; echo $? >"$done_file.part"; mv "$done_file.part" "$done_file") &
builder=$!
BREAKGLASS_KUBE_BIN_DIR=$bin_dir BREAKGLASS_KUBE_BUILDS_DONE=$done_file "$@"
rc=$?
wait "$builder"
build_rc=$(cat "$done_file" 2>/dev/null || echo 1)
if [ "$build_rc" != 0 ]; then
  echo "make test: building the kube-apiserver binaries failed (exit $build_rc)" >&2
  [ "$rc" = 0 ] && rc=$build_rc
fi
exit "$rc"
