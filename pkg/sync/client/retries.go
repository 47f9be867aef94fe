package client

import (
	"slices"
	"time"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// pruneKey is the retries key of a failed SnapshotComplete call. It cannot
// collide with a Work name, which never contains a slash.
const pruneKey = "/snapshot-complete"

// retry is one failed applier call, to be made again.
type retry struct {
	work   *v1alpha1.Work // Apply this, unless delete, orphan or prune is set.
	delete bool           // Delete the Work.
	orphan bool           // Orphan the Work.
	// prune calls SnapshotComplete again (pruneKey), with what the hub
	// wants at the time of the retry.
	prune bool
	// confirmed is passed to that SnapshotComplete: the prune was
	// confirmed by an admin.
	confirmed bool
	attempt   int
	at        time.Time
}

// retries holds the failed applier calls of one stream, one per Work (a
// newer message for a Work replaces its retry), so they are bounded by the
// number of Works. They are dropped with the stream: after a reconnect the
// hello's held list makes the hub send again whatever did not get applied.
type retries struct {
	initial, max time.Duration
	items        map[string]*retry
	t            *time.Timer
}

func newRetries(initial, max time.Duration) *retries {
	return &retries{initial: initial, max: max, items: make(map[string]*retry)}
}

func (r *retries) add(name string, rt retry) {
	rt.attempt = 0
	rt.at = time.Now().Add(backoff(0, r.initial, r.max))
	r.items[name] = &rt
}

func (r *retries) again(name string, rt retry) {
	rt.attempt++
	rt.at = time.Now().Add(backoff(rt.attempt, r.initial, r.max))
	r.items[name] = &rt
}

func (r *retries) forget(name string) { delete(r.items, name) }

func (r *retries) take(name string) (retry, bool) {
	rt, ok := r.items[name]
	if !ok {
		return retry{}, false
	}
	delete(r.items, name)
	return *rt, true
}

// keepOnly drops the Apply retries of Works not in keep; Delete retries
// stay, as those Works are to go anyway.
func (r *retries) keepOnly(keep []string) {
	want := make(map[string]bool, len(keep))
	for _, n := range keep {
		want[n] = true
	}
	for name, rt := range r.items {
		if rt.work != nil && !want[name] {
			delete(r.items, name)
		}
	}
}

// due lists the names whose retry time has come, oldest first.
func (r *retries) due(now time.Time) []string {
	var names []string
	for name, rt := range r.items {
		if !rt.at.After(now) {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, func(a, b string) int { return r.items[a].at.Compare(r.items[b].at) })
	return names
}

// timer returns a timer that fires at the earliest retry, or nil when
// there is none.
func (r *retries) timer() *time.Timer {
	if len(r.items) == 0 {
		r.stop()
		return nil
	}
	var first time.Time
	for _, rt := range r.items {
		if first.IsZero() || rt.at.Before(first) {
			first = rt.at
		}
	}
	d := max(time.Until(first), 0)
	if r.t == nil {
		r.t = time.NewTimer(d)
	} else {
		r.t.Reset(d)
	}
	return r.t
}

func (r *retries) stop() {
	if r.t != nil {
		r.t.Stop()
	}
}
