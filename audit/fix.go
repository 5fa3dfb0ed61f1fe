package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/breakglass-dev/breakglass/internal/yamlnode"
)

// maxMatchConditions is the API validation limit
// (pkg/apis/admissionregistration/validation: validateMatchConditions).
const maxMatchConditions = 64

// The conditions the fix adds.
const (
	// ExcludeAPIServerExpression keeps every request of kube-apiserver's own
	// loopback identity away from the webhook. It does not depend on which
	// objects a version writes at start, nor on the backend coming back.
	ExcludeAPIServerExpression = "request.userInfo.username != 'system:apiserver'"
	ExcludeAPIServerName       = "breakglass-exclude-apiserver"
	// The incident's exclusions: enough only when the backend comes back as
	// soon as the default ServiceCIDR exists. With the backend down, v1.34
	// still dies on rbac/bootstrap-roles (LAB.md).
	ExcludeServiceCIDRExpression = `!(request.kind.kind == "ServiceCIDR")`
	ExcludeServiceCIDRName       = "breakglass-exclude-servicecidr"
	ExcludeIPAddressExpression   = `!(request.kind.kind == "IPAddress")`
	ExcludeIPAddressName         = "breakglass-exclude-ipaddress"
)

// Exclusion picks the conditions the fix adds.
type Exclusion string

const (
	// ExcludeAPIServer adds request.userInfo.username != 'system:apiserver' (recommended).
	ExcludeAPIServer Exclusion = "apiserver"
	// ExcludeIncidentKinds adds the incident's ServiceCIDR and IPAddress
	// exclusions. Partial: the result says which risks remain.
	ExcludeIncidentKinds Exclusion = "kinds"
)

// Format is the form of the fix.
type Format string

const (
	// FormatManifest: the input documents, with only matchConditions added.
	FormatManifest Format = "manifest"
	// FormatJSONPatch: one RFC 6902 patch per configuration, guarded by a
	// test of each webhook's name (for kubectl patch --type=json).
	FormatJSONPatch Format = "json-patch"
	// FormatStrategicPatch: one strategic merge patch per configuration,
	// merging webhooks and conditions by name (kubectl patch --type=strategic).
	FormatStrategicPatch Format = "strategic-patch"
)

// FixStyle says what to add, to which webhooks, and in which form.
type FixStyle struct {
	Exclusion Exclusion // default ExcludeAPIServer
	Format    Format    // default FormatManifest
	// All patches every webhook; by default only those whose risk is not none.
	All bool
	// Audit are the options of the audits before and after.
	Audit Options
}

func (s FixStyle) withDefaults() FixStyle {
	if s.Exclusion == "" {
		s.Exclusion = ExcludeAPIServer
	}
	if s.Format == "" {
		s.Format = FormatManifest
	}
	return s
}

// FixChange is the conditions added to one webhook.
type FixChange struct {
	Configuration string                                   `json:"configuration"`
	Kind          Kind                                     `json:"kind"`
	Webhook       string                                   `json:"webhook"`
	Index         int                                      `json:"index"`
	Added         []admissionregistrationv1.MatchCondition `json:"added"`
	RiskBefore    Risk                                     `json:"riskBefore"`
	RiskAfter     Risk                                     `json:"riskAfter"`

	config int // position in the input
}

// FixPlan is a computed fix and its own audit.
type FixPlan struct {
	Style   FixStyle    `json:"-"`
	Changes []FixChange `json:"changes"`
	Before  Report      `json:"before"`
	After   Report      `json:"after"`
	// Partial is true when a patched webhook still has a risk (kinds style).
	Partial bool `json:"partial"`
	// Notes explain what the fix does not cover, and what it changes for
	// ordinary requests (kinds style).
	Notes []string `json:"notes"`

	patched []Configuration
}

// Patched returns copies of the configurations with the fix applied, in
// input order (for example to create or update them through the API).
func (p *FixPlan) Patched() []Configuration {
	out := make([]Configuration, len(p.patched))
	for i, c := range p.patched {
		out[i] = c.deepCopy()
	}
	return out
}

// Fix computes the fix (see PlanFix) and renders it.
func Fix(cfgs []Configuration, style FixStyle) ([]byte, error) {
	plan, err := PlanFix(cfgs, style)
	if err != nil {
		return nil, err
	}
	return plan.Render()
}

