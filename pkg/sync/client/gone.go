package client

import (
	"slices"
	"sync"
)

// goneQueue holds the names of Works the agent is done with (deleted or
// released on WorkDelete, forgotten on WorkOrphan) until the send loop
// tells the hub with WorkGone. It is per stream: a confirmation lost with
// its stream is not needed on the next one, whose hello no longer lists
// the Work, which the hub takes as the same news.
type goneQueue struct {
	mu    sync.Mutex
	names []string
	ready chan struct{}
}

func newGoneQueue() *goneQueue { return &goneQueue{ready: make(chan struct{}, 1)} }

func (q *goneQueue) add(name string) {
	q.mu.Lock()
	if !slices.Contains(q.names, name) {
		q.names = append(q.names, name)
	}
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// takeAll returns the names queued, oldest first, and empties the queue.
func (q *goneQueue) takeAll() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.names
	q.names = nil
	return out
}
