package host

// machined's runtime events (MachineService.Events, talosctl events, and the progress
// talosctl's reset, reboot and upgrade follow): sources siderolabs/talos v1.13.8,
// internal/app/machined/pkg/runtime/events.go and the Events handler in
// internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go. Every stream
// starts with an empty "hello" event; then the events published since (TailEvents 0),
// the last N before them (TailEvents N, -1 for all kept), or those after TailId, and
// every new one until the caller leaves or the node's API goes away. Events live in
// machined's memory: a reboot forgets them. The emulator publishes what it does
// (sequence, phase and task events of a reset, etcd's service state changes).

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// eventsKept is how many events the emulator keeps for tails.
const eventsKept = 1000

// nodeEvent is one published event; seq orders them.
type nodeEvent struct {
	seq     int
	actorID string
	at      time.Time
	payload proto.Message
}

// Bus is machined's runtime events: the node's event history and its live streams.
// Every part publishes on it what it does; machined's Events call streams it.
type Bus struct {
	mu     sync.Mutex
	seq    int
	events []nodeEvent
	wake   chan struct{} // closed and replaced on every publish
	// sent holds, per open stream, the sequence number it has sent up to; drain waits on it
	sent map[*int]struct{}
	// ended is closed when the API stops: every stream sends what it has and ends, as
	// machined's handler returns at its shutdown, so that a graceful stop completes
	ended chan struct{}
}

// NewBus returns an empty bus.
func NewBus() *Bus {
	return &Bus{wake: make(chan struct{}), sent: map[*int]struct{}{}, ended: make(chan struct{})}
}

// Publish records an event for the actor ("" for the node's own).
func (b *Bus) Publish(actorID string, payload proto.Message) {
	b.mu.Lock()
	defer b.mu.Unlock()

	b.seq++
	b.events = append(b.events, nodeEvent{seq: b.seq, actorID: actorID, at: time.Now(), payload: payload})

	if len(b.events) > eventsKept {
		b.events = b.events[len(b.events)-eventsKept:]
	}

	close(b.wake)
	b.wake = make(chan struct{})
}

// Forget drops the history, as a reboot does.
func (b *Bus) Forget() {
	b.mu.Lock()
	defer b.mu.Unlock()

	b.events = nil
	b.ended = make(chan struct{})
}

// EndStreams ends every open stream once it has sent what was published so far.
func (b *Bus) EndStreams() {
	b.mu.Lock()
	defer b.mu.Unlock()

	select {
	case <-b.ended:
	default:
		close(b.ended)
	}
}

// Drain waits until every open stream has sent every event published so far, or
// the timeout passes: the API is about to go away, and on a node apid's graceful
// stop lets what is queued out first.
func (b *Bus) Drain(timeout time.Duration) {
	deadline := time.Now().Add(timeout)

	for time.Now().Before(deadline) {
		b.mu.Lock()
		done := true

		for sent := range b.sent {
			done = done && *sent >= b.seq
		}
		b.mu.Unlock()

		if done {
			return
		}

		time.Sleep(5 * time.Millisecond)
	}
}

// toMachineEvent is machined's EventInfo.ToMachineEvent: the payload as an Any with
// the "talos/runtime/<message name>" type URL (empty for the hello event).
func (e nodeEvent) toMachineEvent() (*machine.Event, error) {
	data := &anypb.Any{}

	if e.payload != nil {
		value, err := proto.Marshal(e.payload)
		if err != nil {
			return nil, err
		}

		data = &anypb.Any{TypeUrl: "talos/runtime/" + string(e.payload.ProtoReflect().Descriptor().FullName()), Value: value}
	}

	return &machine.Event{Data: data, Id: fmt.Sprintf("%020d", e.seq), ActorId: e.actorID}, nil
}

// Stream is the Events handler's body. The stream is registered before its hello
// goes out: a client that has the hello sees every event published after it, even
// when the handler's goroutine is slow to run on a loaded machine.
func (b *Bus) Stream(ctx context.Context, req *machine.EventsRequest, send func(*machine.Event) error) error {
	hello, err := nodeEvent{actorID: req.WithActorId}.toMachineEvent()
	if err != nil {
		return err
	}

	hello.Id = uuid.NewString()

	var sent int

	b.mu.Lock()
	next, notBefore := b.tailLocked(req)
	sent = next - 1
	b.sent[&sent] = struct{}{}
	ended := b.ended
	b.mu.Unlock()

	defer func() {
		b.mu.Lock()
		delete(b.sent, &sent)
		b.mu.Unlock()
	}()

	if err := send(hello); err != nil {
		return err
	}

	for {
		b.mu.Lock()
		i, _ := slices.BinarySearchFunc(b.events, next, func(e nodeEvent, seq int) int { return e.seq - seq })
		pending := slices.Clone(b.events[i:])
		wake, upTo := b.wake, b.seq
		b.mu.Unlock()

		for _, e := range pending {
			if (req.WithActorId != "" && e.actorID != req.WithActorId) || e.at.Before(notBefore) {
				continue
			}

			me, err := e.toMachineEvent()
			if err != nil {
				return err
			}

			if err := send(me); err != nil {
				return err
			}
		}

		next = upTo + 1

		b.mu.Lock()
		sent = upTo
		b.mu.Unlock()

		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ended:
			if b.sentAll(upTo) {
				return nil
			}
		case <-wake:
		}
	}
}

// sentAll tells whether nothing was published after upTo.
func (b *Bus) sentAll(upTo int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()

	return b.seq <= upTo
}

// tailLocked is where a new stream starts: the sequence number of its first event
// and, for TailSeconds, the oldest time it sends.
func (b *Bus) tailLocked(req *machine.EventsRequest) (int, time.Time) {
	next := b.seq + 1 // TailEvents 0: only what comes next

	switch {
	case req.TailId != "":
		var id int
		if _, err := fmt.Sscanf(req.TailId, "%d", &id); err == nil && id < b.seq {
			next = id + 1
		}
	case req.TailEvents < 0:
		next = 0
	case req.TailEvents > 0:
		next = b.seq + 1 - int(req.TailEvents)
	case req.TailSeconds > 0:
		return 0, time.Now().Add(-time.Duration(req.TailSeconds) * time.Second)
	}

	return next, time.Time{}
}
