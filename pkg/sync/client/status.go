package client

import (
	"sync"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// statusQueue holds the status reports not sent yet, coalesced per Work
// (the latest wins), and the latest report of every Work, which is sent
// again on each new stream. Both are bounded by the number of Works the
// member holds: a Work's entries go when the Work is deleted or pruned.
type statusQueue struct {
	mu      sync.Mutex
	latest  map[string]*v1alpha1.WorkStatus
	pending map[string]bool
	order   []string
	// ready has room for one token: a token means "there may be reports".
	ready chan struct{}
}

func newStatusQueue() *statusQueue {
	return &statusQueue{
		latest:  make(map[string]*v1alpha1.WorkStatus),
		pending: make(map[string]bool),
		ready:   make(chan struct{}, 1),
	}
}

func (q *statusQueue) report(name string, st *v1alpha1.WorkStatus) {
	q.mu.Lock()
	q.latest[name] = st
	q.markLocked(name)
	q.mu.Unlock()
	q.signal()
}

func (q *statusQueue) markLocked(name string) {
	if !q.pending[name] {
		q.pending[name] = true
		q.order = append(q.order, name)
	}
}

func (q *statusQueue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pendingCount is the number of Works with a report not sent yet.
func (q *statusQueue) pendingCount() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// pop takes the oldest pending report.
func (q *statusQueue) pop() (string, *v1alpha1.WorkStatus, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) > 0 {
		name := q.order[0]
		q.order[0] = ""
		q.order = q.order[1:]
		if !q.pending[name] {
			continue // Forgotten while queued.
		}
		delete(q.pending, name)
		if st, ok := q.latest[name]; ok {
			return name, st, true
		}
	}
	q.order = nil // Let the drained array go.
	return "", nil, false
}

// resendAll queues the latest report of every Work again.
func (q *statusQueue) resendAll() {
	q.mu.Lock()
	for name := range q.latest {
		q.markLocked(name)
	}
	q.mu.Unlock()
	q.signal()
}

func (q *statusQueue) forget(name string) {
	q.mu.Lock()
	delete(q.latest, name)
	delete(q.pending, name)
	q.mu.Unlock()
}

// keepOnly forgets the reports of Works not in keep.
func (q *statusQueue) keepOnly(keep []string) {
	want := make(map[string]bool, len(keep))
	for _, n := range keep {
		want[n] = true
	}
	q.mu.Lock()
	for name := range q.latest {
		if !want[name] {
			delete(q.latest, name)
			delete(q.pending, name)
		}
	}
	q.mu.Unlock()
}