// PlanFix adds matchConditions that keep kube-apiserver's own writes away
// from the webhooks at risk, audits the result, and checks that ordinary
// requests still match exactly as before. With ExcludeAPIServer the patched
// webhooks must come out none, else FixVerificationError.
func PlanFix(cfgs []Configuration, style FixStyle) (*FixPlan, error) {
	return PlanFixContext(context.Background(), cfgs, style)
}

// PlanFixContext is PlanFix stopped by ctx (see AuditContext).
func PlanFixContext(ctx context.Context, cfgs []Configuration, style FixStyle) (*FixPlan, error) {
	style = style.withDefaults()
	before, err := AuditContext(ctx, cfgs, style.Audit)
	if err != nil {
		return nil, err
	}
	plan := &FixPlan{Style: style, Before: before, Notes: []string{}, Changes: []FixChange{}}
	var add []admissionregistrationv1.MatchCondition
	switch style.Exclusion {
	case ExcludeAPIServer:
		add = []admissionregistrationv1.MatchCondition{{Name: ExcludeAPIServerName, Expression: ExcludeAPIServerExpression}}
	case ExcludeIncidentKinds:
		add = []admissionregistrationv1.MatchCondition{
			{Name: ExcludeServiceCIDRName, Expression: ExcludeServiceCIDRExpression},
			{Name: ExcludeIPAddressName, Expression: ExcludeIPAddressExpression},
		}
	default:
		return nil, fmt.Errorf("audit: unknown exclusion %q: %w", style.Exclusion, ErrInvalidInput)
	}

	var selected [][2]int // configuration and webhook index of each webhook the fix is for
	for ci, c := range cfgs {
		pc := c.deepCopy()
		for _, w := range c.webhooks() {
			f, _ := before.finding(ci, w.index)
			if !style.All && f.Risk == RiskNone {
				continue
			}
			selected = append(selected, [2]int{ci, w.index})
			existing := pc.matchConditions(w.index)
			added := conditionsToAdd(existing, add)
			if len(added) == 0 {
				continue
			}
			if len(existing)+len(added) > maxMatchConditions {
				return nil, &TooManyConditionsError{Configuration: c.Name(), Webhook: w.name, Existing: len(existing)}
			}
			pc.setMatchConditions(w.index, append(append([]admissionregistrationv1.MatchCondition{}, existing...), added...))
			plan.Changes = append(plan.Changes, FixChange{Configuration: c.Name(), Kind: c.Kind, Webhook: w.name, Index: w.index,
				Added: added, RiskBefore: f.Risk, config: ci})
		}
		plan.patched = append(plan.patched, pc)
	}
	sel, err := plan.addPolicyConditions(cfgs, add)
	if err != nil {
		return nil, err
	}
	selected = append(selected, sel...)

	plan.After, err = AuditContext(ctx, plan.patched, style.Audit)
	if err != nil {
		return nil, err
	}
	var problems []string
	for i := range plan.Changes {
		ch := &plan.Changes[i]
		f, _ := plan.After.finding(ch.config, ch.Index)
		ch.RiskAfter = f.Risk
	}
	// Every webhook the fix was meant for must come out clean, whether
	// conditions were added to it or it already had them.
	for _, sel := range selected {
		f, _ := plan.After.finding(sel[0], sel[1])
		if f.Risk == RiskNone {
			continue
		}
		what := fmt.Sprintf("webhook %q in %q", f.Webhook, f.Configuration)
		if f.ObjectKind != "" {
			what = f.Subject()
		}
		if style.Exclusion == ExcludeAPIServer {
			problems = append(problems, fmt.Sprintf("%s is still %s", what, f.Risk))
		} else {
			plan.Partial = true
			plan.Notes = append(plan.Notes, fmt.Sprintf("%s is still %s after the kind exclusions: %s",
				what, f.Risk, strings.Join(stillBlocked(f), ", ")))
		}
	}
	if plan.Partial {
		plan.Notes = append(plan.Notes, "the kind exclusions work only if the webhook backend comes back as soon as the default ServiceCIDR exists; "+
			"with the backend down, kube-apiserver 1.34 still exits on rbac/bootstrap-roles. Use the apiserver exclusion: "+ExcludeAPIServerExpression)
	}

	if style.Exclusion == ExcludeAPIServer && len(plan.Changes) > 0 {
		plan.Notes = append(plan.Notes, "the condition also skips what kube-apiserver writes on behalf of users through its loopback client, "+
			"such as the IPAddress of a new Service (pkg/registry/core/service/ipallocator); user requests themselves still go to the webhook")
	}

	// The fix must not change what ordinary requests match. Their
	// evaluations are stopped by ctx too, as the audits' are.
	env := newMatchEnv(style.Audit)
	env.ctx = ctx
	for _, msg := range policyOrdinaryDiffs(cfgs, plan.patched, env) {
		if style.Exclusion == ExcludeAPIServer {
			problems = append(problems, msg)
		} else {
			plan.Notes = append(plan.Notes, "also excluded: "+msg)
		}
	}
	for ci, c := range cfgs {
		orig := indexWebhooks(c.webhooks())
		for _, pw := range plan.patched[ci].webhooks() {
			for _, msg := range ordinaryDiffs(orig[pw.index], pw, env) {
				msg = fmt.Sprintf("webhook %q in %q: %s", pw.name, c.Name(), msg)
				if style.Exclusion == ExcludeAPIServer {
					problems = append(problems, msg)
				} else {
					plan.Notes = append(plan.Notes, "also excluded: "+msg)
				}
			}
		}
	}
	if ctx.Err() != nil {
		// A check made of evaluations that never ran says nothing.
		return nil, context.Cause(ctx)
	}
	if len(problems) > 0 {
		return plan, &FixVerificationError{Problems: problems}
	}
	return plan, nil
}

