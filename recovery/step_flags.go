package recovery

// The steps that edit kube-apiserver's own flags in
// cluster.apiServer.extraArgs: extraargs.remove takes out those it refuses
// at start (meant to stay), and the engine's own extraargs.restore (revert)
// puts the recorded values back exactly. Each plans with planEach (the
// nodes' TRY dry run); the loop shows, confirms, journals and applies.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/breakglass-dev/breakglass/internal/failure"
	"github.com/breakglass-dev/breakglass/internal/flaglist"
	"github.com/breakglass-dev/breakglass/runbooks"
	"github.com/breakglass-dev/breakglass/talos"
	"github.com/breakglass-dev/breakglass/talos/configedit"
)

func init() {
	register((*run).removeFlags)
	register((*run).restoreFlags)
}

// ExtraArgsRestoreParams: extraargs.restore puts back into
// cluster.apiServer.extraArgs what the incident's extraargs.remove steps
// took out, as their apply records keep it (revert).
type ExtraArgsRestoreParams struct{}

func (*ExtraArgsRestoreParams) Action() runbooks.Action { return ActionExtraArgsRestore }

// FlagEdit is one node's edit of cluster.apiServer.extraArgs, as the apply
// record keeps it: the config's hashes and the old values, never the
// config.
type FlagEdit struct {
	Node             string                 `json:"node"`
	ConfigHashBefore string                 `json:"configHashBefore"`
	ConfigHashAfter  string                 `json:"configHashAfter"`
	Changes          []configedit.ArgChange `json:"changes"`
	Record           configedit.ArgsRecord  `json:"record"`
}

// flagEdits is what an extraargs.remove step's apply record keeps.
type flagEdits struct {
	Edits []FlagEdit `json:"edits"`
}

// FlagsResult is what an extraargs step did on each node.
type FlagsResult struct {
	said
	Plan  *AdmissionPlan `json:"-"`
	Edits []FlagEdit     `json:"edits"`
	// Stays: the edit is meant to stay (extraargs.remove), and where else
	// to make it.
	Stays string `json:"stays,omitempty"`
}

// JournalData keeps the edits and, per node, what was done (applied, not
// applied when interrupted, failed): the timeline says each change.
func (f *FlagsResult) JournalData() any {
	return struct {
		Edits []FlagEdit `json:"edits"`
		Stays string     `json:"stays,omitempty"`
		Nodes any        `json:"nodes,omitempty"`
	}{f.Edits, f.Stays, f.Plan.JournalData()}
}

// flagsStay is what the summary says of an extraargs.remove that worked.
const flagsStay = "this edit is meant to stay: make the same change where the machine configs come from " +
	"(the Omni cluster template or config patch, talhelper's talconfig.yaml, the Terraform talos_machine_configuration " +
	"config_patches, or your patch files), or the next apply brings the flags back; breakglass revert puts back what this incident took out, keeping later edits"

func (r *run) removeFlags(ctx context.Context, s Step, p *runbooks.ExtraArgsRemoveParams) (*Plan, error) {
	flags := p.Flags // the runbook's, or the diagnosis's (its decision filled them)
	if len(flags) == 0 {
		return nil, failure.Input("run it after a diagnose step, or name them: with: {flags: [feature-gates:NAME=VALUE, KEY]}",
			"step %s: no flag to take out (the diagnosis named none)", s.Name)
	}
	removals, err := removalsOf(flags)
	if err != nil {
		return nil, err
	}
	if err := r.tc.RequireAdmin("editing kube-apiserver's flags"); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	edits := map[string]FlagEdit{}
	plan, err := planEach(ctx, r.tc, "remove-flags", r.flagsOptions(), func(_ context.Context, n *NodeChange, cfg talos.MachineConfig) error {
		res, err := configedit.RemoveArgs(cfg.Bytes, removals)
		if err != nil {
			return err
		}
		for _, nf := range res.NotFound {
			what := nf.Key
			if len(nf.Items) > 0 {
				what += " " + strings.Join(nf.Items, ",")
			}
			n.Unknowns = append(n.Unknowns, "not in this node's cluster.apiServer.extraArgs: "+what+" (already taken out, or rendered by Talos itself: then change the Talos setting behind it)")
		}
		if !res.Changed {
			n.Action, n.Reason = "none", "none of the refused flags is in its extraArgs"
			return nil
		}
		n.Action, n.newConfig, n.Method = "remove-flags", res.Config, res.Method
		n.ConfigHashAfter = talos.HashConfig(res.Config)
		mu.Lock()
		edits[n.Node] = FlagEdit{Node: n.Node, ConfigHashBefore: n.ConfigHashBefore, ConfigHashAfter: n.ConfigHashAfter, Changes: res.Changes, Record: res.Record}
		mu.Unlock()
		return nil
	})
	if plan == nil {
		return nil, err
	}
	return r.flagsPlan(plan, err, edits, true)
}

