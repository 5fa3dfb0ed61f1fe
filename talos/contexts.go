package talos

import (
	"context"
	"fmt"
	"slices"
	"strings"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"github.com/breakglass-dev/breakglass/internal/ctxfile"
)

// Contexts lists the talosconfig's contexts, sorted, and its current one
// ("" when it names none). It never creates the file; a file that cannot
// be read is refused in the words every command uses. Each context is
// checked when connected to (Connect).
func Contexts(ctx context.Context, path string) (names []string, current string, err error) {
	raw, err := ctxfile.ReadFile(ctx, path, 0)
	var cfg *clientconfig.Config
	if err == nil && strings.TrimSpace(string(raw)) != "" && !isKubeconfig(raw) {
		cfg, err = clientconfig.FromBytes(raw)
	}
	if cfg == nil || err != nil {
		if _, _, rerr := readTalosconfig(ctx, path, ""); rerr != nil {
			return nil, "", rerr
		}
		return nil, "", fmt.Errorf("talosconfig %s cannot be read: %v", path, err)
	}
	for n := range cfg.Contexts {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(names) == 0 {
		return nil, "", &talosconfigError{fmt.Sprintf("talosconfig %s has no context", path), "get one with: talosctl config merge FILE (or omnictl talosconfig), then pass --talosconfig PATH"}
	}
	return names, cfg.Context, nil
}