// ordinaryDiffs lists the ordinary requests whose match outcome differs
// between the original and the patched webhook.
func ordinaryDiffs(orig, patched *webhook, env matchEnv) []string {
	var out []string
	for _, r := range ordinaryRequests() {
		if env.done() {
			break
		}
		a, b := orig.match(r, env), patched.match(r, env)
		if a.outcome != b.outcome {
			out = append(out, fmt.Sprintf("%s by %s changes from %s to %s", r.String(), r.userInfo().Username, a.outcome, b.outcome))
		}
	}
	return out
}

func stillBlocked(f Finding) []string {
	seen := map[string]bool{}
	var out []string
	for _, b := range f.Blocks {
		if b.Fatal && !seen[b.Hook] {
			seen[b.Hook] = true
			out = append(out, b.Hook)
		}
	}
	return out
}

func indexWebhooks(ws []*webhook) map[int]*webhook {
	m := map[int]*webhook{}
	for _, w := range ws {
		m[w.index] = w
	}
	return m
}

// conditionsToAdd skips conditions already present (same expression), and
// renames a condition whose name is taken.
func conditionsToAdd(existing, add []admissionregistrationv1.MatchCondition) []admissionregistrationv1.MatchCondition {
	names := map[string]bool{}
	exprs := map[string]bool{}
	for _, c := range existing {
		names[c.Name] = true
		exprs[strings.TrimSpace(c.Expression)] = true
	}
	var out []admissionregistrationv1.MatchCondition
	for _, c := range add {
		if exprs[c.Expression] {
			continue
		}
		name := c.Name
		for i := 2; names[name]; i++ {
			name = fmt.Sprintf("%s-%d", c.Name, i)
		}
		names[name] = true
		out = append(out, admissionregistrationv1.MatchCondition{Name: name, Expression: c.Expression})
	}
	return out
}

func (c Configuration) deepCopy() Configuration {
	out := c
	if c.Validating != nil {
		out.Validating = c.Validating.DeepCopy()
	}
	if c.Mutating != nil {
		out.Mutating = c.Mutating.DeepCopy()
	}
	if c.Policy != nil {
		out.Policy = c.Policy.deepCopy()
	}
	return out
}

func (c Configuration) matchConditions(i int) []admissionregistrationv1.MatchCondition {
	if c.Policy != nil {
		return c.Policy.Spec.MatchConditions
	}
	if c.Validating != nil {
		return c.Validating.Webhooks[i].MatchConditions
	}
	return c.Mutating.Webhooks[i].MatchConditions
}

func (c Configuration) setMatchConditions(i int, mc []admissionregistrationv1.MatchCondition) {
	if c.Policy != nil {
		c.Policy.setMatchConditions(mc)
		return
	}
	if c.Validating != nil {
		c.Validating.Webhooks[i].MatchConditions = mc
		return
	}
	c.Mutating.Webhooks[i].MatchConditions = mc
}