func (r *run) restoreFlags(ctx context.Context, _ Step, _ *ExtraArgsRestoreParams) (*Plan, error) {
	recorded := journaledFlagEdits(r.entries)
	if len(recorded) == 0 {
		return nil, skip("this incident took no flag out of cluster.apiServer.extraArgs")
	}
	if err := r.tc.RequireAdmin("editing kube-apiserver's flags"); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	edits := map[string]FlagEdit{}
	plan, err := planEach(ctx, r.tc, "restore-flags", r.flagsOptions(), func(_ context.Context, n *NodeChange, cfg talos.MachineConfig) error {
		mine := recorded[n.Node]
		if len(mine) == 0 {
			n.Action, n.Reason = "none", "this incident did not change this node's flags"
			return nil
		}
		out := cfg.Bytes
		var changes []configedit.ArgChange
		var kept []string
		for i := len(mine) - 1; i >= 0; i-- { // newest first, back to the oldest
			pb, err := configedit.PutBackArgs(out, mine[i].Record, mine[i].Changes)
			if err != nil {
				return err
			}
			out, changes, kept = pb.Config, append(changes, pb.Changes...), append(kept, pb.Kept...)
		}
		n.ByteExact = talos.HashConfig(out) == mine[0].ConfigHashBefore
		if bytes.Equal(out, cfg.Bytes) {
			n.Action, n.Reason = "none", "the flags this incident took out are back already"
			return nil
		}
		n.Action, n.newConfig = "restore-flags", out
		n.ConfigHashAfter = talos.HashConfig(out)
		for _, k := range kept {
			n.Unknowns = append(n.Unknowns, "kept as it is today: "+k)
		}
		mu.Lock()
		edits[n.Node] = FlagEdit{Node: n.Node, ConfigHashBefore: n.ConfigHashBefore, ConfigHashAfter: n.ConfigHashAfter, Changes: changes}
		mu.Unlock()
		return nil
	})
	if plan == nil {
		return nil, err
	}
	return r.flagsPlan(plan, err, edits, false)
}

func (r *run) flagsOptions() AdmissionOptions {
	o := r.admissionOptions()
	o.Plugins = nil
	return o
}

// flagsPlan is the step's plan of an extraArgs edit: applied on every node
// at once, each waiting for its new pod. The old values a removal takes out
// go into the apply record, before any node changes.
func (r *run) flagsPlan(p *AdmissionPlan, planErr error, edits map[string]FlagEdit, remove bool) (*Plan, error) {
	res := &FlagsResult{Plan: p}
	for _, n := range p.Nodes {
		if e, ok := edits[n.Node]; ok {
			res.Edits = append(res.Edits, e)
		}
	}
	plan := &Plan{View: flagsView(p, edits, remove), Result: res}
	if planErr != nil {
		return plan, planErr
	}
	if err := p.PlanErr(); err != nil {
		return plan, err // a node left behind would keep crash-looping
	}
	if !p.Changes() {
		res.said = said("nothing to change: " + p.Nodes[0].Reason)
		return plan, nil
	}
	verb := "Take these flags out of cluster.apiServer.extraArgs"
	if !remove {
		verb = "Put the recorded flags back into cluster.apiServer.extraArgs"
	}
	plan.Change = true
	plan.Ask = []Question{{Text: fmt.Sprintf("%s on %d node(s)?", verb, p.CountChanges())}}
	plan.DryRun = "the nodes validated the change; nothing was applied"
	plan.Undo = nothingToUndo("put back the flags this incident took out", "it undoes the removal")
	if remove {
		plan.Record = flagEdits{Edits: res.Edits}
		plan.Undo = undoneBy(ActionExtraArgsRestore, "take "+describeRemoved(edits)+" out of cluster.apiServer.extraArgs")
	}
	plan.Apply = func(ctx context.Context) (Result, error) {
		failed, stop := p.eachChange(ctx, func(n *NodeChange) error { return r.applyFlagsNode(ctx, n, edits[n.Node], remove) })
		if stop != nil {
			return res, stop
		}
		if err := failures(failed, len(p.Nodes)-len(failed)); err != nil {
			return res, err
		}
		if remove {
			res.Stays = flagsStay
			res.said = said(fmt.Sprintf("took %s out of cluster.apiServer.extraArgs on %d node(s); %s", describeRemoved(edits), p.CountChanges(), flagsStay))
		} else {
			res.said = said(fmt.Sprintf("put %s back into cluster.apiServer.extraArgs on %d node(s)%s; kube-apiserver refused them, so expect it to crash-loop again (breakglass diagnose says; breakglass recover takes them out again)", describeRemoved(edits), p.CountChanges(), byteExactNote(p)))
		}
		return res, nil
	}
	return plan, nil
}

