package recovery

// The cluster lock as the engine takes it: in preflight, or before the
// first step of a resume or revert; checked before every change; on a full
// etcd, read before every change and taken once etcd takes writes; taken
// over only from this same incident's dead run.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/breakglass-dev/breakglass/etcd"
)

// lockBeforeSteps takes the cluster lock for a run without a preflight step
// to take it, and journals the outcome.
func (r *run) lockBeforeSteps(ctx context.Context) error {
	warning, err := r.takeLock(ctx)
	if err != nil {
		return err
	}
	msg := "cluster lock taken"
	if warning != "" {
		msg = "cluster lock NOT taken: " + warning
	}
	note := Entry{Kind: "note", Message: msg}
	if boundEtcdCluster(r.entries) == "" {
		// The incident is bound to this etcd (see bind).
		if id := r.etcdClusterID(ctx); id != "" {
			note.Data, _ = json.Marshal(etcdCluster{EtcdClusterID: id})
		}
	}
	return r.journal.Append(note)
}

// takeLock takes the cluster lock for this incident. First, on this host,
// the incident itself: if another process runs it (its lock.pid, written
// when a run starts changing things, names a live process), this run is
// refused even when etcd cannot be reached. When etcd cannot be reached it
// returns a warning instead: an incident must not wait for etcd to take the
// lock, but the operator must know nobody is kept out.
func (r *run) takeLock(ctx context.Context) (warning string, err error) {
	if pid, alive := r.lockOwnerAlive(); alive {
		return "", &incidentBusyError{incident: r.journal.ID, pid: pid, resume: r.target.Cmd("resume " + r.journal.ID)}
	}
	if err := WriteFileAtomic(r.lockPIDPath(), lockPIDRecord(os.Getpid()), 0o600); err != nil {
		return "", fmt.Errorf("record this run's process in the incident: %w", err)
	}
	r.claimed = true
	ec, err := r.etcdClient(ctx)
	if err != nil {
		warning = "cannot take the cluster lock, etcd is unreachable (" + shortErr(err) + "): make sure nobody else runs breakglass on this cluster"
		r.warn(warning)
		return warning, nil
	}
	warning, err = r.acquire(ctx, ec)
	if warning != "" {
		r.warn(warning)
	}
	return warning, err
}

// acquire takes the cluster lock. A lock still held by this same incident,
// by the same user on the same host, whose process is gone, is the lease of
// an earlier run killed before it could release it (it would expire by
// itself within its TTL): it is taken over rather than waited for. On a full
// etcd, which refuses the write, the lock is read instead: another run
// holding it keeps this one out as on a healthy etcd; otherwise the lock is
// deferred until etcd takes writes.
func (r *run) acquire(ctx context.Context, ec *etcd.Client) (warning string, err error) {
	holder := etcd.LockHolder{By: whoami(), Since: time.Now().UTC(), Incident: r.journal.ID, Command: orDefault(r.opts.Command, "recover")}
	var lock *etcd.Lock
	err = errNoLeader
	answers, leader := leaderSeen(ctx, ec)
	if !answers {
		// Every member down (reset, not bootstrapped yet): no lock of
		// anyone's can be held, and a read would wait out its deadline.
		r.lock.deferred = true
		return "cannot take the cluster lock yet, no etcd member answers: it is taken once etcd takes writes again; make sure nobody else runs breakglass on this cluster meanwhile", nil
	}
	if leader {
		actx, cancel := context.WithTimeout(ctx, lockWriteTimeout)
		lock, err = ec.AcquireLock(actx, holder)
		cancel()
	}
	if why := unwritable(err); why != "" && ctx.Err() == nil {
		h, rerr := ec.ReadLock(ctx)
		var unreadable *etcd.UnreadableLockError
		switch {
		case errors.As(rerr, &unreadable):
			// Someone's lock, in words breakglass cannot read: as on an etcd
			// that takes writes, nothing goes past it.
			return "", rerr
		case rerr == nil && h != nil && h.Incident != holder.Incident:
			return "", &etcd.LockHeldError{Holder: *h}
		}
		r.lock.deferred = true
		return "cannot take the cluster lock yet, " + why + " and taking it is a write: it is read before every change and taken once etcd takes writes again; make sure nobody else runs breakglass on this cluster meanwhile", nil
	}
	var held *etcd.LockHeldError
	if errors.As(err, &held) && held.Holder.Incident == holder.Incident && held.Holder.By == holder.By {
		r.progress("etcd", fmt.Sprintf("the cluster lock is still held by this incident's interrupted %s run (since %s), whose process is gone: taking it over", held.Holder.Command, held.Holder.Since.Local().Format(time.RFC3339)))
		if err = ec.TakeOverLock(ctx, holder); err == nil {
			lock, err = ec.AcquireLock(ctx, holder)
		}
	}
	if err != nil {
		return "", err
	}
	r.lock = lockState{held: lock}
	return "", nil
}