// ordinaryRequests are requests of users and controllers that the fix must
// leave alone: each must match the patched webhook exactly as before.
func ordinaryRequests() []StartupRequest {
	u := func(name string, groups ...string) *authenticationv1.UserInfo {
		return &authenticationv1.UserInfo{Username: name, UID: "uid-" + name, Groups: append(groups, groupAuthenticated)}
	}
	alice := u("alice", "developers")
	admin := u("kubernetes-admin", groupSystemMasters)
	sa := func(ns, name string) *authenticationv1.UserInfo {
		return u("system:serviceaccount:"+ns+":"+name, "system:serviceaccounts", "system:serviceaccounts:"+ns)
	}
	r := func(op, group, version, resource, sub, kind, ns, name string, user *authenticationv1.UserInfo, fields ...string) StartupRequest {
		return StartupRequest{ID: "ordinary", Operation: op, Group: group, Version: version, Resource: resource, Subresource: sub,
			Kind: kind, Namespace: ns, Name: name, Effect: EffectDegraded, user: user, fields: fields}
	}
	return []StartupRequest{
		r("CREATE", "", "v1", "pods", "", "Pod", "team-a", "web", alice, "spec", "status"),
		r("CREATE", "", "v1", "pods", "", "Pod", "team-a", "web-7d4b9", sa("kube-system", "replicaset-controller"), "spec", "status"),
		r("UPDATE", "", "v1", "pods", "status", "Pod", "team-a", "web", u("system:node:worker-1", "system:nodes"), "spec", "status"),
		r("UPDATE", "", "v1", "configmaps", "", "ConfigMap", "team-a", "kube-root-ca.crt", sa("kube-system", "root-ca-cert-publisher"), "data", "binaryData", "immutable"),
		r("UPDATE", "", "v1", "configmaps", "", "ConfigMap", "kube-system", "coredns", admin, "data", "binaryData", "immutable"),
		r("CREATE", "apps", "v1", "deployments", "", "Deployment", "team-a", "web", sa("argocd", "argocd-application-controller"), "spec", "status"),
		r("CREATE", "rbac.authorization.k8s.io", "v1", "clusterroles", "", "ClusterRole", "", "team-a-reader", admin, "rules", "aggregationRule"),
		r("CREATE", "", "v1", "namespaces", "", "Namespace", "team-b", "team-b", alice, "spec", "status"),
		r("UPDATE", "coordination.k8s.io", "v1", "leases", "", "Lease", "kube-system", "kube-controller-manager", u("system:kube-controller-manager"), "spec"),
		r("CREATE", "networking.k8s.io", "v1", "servicecidrs", "", "ServiceCIDR", "", "extra-cidr", admin, "spec", "status"),
		r("CREATE", "networking.k8s.io", "v1", "ipaddresses", "", "IPAddress", "", "10.0.0.20", u("gateway-controller"), "spec"),
	}
}

// Render prints the fix in the plan's format.
func (p *FixPlan) Render() ([]byte, error) {
	switch p.Style.Format {
	case FormatJSONPatch:
		return p.renderPatches(false)
	case FormatStrategicPatch:
		return p.renderPatches(true)
	case FormatManifest:
		return p.renderManifest()
	}
	return nil, fmt.Errorf("audit: unknown fix format %q: %w", p.Style.Format, ErrInvalidInput)
}

// ConfigurationPatch is the patch for one configuration, with the kubectl
// command that applies it.
type ConfigurationPatch struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
	// Type is kubectl patch's --type: "json" or "strategic".
	Type    string          `json:"type"`
	Patch   json.RawMessage `json:"patch"`
	Command string          `json:"command"`
}

// PatchOp is one RFC 6902 operation.
type PatchOp struct {
	Op    string      `json:"op"`
	Path  string      `json:"path"`
	Value interface{} `json:"value"`
}

// strategicPatch merges by name: webhooks and matchConditions both have
// patchMergeKey name (k8s.io/api/admissionregistration/v1/types.go), so it
// does not depend on positions and adding the same condition twice is a no-op.
type strategicPatch struct {
	Webhooks []strategicWebhook `json:"webhooks,omitempty"`
	Spec     *strategicSpec     `json:"spec,omitempty"` // an admission policy
}

type strategicSpec struct {
	MatchConditions []admissionregistrationv1.MatchCondition `json:"matchConditions"`
}

type strategicWebhook struct {
	Name            string                                   `json:"name"`
	MatchConditions []admissionregistrationv1.MatchCondition `json:"matchConditions"`
}

