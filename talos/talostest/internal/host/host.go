// Package host is what each part of an emulated Talos node (apid, machined, machined's
// etcd service, the kubelet) is handed of its node: who the node is, its COSI state,
// its event bus, machined's logs, its files and its clock. A part never holds the node
// or the cluster: what it does to another part goes through the state or the bus, as
// on a Talos node, where machined's controllers and services meet in the COSI state.
package host

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
)

// Host is one node, as its parts see it.
type Host struct {
	Name string // the node's hostname
	IP   string // its address (loopback)

	State  state.State // machined's resources: what the parts write and watch
	Events *Bus        // machined's runtime events
	Logs   *Logs       // machined's logs: its own ("machined") and each service's

	// Dir holds the node's files on this machine: its /var (EPHEMERAL) and /system.
	Dir string
	// TimeScale multiplies Talos's own times (KubeletOptions.TimeScale); 0 is real time.
	TimeScale float64

	// Life ends when the node goes away (Cluster.Close).
	Life context.Context //nolint:containedctx
}

// MachinedLog is the name of machined's own log.
const MachinedLog = "machined"

// Logf writes a line of machined's log, as machined prefixes its own.
func (h *Host) Logf(format string, args ...any) {
	line := fmt.Sprintf("%s [talos] %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	h.Logs.Open(MachinedLog).Append([]byte(line))
}

// Path is where a path of the node lives on this machine, "" for a path the emulator
// does not hold: /var (EPHEMERAL) and /system.
func (h *Host) Path(path string) string {
	path = filepath.Clean(path)

	for _, root := range []string{"/var", "/system"} {
		if path == root || strings.HasPrefix(path, root+"/") {
			return filepath.Join(h.Dir, path)
		}
	}

	return ""
}

// Scaled is a Talos time as the emulator plays it (TimeScale applied).
func (h *Host) Scaled(d time.Duration) time.Duration {
	if h.TimeScale > 0 {
		return time.Duration(float64(d) * h.TimeScale)
	}

	return d
}

// Logs are machined's logs by ID, as its log manager keeps them.
type Logs struct {
	mu   sync.Mutex
	logs map[string]*Log
}

// NewLogs returns a log manager holding machined's own log.
func NewLogs() *Logs {
	return &Logs{logs: map[string]*Log{MachinedLog: NewLog()}}
}

// Open returns the log of id, made empty the first time: a service opens its own.
func (l *Logs) Open(id string) *Log {
	l.mu.Lock()
	defer l.mu.Unlock()

	if l.logs[id] == nil {
		l.logs[id] = NewLog()
	}

	return l.logs[id]
}

// Get returns the log of id, if one was opened.
func (l *Logs) Get(id string) (*Log, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()

	log, ok := l.logs[id]

	return log, ok
}
