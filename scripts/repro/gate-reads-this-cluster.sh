#!/usr/bin/env bash
# Black-box reproduction of issue 35's gate faults, on a lab of three nodes
# before its upgrade: each line is a command an on-call engineer would type,
# and the exit code the gate must give. Before issue 35 the first three said
# GO (exit 0).
#
#   scripts/repro/gate-reads-this-cluster.sh        # builds bin/ first
#
# Exit 0 when every answer is right; 1 naming the first that is not.
# Needs the lab's kube-apiserver binaries (make kube-apiserver-rehearse).
set -euo pipefail
cd "$(dirname "$0")/../.."
make -s build >/dev/null
dir=$(mktemp -d)
lab_pid=
cleanup() {
  if [[ -n $lab_pid ]]; then kill -INT "$lab_pid" 2>/dev/null || true; wait "$lab_pid" 2>/dev/null || true; fi
  [[ -n ${KEEP:-} ]] || rm -rf "$dir"
}
trap cleanup EXIT

# A lab of its own addresses, so one already running on 127.0.0.11 is left alone.
bin/breakglass lab up --scenario flags-multicidr --nodes 3 --before-upgrade \
  --dir "$dir/lab" --first-ip 127.0.3.11 >"$dir/lab.log" 2>&1 &
lab_pid=$!
for _ in $(seq 600); do
  grep -q 'upgrade-check' "$dir/lab.log" 2>/dev/null && break
  kill -0 "$lab_pid" 2>/dev/null || { cat "$dir/lab.log"; echo "the lab ended before it was up" >&2; exit 1; }
  sleep 1
done
grep -q 'upgrade-check' "$dir/lab.log" || { echo "the lab was not up in 10 minutes" >&2; exit 1; }

bg() { bin/breakglass --talosconfig "$dir/lab/talosconfig" "$@"; }
expect() {
  local want=$1 what=$2; shift 2
  local got=0
  "$@" >"$dir/out" 2>&1 || got=$?
  if [[ $got != "$want" ]]; then
    cat "$dir/out"
    echo "FAIL: $what: exit $got, want $want" >&2
    exit 1
  fi
  echo "ok   $what (exit $got)"
}

# The check's own line says why, not only the exit code (the flag alone
# makes this lab a no-go).
says() {
  grep -Eq -- "$1" "$dir/out" || { cat "$dir/out"; echo "FAIL: the gate does not say /$1/" >&2; exit 1; }
}

# One control plane named: the flag the target refuses is on all three, and
# each is read (etcd's membership, not the context, is the cluster).
expect 40 "one control plane of three named: no-go" bg -n 127.0.3.12 upgrade-check --to 1.34
says "fix: .*-n 127.0.3.11 patch machineconfig"
says "fix: .*-n 127.0.3.13 patch machineconfig"
# --from that the images read contradict.
expect 40 "--from 1.35 on v1.33 images: no-go" bg upgrade-check --from 1.35 --to 1.36
says "^no-go +upgrade-path .*v1.33"
# A "snapshot" of random bytes with its own sha256 after them.
head -c 1024 /dev/urandom >"$dir/fake.db"
sha256sum "$dir/fake.db" | cut -c1-64 | xxd -r -p >>"$dir/fake.db"
expect 40 "random bytes as the last snapshot: no-go" bg upgrade-check --to 1.34 --last-snapshot "$dir/fake.db"
says "^no-go +rollback-point .*not a bbolt database"
echo "every answer is right"