func (p *FixPlan) renderPatches(strategic bool) ([]byte, error) {
	type group struct {
		cp  ConfigurationPatch
		ops []PatchOp
		sp  strategicPatch
	}
	var groups []*group
	byCfg := map[int]*group{}
	for _, ch := range p.Changes {
		g, ok := byCfg[ch.config]
		if !ok {
			kind, apiVersion := kindValidating, admissionGroupVersion
			if ch.Kind == Mutating {
				kind = kindMutating
			}
			if pol := p.patched[ch.config].Policy; pol != nil {
				kind, apiVersion = pol.Kind, pol.APIVersion
			}
			g = &group{cp: ConfigurationPatch{APIVersion: apiVersion, Kind: kind, Name: ch.Configuration, Type: "json"}}
			if strategic {
				g.cp.Type = "strategic"
			}
			byCfg[ch.config] = g
			groups = append(groups, g)
		}
		if strategic && ch.Index < 0 {
			g.sp.Spec = &strategicSpec{MatchConditions: ch.Added}
			continue
		}
		if strategic {
			g.sp.Webhooks = append(g.sp.Webhooks, strategicWebhook{Name: ch.Webhook, MatchConditions: ch.Added})
			continue
		}
		base := "/spec" // an admission policy
		if ch.Index >= 0 {
			// RFC 6902 addresses webhooks by position: guard each with a test of its name.
			base = fmt.Sprintf("/webhooks/%d", ch.Index)
			g.ops = append(g.ops, PatchOp{Op: "test", Path: base + "/name", Value: ch.Webhook})
		}
		if p.existingConditions(ch) == 0 {
			g.ops = append(g.ops, PatchOp{Op: "add", Path: base + "/matchConditions", Value: ch.Added})
		} else {
			for _, c := range ch.Added {
				g.ops = append(g.ops, PatchOp{Op: "add", Path: base + "/matchConditions/-", Value: c})
			}
		}
	}
	out := []ConfigurationPatch{}
	for _, g := range groups {
		var patch []byte
		var err error
		if strategic {
			patch, err = json.Marshal(g.sp)
		} else {
			patch, err = json.Marshal(g.ops)
		}
		if err != nil {
			return nil, err
		}
		g.cp.Patch = patch
		g.cp.Command = fmt.Sprintf("kubectl patch %s %s --type=%s -p %s", strings.ToLower(g.cp.Kind), shellQuote(g.cp.Name), g.cp.Type, shellQuote(string(patch)))
		out = append(out, g.cp)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func (p *FixPlan) existingConditions(ch FixChange) int {
	return len(p.patched[ch.config].matchConditions(ch.Index)) - len(ch.Added)
}

// renderManifest writes the input documents again, in order, with only the
// matchConditions added (YAML; comments and key order of the input are
// kept). Configurations that came from decoded objects are written as new
// documents without server-set metadata.
func (p *FixPlan) renderManifest() ([]byte, error) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# Patched by breakglass audit: matchConditions added to %d webhook(s) (%s).\n", len(p.Changes), p.Style.Exclusion)
	if p.Partial {
		buf.WriteString("# PARTIAL FIX: some webhooks can still block kube-apiserver's start-up; see the audit.\n")
	}
	// Sources in order of first appearance.
	var sources []*source
	seen := map[*source]bool{}
	for _, c := range p.patched {
		if c.src != nil && !seen[c.src] {
			seen[c.src] = true
			sources = append(sources, c.src)
		}
	}
	first := true
	sep := func() {
		if !first {
			buf.WriteString("---\n")
		}
		first = false
	}
	for _, s := range sources {
		docs := make([]*yaml.Node, len(s.docs))
		for i, d := range s.docs {
			docs[i] = copyNode(d)
		}
		for _, ch := range p.Changes {
			c, ok := p.configFor(ch)
			if !ok || c.src != s {
				continue
			}
			if err := addConditionsToNode(docs[c.doc], c.item, ch.Index, ch.Added); err != nil {
				return nil, fmt.Errorf("audit: %s %q: %w", c.TypeName(), c.Name(), err)
			}
		}
		for _, d := range docs {
			if d.Kind == 0 || (d.Kind == yaml.DocumentNode && len(d.Content) == 0) {
				continue
			}
			sep()
			if s.json {
				plainStyle(d)
			}
			enc := yaml.NewEncoder(&buf)
			enc.SetIndent(2)
			if err := enc.Encode(d); err != nil {
				return nil, err
			}
			enc.Close()
		}
	}
	for _, c := range p.patched {
		if c.src != nil {
			continue
		}
		b, err := cleanObjectYAML(c)
		if err != nil {
			return nil, err
		}
		sep()
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

func (p *FixPlan) configFor(ch FixChange) (Configuration, bool) {
	if ch.config < 0 || ch.config >= len(p.patched) {
		return Configuration{}, false
	}
	return p.patched[ch.config], true
}

// clearServerFields drops the metadata the API server sets, which a
// manifest to apply does not carry (Policy.cleanObject drops the same).
func clearServerFields(m *metav1.ObjectMeta) {
	m.ManagedFields, m.ResourceVersion, m.UID = nil, "", ""
	m.Generation = 0
	m.CreationTimestamp = metav1.Time{}
}

func cleanObjectYAML(c Configuration) ([]byte, error) {
	var obj interface{}
	switch {
	case c.Policy != nil:
		obj = c.Policy.cleanObject()
	case c.Validating != nil:
		v := c.Validating.DeepCopy()
		v.APIVersion, v.Kind = admissionGroupVersion, kindValidating
		clearServerFields(&v.ObjectMeta)
		obj = v
	default:
		m := c.Mutating.DeepCopy()
		m.APIVersion, m.Kind = admissionGroupVersion, kindMutating
		clearServerFields(&m.ObjectMeta)
		obj = m
	}
	b, err := sigsyaml.Marshal(obj)
	if err != nil {
		return nil, err
	}
	// sigs.k8s.io/yaml writes the zero creationTimestamp as null; drop it.
	return bytes.ReplaceAll(b, []byte("  creationTimestamp: null\n"), nil), nil
}

func copyNode(n *yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, ch := range n.Content {
		c.Content[i] = copyNode(ch)
	}
	if n.Alias != nil {
		c.Alias = copyNode(n.Alias)
	}
	return &c
}

// plainStyle turns JSON input (flow style, quoted keys) into block YAML;
// the encoder still quotes strings that would read as another type.
func plainStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plainStyle(c)
	}
}

func addConditionsToNode(doc *yaml.Node, item, index int, add []admissionregistrationv1.MatchCondition) error {
	root := doc
	if root.Kind == yaml.DocumentNode {
		root = root.Content[0]
	}
	if item >= 0 && root.Kind == yaml.SequenceNode { // a bare array
		if item >= len(root.Content) {
			return fmt.Errorf("item %d not found", item)
		}
		root = root.Content[item]
	} else if item >= 0 {
		items := yamlnode.Value(root, "items")
		if items == nil || items.Kind != yaml.SequenceNode || item >= len(items.Content) {
			return fmt.Errorf("items[%d] not found", item)
		}
		root = items.Content[item]
	}
	var w *yaml.Node
	if index < 0 { // an admission policy: spec.matchConditions
		if w = yamlnode.Value(root, "spec"); w == nil || w.Kind != yaml.MappingNode {
			return fmt.Errorf("spec not found")
		}
	} else {
		hooks := yamlnode.Value(root, "webhooks")
		if hooks == nil || hooks.Kind != yaml.SequenceNode || index >= len(hooks.Content) {
			return fmt.Errorf("webhooks[%d] not found", index)
		}
		w = hooks.Content[index]
	}
	mc := yamlnode.Value(w, "matchConditions")
	if mc == nil || mc.Kind != yaml.SequenceNode {
		if i := yamlnode.Index(w, "matchConditions"); i >= 0 { // e.g. "matchConditions: null"
			w.Content = append(w.Content[:i], w.Content[i+2:]...)
		}
		mc = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		w.Content = append(w.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "matchConditions"}, mc)
	}
	exprStyle := yaml.DoubleQuotedStyle
	for _, c := range add {
		if strings.Contains(c.Expression, `"`) {
			exprStyle = yaml.SingleQuotedStyle
		}
		if mc.Style&yaml.FlowStyle != 0 {
			exprStyle = 0 // inside a flow sequence, let the encoder choose
		}
		mc.Content = append(mc.Content, &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: "name"},
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: c.Name},
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: "expression"},
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: c.Expression, Style: exprStyle},
		}})
		exprStyle = yaml.DoubleQuotedStyle
	}
	return nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