// applyFlagsNode applies one node's edit and waits for its new pod: running
// without the flags (remove), or rendered with them again (restore: it may
// well crash-loop again, which is what was asked for).
func (r *run) applyFlagsNode(ctx context.Context, n *NodeChange, e FlagEdit, remove bool) error {
	say := func(format string, args ...any) { r.progress(n.Node, fmt.Sprintf(format, args...)) }
	if err := unchangedSincePlan(ctx, r.tc, n); err != nil {
		return err
	}
	say("applying (mode no-reboot)")
	if err := applyPlanned(ctx, r.fx.Nodes, n, talos.ApplyRequest{Config: n.newConfig, Mode: talos.NoReboot}, say); err != nil {
		return err
	}
	if r.opts.NoWait {
		return nil
	}
	var items []argItem
	for _, c := range e.Changes {
		for _, it := range flaglist.Split(c.Removed...) {
			items = append(items, argItem{c.Key, it})
		}
	}
	timeout := orDuration(time.Duration(r.opts.WaitTimeout), runbooks.DefaultWait)
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	phase := ""
	kick := kubeletKick{restart: restarterOf(r.fx.Nodes, !r.opts.NoKubeletRestart), n: n, say: say}
	err := r.tc.WatchAPIServer(wctx, n.Node, n.nodeName, 100*time.Millisecond, func(o talos.PodObservation) bool {
		next := flagsPhase(o, n, items, remove)
		if next == phaseDone {
			return true
		}
		kick.look(wctx, o, flagsRendered(o, items, remove))
		if next != phase {
			phase = next
			say("%s", next)
		}
		return false
	})
	// The deadline may end the wait inside a read of the node, whose error
	// then says unreachable: the wait timed out all the same.
	if err != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(wctx.Err(), context.DeadlineExceeded)) && ctx.Err() == nil {
		return &talos.NodeError{Node: n.Node, Op: "wait for kube-apiserver", Err: fmt.Errorf("%w after %s: %s", ErrTimeout, timeout, phase)}
	}
	if err != nil {
		return err
	}
	n.Outcome = "running"
	if remove {
		say("kube-apiserver runs in the new pod without the refused flags")
	} else {
		say("kube-apiserver's pod is rendered with the recorded flags again")
	}
	return nil
}

// argItem is one item an edit took out of an extraArgs key.
type argItem struct{ key, item string }

// flagsPhase is what the wait after an extraArgs edit waits for, from one
// look at the node: the pod rendered with the edit, the kubelet's new pod,
// and (remove) its container running. With the refused flags back
// (restore) the new pod exits at once, which is what was asked for: it is
// done when the new pod is there.
func flagsPhase(o talos.PodObservation, n *NodeChange, items []argItem, remove bool) string {
	if !flagsRendered(o, items, remove) {
		return "waiting for the node to re-render the static pod with the new flags"
	}
	if _, ok := newPod(o.Pods, n.podsBefore); ok && !remove {
		return phaseDone
	}
	p, _ := newPodPhase(o.Pods, n.podsBefore)
	return p
}

// flagsRendered tells whether the node has rendered the pod with the edit.
func flagsRendered(o talos.PodObservation, items []argItem, remove bool) bool {
	for _, it := range items {
		if slices.Contains(o.Pod.FlagList(it.key), it.item) == remove {
			return false
		}
	}
	return true
}

// journaledFlagEdits are the edits the incident's extraargs.remove steps
// recorded in their apply records, per node, oldest first. An edit a
// killed run recorded and never applied is harmless: putting back a value
// that is there changes nothing.
func journaledFlagEdits(entries []Entry) map[string][]FlagEdit {
	out := map[string][]FlagEdit{}
	for _, e := range entries {
		if e.Kind != "apply" || e.Action != string(runbooks.ActionExtraArgsRemove) || len(e.Data) == 0 {
			continue
		}
		var fe flagEdits
		if json.Unmarshal(e.Data, &fe) != nil {
			continue
		}
		for _, ed := range fe.Edits {
			if ed.Record.Version == configedit.ArgsRecordVersion && len(ed.Record.Keys) > 0 {
				out[ed.Node] = append(out[ed.Node], ed)
			}
		}
	}
	return out
}

// flagsRevertSteps are the revert steps for the flags an incident took out.
func flagsRevertSteps(entries []Entry) []Step {
	if len(journaledFlagEdits(entries)) == 0 {
		return nil
	}
	return []Step{{Name: "revert-flags", Params: &ExtraArgsRestoreParams{}, Confirm: true,
		Description: "Put back into cluster.apiServer.extraArgs, exactly, the flags this incident took out (kube-apiserver refused them: it will crash-loop again)."}}
}

