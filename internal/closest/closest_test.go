package closest

import (
	"strings"
	"testing"
)

func TestDistanceAndName(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"abc", "", 3}, {"kitten", "sitting", 3}, {"webhook", "webhok", 1}} {
		if got := Distance(tc.a, tc.b); got != tc.d {
			t.Errorf("Distance(%q,%q)=%d want %d", tc.a, tc.b, got, tc.d)
		}
	}
	if got := Name("gatekeeper-validating", []string{"kyverno-policy", "gatekeeper-validating-webhook-configuration", "gk"}); got != "gatekeeper-validating-webhook-configuration" {
		t.Errorf("Name = %q", got)
	}
	present := []string{"enc", "kyverno-resource-validating-webhook-cfg", "kyverno-resource-mutating-webhook-cfg"}
	for typed, want := range map[string]string{
		"kyverno-validating":                     "kyverno-resource-validating-webhook-cfg",
		"kyverno-resource-validating-webhok-cfg": "kyverno-resource-validating-webhook-cfg",
		"KYVERNO-RESOURCE-MUTATING":              "kyverno-resource-mutating-webhook-cfg",
		"enx":                                    "enc",
		"gatekeeper":                             "",
	} {
		if got := Name(typed, present); got != want {
			t.Errorf("Name(%q) = %q, want %q", typed, got, want)
		}
	}
	if Name("x", nil) != "" {
		t.Error("Name of nothing")
	}
}

func TestTypo(t *testing.T) {
	known := []string{"name", "action", "description", "confirm", "optional", "with"}
	for typed, want := range map[string]string{
		"optinal":                "optional",
		"Acton":                  "action",
		"x":                      "",            // one letter is never a typo of anything
		"a":                      "",            // even when it is one edit away from nothing useful
		"foo":                    "",            // too far
		"withh":                  "with",        // first of equally near ones
		"descriptoin":            "description", // two edits
		"":                       "",            // nothing typed
		strings.Repeat("n", 201): "",            // too long to compare
	} {
		if got := Typo(typed, known); got != want {
			t.Errorf("Typo(%q) = %q, want %q", typed, got, want)
		}
	}
	if Typo("webhok-deadlock", []string{"webhook-deadlock", "policy-deadlock"}) != "webhook-deadlock" {
		t.Error("Typo of a builtin name")
	}
	if Typo("x", nil) != "" {
		t.Error("Typo of nothing")
	}
}
