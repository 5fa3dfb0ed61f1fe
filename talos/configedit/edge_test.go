package configedit

import (
	"fmt"
	"testing"
)

const pre = "version: v1alpha1\nmachine:\n  type: controlplane\ncluster:\n  clusterName: lab\n"

// edgeShapes are odd but valid inputs, with the method Disable must take.
var edgeShapes = []struct {
	in     string
	method string
}{
	{pre + "  apiServer:\n    extraArgs:\n      disable-admission-plugins: ~\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      disable-admission-plugins: null # none\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      disable-admission-plugins:\n", MethodMerge},
	{pre + "  apiServer:\n    extraArgs:\n      disable-admission-plugins: \"\"\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      disable-admission-plugins: []\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      disable-admission-plugins: [A1, B1,]\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      disable-admission-plugins: \"A1\\x2cB1\"\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      disable-admission-plugins: 'it''s,B1'\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      disable-admission-plugins   :   A1   # spaced\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      disable-admission-plugins:\n        A1,B1\n", MethodMerge},
	{pre + "  apiServer:\n    extraArgs:\n      disable-admission-plugins: A1,\n        B1\n", MethodMerge},
	{pre + "  apiServer:\n    extraArgs:\n      disable-admission-plugins: |\n        A1\n", MethodMerge},
	{pre + "  apiServer:\n    extraArgs:\n      disable-admission-plugins: !!str A1\n", MethodMerge},
	{pre + "  apiServer:\n    extraArgs:\n      enable-admission-plugins:\n      - ValidatingAdmissionWebhook\n      # gap\n      - B1\n", MethodMerge},
	{pre + "  apiServer:\n    extraArgs:\n      enable-admission-plugins:\n      - B1\n      # gap\n      - C1\n      - ValidatingAdmissionWebhook\n", MethodMerge},
	{pre + "  apiServer:\n    extraArgs:\n      enable-admission-plugins:\n      - B1\n      - ValidatingAdmissionWebhook # go\n      - C1\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      enable-admission-plugins: [ValidatingAdmissionWebhook]\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      enable-admission-plugins: [ValidatingAdmissionWebhook, B1]\n      disable-admission-plugins: [C1]\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      enable-admission-plugins:\n        - B1,ValidatingAdmissionWebhook\n", MethodText},
	{pre + "  apiServer:\n    extraArgs: {enable-admission-plugins: ValidatingAdmissionWebhook}\n", MethodText},
	{pre + "  apiServer:\n    extraArgs: { a: b ,enable-admission-plugins: ValidatingAdmissionWebhook , c: d }\n", MethodText},
	{pre + "  apiServer:\n    extraArgs: {\n      a: b}\n", MethodMerge},
	{pre + "  apiServer:\n    extraArgs:\n    # comment at a lower indentation\n      a: b\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n\n      a: b\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n", MethodText},
	{pre + "  apiServer:\n    extraArgs: ~ # none\n    image: x\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:   null\n", MethodText},
	{pre + "  apiServer: # later\n  controllerManager: {}\n", MethodText},
	{pre + "  apiServer: ~\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n  apiServerX: 1\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:", MethodMerge},
	{pre + "  apiServer:\n    extraArgs: !!null\n", MethodMerge},
	{"version: v1alpha1\ncluster: {apiServer: ~}\n", MethodText},
	{"version: v1alpha1\ncluster: {apiServer: {extraArgs: null, image: x}}\n", MethodText},
	{"version: v1alpha1\ncluster: {apiServer: }\n", MethodMerge},
	{pre + "  apiServer:\n", MethodText},
	{pre + "  apiServer: {}\n", MethodText},
	{"version: v1alpha1\ncluster: {clusterName: lab}\n", MethodText},
	{"version: v1alpha1\ncluster: {clusterName: lab, apiServer: {extraArgs: {}}}\n", MethodText},
	{"---\n---\n" + pre + "---\n# only a comment\n", MethodText},
	{pre + "...\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      a: b", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      enable-admission-plugins: ValidatingAdmissionWebhook\n      a: b", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      a: b\n      enable-admission-plugins: ValidatingAdmissionWebhook", MethodMerge},
	{pre + "  apiServer:\n    extraArgs:\n      \"enable-admission-plugins\" : ValidatingAdmissionWebhook\n      a: b\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      a: b\n      enable-admission-plugins: ValidatingAdmissionWebhook\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      a:\n        - x\n      enable-admission-plugins: ValidatingAdmissionWebhook\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      a: {x: y}\n      enable-admission-plugins: ValidatingAdmissionWebhook\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      a:\n        x: y\n      enable-admission-plugins: ValidatingAdmissionWebhook\n", MethodText},
	{pre + "  apiServer:\n    extraArgs:\n      a: |\n        x\n      enable-admission-plugins: ValidatingAdmissionWebhook\n", MethodMerge},
	{pre + "  apiServer:\n    extraArgs:\n      a: \"é\"\n      'enable-admission-plugins': ValidatingAdmissionWebhook\n", MethodText},
	{pre + "  apiServer:\n    image: x\n    extraArgs:\n      a: b\n    extraArgs2: {}\n", MethodText},
}

// TestEdgeShapes runs the fuzz property on odd but valid inputs and checks the method each one takes.
func TestEdgeShapes(t *testing.T) {
	for i, tc := range edgeShapes {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			checkDisableRestore(t, []byte(tc.in), 0)

			res, err := Disable([]byte(tc.in), Options{Plugins: []string{vaw}})
			if err != nil {
				t.Fatalf("%v\n%s", err, tc.in)
			}

			if res.Method != tc.method {
				t.Errorf("method %q, want %q\n%s\nresult:\n%s", res.Method, tc.method, tc.in, res.Config)
			}
		})
	}
}
