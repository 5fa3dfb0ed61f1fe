#!/usr/bin/env bash
# screen-lines.sh BINDIR [FIRST-IP] [NODES] [COLUMNS] [SCENARIO]: how much of a terminal a flagless
# `breakglass recover` takes on a lab's incident (SCENARIO, default kyverno-servicecidr), as an on-call
# engineer sees it. Starts `BINDIR/breakglass-lab up`, runs `BINDIR/breakglass recover` in a
# tmux window COLUMNS wide (default 120), answers y at each question, and prints the rows the
# screen holds at the end (wrapped lines counted as the terminal shows them) and the logical
# lines. The screen is kept in $TMPDIR/screen-lines/screen.txt. Needs tmux and the lab's
# kube-apiserver binaries (make kube-apiserver-rehearse).
set -euo pipefail
bin=$(cd "$1" && pwd); ip=${2:-127.0.5.11}; nodes=${3:-3}; cols=${4:-120}; scenario=${5:-kyverno-servicecidr}
dir=${TMPDIR:-/tmp}/screen-lines; session=screen-lines-$$
rm -rf "$dir"; mkdir -p "$dir"
"$bin/breakglass-lab" up --nodes "$nodes" --scenario "$scenario" --first-ip "$ip" --dir "$dir" >"$dir/up.log" 2>&1 &
lab=$!
trap 'tmux kill-session -t "$session" 2>/dev/null || true; kill $lab 2>/dev/null || true; wait $lab 2>/dev/null || true' EXIT
for _ in $(seq 600); do grep -q 'breakglass.* recover' "$dir/up.log" && break; kill -0 $lab 2>/dev/null || { cat "$dir/up.log"; exit 1; }; sleep 1; done
tmux new-session -d -s "$session" -x "$cols" -y 50
tmux set-option -t "$session" history-limit 10000 >/dev/null
tmux send-keys -t "$session" "clear; BREAKGLASS_STATE_DIR=$dir/state $bin/breakglass --talosconfig $dir/talosconfig recover; echo EXIT=\$?" Enter
for _ in $(seq 900); do
  out=$(tmux capture-pane -p -t "$session" -S -)
  grep -q 'EXIT=[0-9]' <<<"$out" && break
  if tail -3 <<<"$out" | grep -q '\[y/N\] *$'; then tmux send-keys -t "$session" y Enter; fi
  sleep 1
done
tmux capture-pane -p -t "$session" -S - | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' >"$dir/screen.txt"
tmux capture-pane -p -J -t "$session" -S - | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' >"$dir/lines.txt"
# Without the command line and the shell's EXIT= line.
echo "rows $(($(grep -c '' "$dir/screen.txt") - 2)) lines $(($(grep -c '' "$dir/lines.txt") - 2)) at $cols columns; $(grep -o 'EXIT=[0-9]*' "$dir/lines.txt")"
