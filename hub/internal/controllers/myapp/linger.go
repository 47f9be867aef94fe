package myapp

import (
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// An app over many clusters gets a Work event from each of them: when it
// is created, when its image changes, when the hub restarts, every
// member's report of its Work is one event, and each event used to bring
// a reconcile of the whole app and, most of the time, a status write
// whose cluster list (one entry per cluster) is the biggest object the
// hub writes. 100 MyApps Duplicated to 1,000 members made that hundreds of
// writes a second of 100-KiB-plus objects: the hub cluster's apiserver
// fell so far behind that the hub's Lease renewal missed its deadline
// (docs/benchmarks.md, Scale).
//
// So the Work events of such an app linger: after a reconcile of an app
// whose status names lingerMinClusters clusters or more, its Work events
// enqueue it no sooner than linger(clusters) after that reconcile began.
// The events of that window are coalesced into one reconcile at its end
// (the queue keeps one entry per app, at the earliest time asked for); the
// first event after a quiet window is served at once. Every other event
// (a spec change, a MemberCluster change, a dependency) is served at once
// as before, so a lost cluster still fails over without waiting. The cost
// is honest and bounded: the status of an app over N >= 20 clusters can
// lag its members' reports by up to linger(N) (100 ms at 20 clusters, 5 s
// from 1,000). Apps over fewer clusters, the common case, are untouched.
const (
	lingerMinClusters = 20
	lingerPerCluster  = 5 * time.Millisecond
	maxLinger         = 5 * time.Second
)

// linger is how long the Work events of an app whose status names
// clusters clusters wait after its last reconcile began.
func linger(clusters int) time.Duration {
	if clusters < lingerMinClusters {
		return 0
	}
	return min(maxLinger, time.Duration(clusters)*lingerPerCluster)
}

// lingers remembers, per app over lingerMinClusters clusters or more,
// when its linger ends: its last reconcile's start plus linger(clusters).
type lingers struct {
	m sync.Map // types.NamespacedName -> *atomic.Int64 (Unix nanoseconds)
}

// reconciled records that a reconcile of app, whose status names clusters
// clusters, began at now.
func (l *lingers) reconciled(app types.NamespacedName, clusters int, now time.Time) {
	d := linger(clusters)
	if d == 0 {
		l.m.Delete(app)
		return
	}
	v, ok := l.m.Load(app)
	if !ok {
		v, _ = l.m.LoadOrStore(app, new(atomic.Int64))
	}
	v.(*atomic.Int64).Store(now.Add(d).UnixNano())
}

// wait is how long a Work event of app seen at now waits before it
// enqueues app: zero unless app is over many clusters and its last
// reconcile began less than its linger ago.
func (l *lingers) wait(app types.NamespacedName, now time.Time) time.Duration {
	v, ok := l.m.Load(app)
	if !ok {
		return 0
	}
	return max(0, time.Unix(0, v.(*atomic.Int64).Load()).Sub(now))
}

// forget drops app (deleted).
func (l *lingers) forget(app types.NamespacedName) {
	l.m.Delete(app)
}