func describeRemoved(edits map[string]FlagEdit) string {
	var out []string
	for _, e := range edits {
		for _, c := range e.Changes {
			for _, it := range c.Removed {
				s := c.Key + " " + it
				if c.After.Form == configedit.FormAbsent && len(c.Removed) == 1 && !strings.Contains(it, "=") {
					s = "--" + c.Key + "=" + it
				}
				if !slices.Contains(out, s) {
					out = append(out, s)
				}
			}
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func byteExactNote(p *AdmissionPlan) string {
	for _, n := range p.Nodes {
		if n.Action != "none" && !n.ByteExact {
			return ""
		}
	}
	return "; every config is byte-identical to what it was before the incident"
}

// flagsView is the plan for the operator to read before confirming.
func flagsView(p *AdmissionPlan, edits map[string]FlagEdit, remove bool) View {
	verb := "take kube-apiserver's refused flags out of cluster.apiServer.extraArgs"
	if !remove {
		verb = "put the flags this incident took out back into cluster.apiServer.extraArgs"
	}
	v := View{Head: fmt.Sprintf("Plan: %s on %d node(s)\n", verb, len(p.Nodes)+len(p.Failed))}
	if p.Changes() && p.opts.Wait {
		v.Head += kubeletPlanLine(p.opts.KubeletRestart)
	}
	for _, n := range p.Nodes {
		v.Parts = append(v.Parts, ViewPart{Node: n.Node, About: fmt.Sprintf("cluster %s, Talos %s", orNone(n.Cluster), n.TalosVersion),
			Body: nodeFlagsPlan(n, edits[n.Node], remove), Detail: nodeDryRun(n)})
	}
	var foot strings.Builder
	for _, f := range p.Failed {
		fmt.Fprintf(&foot, "  node %s: cannot be planned (see below); it will not be changed\n", f)
	}
	if remove {
		fmt.Fprintf(&foot, "Only those lines change; every other byte of each config stays. Unlike an admission bypass, %s.\n", flagsStay)
	} else {
		fmt.Fprintln(&foot, "WARNING: kube-apiserver refused these flags: with them back it will exit at once again, on every node.")
	}
	v.Foot = foot.String()
	return v
}

// nodeFlagsPlan is one node's part of the plan, without the node's name.
func nodeFlagsPlan(n *NodeChange, e FlagEdit, remove bool) string {
	var b strings.Builder
	if n.Action == "none" {
		fmt.Fprintf(&b, "    nothing to do: %s\n", n.Reason)
	}
	direction := "takes out"
	if !remove {
		direction = "puts back"
	}
	for _, c := range e.Changes {
		fmt.Fprintf(&b, "    %s: %s -> %s   (%s %s)\n", c.Key, argText(c.Before), argText(c.After), direction, strings.Join(c.Removed, ", "))
	}
	for _, u := range n.Unknowns {
		fmt.Fprintf(&b, "    note: %s\n", u)
	}
	if n.Reason != "" && n.Action != "none" {
		fmt.Fprintf(&b, "    note: %s\n", n.Reason)
	}
	if n.PendingChange != "" {
		fmt.Fprintf(&b, "    WARNING: %s\n", n.PendingChange)
	}
	if !remove && n.ByteExact && n.Action != "none" {
		fmt.Fprintln(&b, "    the config will be byte-identical to what it was before the incident")
	}
	writeNodeEdit(&b, n)
	return b.String()
}

func argText(v configedit.ArgValue) string {
	switch v.Form {
	case configedit.FormAbsent:
		return "(absent)"
	case configedit.FormList:
		return "[" + strings.Join(v.Values, ", ") + "]"
	}
	return fmt.Sprintf("%q", strings.Join(v.Values, ""))
}

// removalsOf turns KEY[:ITEM] flags into configedit removals, key by key.
func removalsOf(flags []string) ([]configedit.ArgRemoval, error) {
	var out []configedit.ArgRemoval
	for _, fl := range flags {
		key, item, err := runbooks.ParseExtraArgFlag(fl)
		if err != nil {
			return nil, failure.Input("name a whole key (cloud-provider) or KEY:ITEM (feature-gates:MultiCIDRServiceAllocator=false)", "%v", err)
		}
		i := slices.IndexFunc(out, func(r configedit.ArgRemoval) bool { return r.Key == key })
		switch {
		case i < 0 && item == "":
			out = append(out, configedit.ArgRemoval{Key: key})
		case i < 0:
			out = append(out, configedit.ArgRemoval{Key: key, Items: []string{item}})
		case item == "" || len(out[i].Items) == 0:
			out[i].Items = nil // the whole key goes anyway
		default:
			out[i].Items = append(out[i].Items, item)
		}
	}
	return out, nil
}
