package server

import (
	"sync"
	"time"
)

// queue holds the names of one agent's Works that changed and are not sent
// yet. It holds names, not objects: the sender reads each Work from the
// source when it sends, so the latest state always wins and many changes
// to one Work cost one entry. Names come out in the order they first went
// in, so no Work waits behind a Work that keeps changing.
//
// The queue is bounded by max distinct names. Adding a new name to a full
// queue fails and marks the queue overflowed; the session then ends with
// RESOURCE_EXHAUSTED and the agent's reconnect brings a fresh snapshot, so
// a slow agent costs at most max names of memory and never makes the
// caller (the hub's informer) wait.
type queue struct {
	max int

	mu      sync.Mutex
	pending map[string]time.Time // name -> when it was first queued
	order   []string             // FIFO of pending names; order[head:] is live
	head    int
	highest int // the most names ever pending at once

	// ready has room for one token: a token means "there may be work".
	ready chan struct{}
	// onDepth, if set, is told the depth after every change (for metrics).
	onDepth func(int)
}

func newQueue(max int, onDepth func(int)) *queue {
	return &queue{
		max:     max,
		pending: make(map[string]time.Time),
		ready:   make(chan struct{}, 1),
		onDepth: onDepth,
	}
}

// add queues name. It returns false, and queues nothing, when name is new
// and the queue already holds max names.
func (q *queue) add(name string, now time.Time) bool {
	q.mu.Lock()
	if _, ok := q.pending[name]; ok {
		// Coalesced: the sender will read the latest state anyway.
		q.mu.Unlock()
		return true
	}
	if len(q.pending) >= q.max {
		q.mu.Unlock()
		return false
	}
	q.pending[name] = now
	q.order = append(q.order, name)
	depth := len(q.pending)
	q.highest = max(q.highest, depth)
	q.mu.Unlock()

	if q.onDepth != nil {
		q.onDepth(depth)
	}
	select {
	case q.ready <- struct{}{}:
	default: // A token is already waiting; one is enough.
	}
	return true
}

// pop takes the oldest pending name. ok is false when none is pending.
func (q *queue) pop() (name string, queued time.Time, ok bool) {
	q.mu.Lock()
	if q.head == len(q.order) {
		q.mu.Unlock()
		return "", time.Time{}, false
	}
	name = q.order[q.head]
	q.order[q.head] = "" // Let the string go.
	q.head++
	queued = q.pending[name]
	delete(q.pending, name)
	if q.head == len(q.order) {
		// Drained: reuse the backing array from the start.
		q.order, q.head = q.order[:0], 0
	} else if q.head > 1024 && q.head*2 > len(q.order) {
		// Mostly consumed: copy the live tail down so the array does not
		// grow without bound under steady traffic.
		q.order = append(q.order[:0], q.order[q.head:]...)
		q.head = 0
	}
	depth := len(q.pending)
	q.mu.Unlock()

	if q.onDepth != nil {
		q.onDepth(depth)
	}
	return name, queued, true
}

// depth returns how many names are pending now and the most ever pending.
func (q *queue) depth() (now, highest int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending), q.highest
}