// lockWriteTimeout bounds the write that takes the lock: an etcd without
// quorum answers it with nothing.
const lockWriteTimeout = 15 * time.Second

// errNoLeader: no member knows a leader, so no write can be committed;
// the lock is not even tried (a write would wait for a quorum that is not
// there).
var errNoLeader = errors.New("etcdserver: no leader")

// leaderSeen tells whether some member answers, and whether one that
// does knows a leader.
func leaderSeen(ctx context.Context, ec *etcd.Client) (answers, leader bool) {
	st, err := ec.Status(ctx)
	if err != nil {
		var ue *etcd.UnreachableError
		return !errors.As(err, &ue), true // cannot tell: try the write, bounded
	}
	return true, slices.ContainsFunc(st, func(m etcd.MemberStatus) bool { return m.Error == "" && m.Leader != 0 })
}

// unwritable says why etcd cannot take the write that takes the lock ("":
// it can, or err is something else).
func unwritable(err error) string {
	switch {
	case errors.Is(err, errNoLeader):
		return "etcd has no quorum (no member knows a leader)"
	case etcd.IsNoSpace(err):
		return "etcd is full (NOSPACE)"
	case etcd.IsNoQuorum(err):
		return "etcd has no quorum"
	}
	return ""
}

// lockBeforeChange checks, before a change, that the cluster lock this run
// took is still its own (a *etcd.LockLostError says why not and how to
// continue); a deferred one is read (another run holding it refuses the
// change) and taken if etcd takes writes by now.
func (r *run) lockBeforeChange(ctx context.Context) error {
	switch {
	case r.lock.held != nil:
		return r.lock.held.Lost(ctx)
	case r.lock.deferred:
		return r.takeDeferredLock(ctx)
	}
	return nil
}

// takeDeferredLock tries again to take the lock etcd could not take. An
// etcd that cannot be reached at all (its members reset, not bootstrapped
// yet) holds no lock of anyone's: the change goes on, said.
func (r *run) takeDeferredLock(ctx context.Context) error {
	ec, err := r.etcdClient(ctx)
	if err != nil {
		r.progress("etcd", "cannot read the cluster lock before this change ("+shortErr(err)+"): no etcd answers to hold one")
		return nil
	}
	warning, err := r.acquire(ctx, ec)
	if warning != "" && warning != r.lock.said {
		r.progress("etcd", warning)
	}
	r.lock.said = warning
	if err != nil || warning != "" {
		return err
	}
	_ = r.journal.Append(Entry{Kind: "note", Message: "cluster lock taken: etcd takes writes again"})
	r.progress("etcd", "cluster lock taken: etcd takes writes again")
	return nil
}

// incidentBusyError: another process on this host runs the same incident.
type incidentBusyError struct {
	incident string
	pid      int
	resume   string // the command that continues it
}

func (e *incidentBusyError) Error() string {
	return fmt.Sprintf("incident %s is being run by another breakglass process on this host (process id %d)", e.incident, e.pid)
}
func (e *incidentBusyError) Unwrap() error { return ErrConflict }
func (e *incidentBusyError) Hints() []string {
	return []string{"let that run finish, or stop it with Ctrl-C, then: " + e.resume}
}

