package talos

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every context of a talosconfig, sorted, and the current one; a file that
// is no talosconfig is refused as every command refuses it.
func TestContexts(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	names, current, err := Contexts(context.Background(), write("two", "context: prod\ncontexts:\n  staging: {endpoints: [127.0.0.2]}\n  prod: {endpoints: [127.0.0.1]}\n"))
	if err != nil || strings.Join(names, ",") != "prod,staging" || current != "prod" {
		t.Errorf("%v %q %v", names, current, err)
	}
	names, current, err = Contexts(context.Background(), write("nocurrent", "context: \"\"\ncontexts:\n  b: {endpoints: [127.0.0.1]}\n  a: {endpoints: [127.0.0.1]}\n"))
	if err != nil || strings.Join(names, ",") != "a,b" || current != "" {
		t.Errorf("no current: %v %q %v", names, current, err)
	}
	for _, bad := range []string{write("empty", " \n"), write("none", "context: a\n"), filepath.Join(dir, "absent")} {
		if _, _, err := Contexts(context.Background(), bad); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", filepath.Base(bad), err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "absent")); !os.IsNotExist(err) {
		t.Error("a missing talosconfig was created")
	}
}