func (r *run) lockPIDPath() string { return filepath.Join(r.journal.Dir, "lock.pid") }

// unclaim removes this run's lock.pid.
func (r *run) unclaim() { _ = os.Remove(r.lockPIDPath()) }

// lockOwnerAlive tells whether another process that runs this incident
// (lock.pid) is alive. No record (a run killed just after taking the lock)
// counts as gone; a process that cannot be probed counts as running.
func (r *run) lockOwnerAlive() (int, bool) {
	b, err := os.ReadFile(r.lockPIDPath())
	if err != nil {
		return 0, false
	}
	return lockPIDAlive(b)
}

// lockPIDRecord is what lock.pid says of process pid: its id, and where
// /proc tells it, its start time and this boot's id, so that a later run
// can tell the recorded process from another that got its id since.
func lockPIDRecord(pid int) []byte {
	if start := processStart(pid); start != "" {
		return []byte(strconv.Itoa(pid) + " " + start + "\n")
	}
	return []byte(strconv.Itoa(pid) + "\n")
}

// lockPIDAlive reads a lock.pid record: the process it names, and whether
// it still runs. A process with that id that started at another time, or
// in another boot, is not the one recorded: ids are reused.
func lockPIDAlive(record []byte) (int, bool) {
	fields := strings.Fields(string(record))
	if len(fields) == 0 {
		return 0, false
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil || pid <= 0 {
		return 0, false
	}
	if pid == os.Getpid() {
		return pid, false
	}
	p, err := os.FindProcess(pid)
	if err != nil || errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone) {
		return pid, false
	}
	// A run killed (SIGKILL) whose parent has not reaped it yet still takes
	// signal 0, but it is a zombie: it runs nothing and holds nothing.
	if zombie(pid) {
		return pid, false
	}
	if len(fields) > 1 {
		if now := processStart(pid); now != "" && now != strings.Join(fields[1:], " ") {
			return pid, false
		}
	}
	return pid, true
}

// processStart identifies a process beyond its id: its start time in clock
// ticks after boot (field 22 of /proc/PID/stat) and the boot's id, as
// "TICKS BOOT-ID"; "" where /proc cannot tell (not Linux, or gone).
func processStart(pid int) string {
	fields := procStat(pid)
	if len(fields) < 20 {
		return ""
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return fields[22-3] + " " + strings.TrimSpace(string(boot))
}

// zombie tells a process every thread of which has exited (state Z or X in
// /proc/PID/task/*/stat): a main thread alone can be a zombie while others
// run. False where /proc cannot tell.
func zombie(pid int) bool {
	tasks, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "task"))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "task", task.Name(), "stat"))
		i := bytes.LastIndexByte(stat, ')')
		if err != nil || i < 0 {
			return false
		}
		if f := strings.Fields(string(stat[i+1:])); len(f) == 0 || (f[0] != "Z" && f[0] != "X") {
			return false
		}
	}
	return true
}

// procStat is /proc/PID/stat from field 3 (the state) on; nil where /proc
// cannot tell (not Linux, or gone).
func procStat(pid int) []string {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	// The command name (field 2) is in parentheses and may hold anything.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(stat[i+1:]))
}

// dryRunLockNote is what a dry run, which takes no lock, says of the
// cluster lock: a real run would stop at a held or unreadable one. Empty
// when the lock is free (or etcd cannot be reached: preflight says so).
func (r *run) dryRunLockNote(ctx context.Context) string {
	ec, err := r.etcdClient(ctx)
	if err != nil {
		return ""
	}
	h, err := ec.ReadLock(ctx)
	var unreadable *etcd.UnreadableLockError
	var w string
	switch {
	case errors.As(err, &unreadable):
		w = unreadable.Error() + ": a real run would stop here (exit 6); if no breakglass run holds it, break it with: " + r.target.NodesCmd("lock break")
	case err != nil || h == nil:
		return ""
	default:
		w = (&etcd.LockHeldError{Holder: *h}).Error() + ": a real run would stop here (exit 6) until it is released, or broken with: " + r.target.NodesCmd("lock break")
	}
	r.warn(w)
	return "; WARNING: " + w
}
