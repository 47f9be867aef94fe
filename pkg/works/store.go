package works

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/log"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/apply"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	syncclient "github.com/flotilla-dev/flotilla/pkg/sync/client"
)

// Reporter sends a Work's status to the hub; the sync client's ReportStatus
// (coalescing, never blocking) is one.
type Reporter interface {
	ReportStatus(name string, st *flotillav1.WorkStatus)
}

// entry is one Work the agent holds.
type entry struct {
	mu sync.Mutex
	// work is the latest version the hub sent.
	work *flotillav1.Work
	// results are the outcome of its last apply.
	results []apply.Result
	// reported is the last status sent to the hub.
	reported *flotillav1.WorkStatus
	// recheck wakes the reconciler at recheckAt, when a status computed
	// asked to be computed again (see apply.Applier.Status).
	recheck   *time.Timer
	recheckAt time.Time
}

// Store holds the Works the hub sent and applies them. It implements the
// sync client's Applier.
type Store struct {
	applier  *apply.Applier
	reporter Reporter
	health   HealthStatus
	wake     func(name string)
	now      func() time.Time
	// observe, when set, hears of every apply (SetApplyObserver).
	observe ApplyObserver

	mu    sync.RWMutex
	works map[string]*entry
}

var _ syncclient.Applier = (*Store)(nil)

// NewStore returns a Store that applies with applier.
func NewStore(applier *apply.Applier) *Store {
	return &Store{
		applier: applier,
		now:     time.Now,
		works:   map[string]*entry{},
	}
}

// SetReporter sets where status goes (the sync client, once built).
func (s *Store) SetReporter(r Reporter) { s.reporter = r }

// HealthStatus gives the last evaluation of a Work's health signals (the
// health Runner's Status).
type HealthStatus func(name string, spec *flotillav1.WorkHealth) []flotillav1.SignalStatus

// ApplyObserver hears of each apply the Store makes: how long it took,
// its error, and whether it was a repair (the Work reconciler re-applied a
// Work whose objects drifted or whose last apply failed) rather than an
// apply of what the source sent (Apply, Sync).
type ApplyObserver func(repair bool, took time.Duration, err error)

// SetApplyObserver sets the observer of applies (the agent's metrics);
// call it before the Store is used.
func (s *Store) SetApplyObserver(o ApplyObserver) { s.observe = o }

// SetHealth sets where a Work's reported signals come from.
func (s *Store) SetHealth(h HealthStatus) { s.health = h }

// HealthWorks returns copies of the held Works that carry spec.health
// and that due (nil: all) says are due for an evaluation, and the names of
// all held Works with spec.health.
func (s *Store) HealthWorks(due func(name string, uid types.UID) bool) ([]*flotillav1.Work, []string) {
	s.mu.RLock()
	entries := make([]*entry, 0, len(s.works))
	for _, e := range s.works {
		entries = append(entries, e)
	}
	s.mu.RUnlock()
	var out []*flotillav1.Work
	var names []string
	for _, e := range entries {
		e.mu.Lock()
		if e.work != nil && e.work.Spec.Health != nil {
			names = append(names, e.work.Name)
			if due == nil || due(e.work.Name, e.work.UID) {
				out = append(out, e.work.DeepCopy())
			}
		}
		e.mu.Unlock()
	}
	return out, names
}

// SetWake sets how Wake reaches the reconciler that drives the Store:
// the agent's Controller (Controller.Watch sets it) or the hub's push
// mode, which runs its own controller and queues the Work there. Set it
// before the Store is used.
func (s *Store) SetWake(wake func(name string)) { s.wake = wake }

// Wake makes the reconciler look at Work name again (its status is
// computed and, when it changed, reported). With no reconciler set, there
// is none to wake.
func (s *Store) Wake(name string) {
	if s.wake != nil {
		s.wake(name)
	}
}

func (s *Store) get(name string) *entry {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.works[name]
}

// entryFor returns the entry of Work name, added when the Store holds no
// such Work yet.
func (s *Store) entryFor(name string) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.works[name]
	if e == nil {
		e = &entry{}
		s.works[name] = e
	}
	return e
}

// WorkOfLabel is the held Work whose flotilla.dev/work label value is
// value (an object that carries the label but not the
// annotation, such as a Service's EndpointSlice); none when no held Work
// has it.
func (s *Store) WorkOfLabel(value string) []string {
	if value == "" {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if _, ok := s.works[value]; ok {
		return []string{value}
	}
	if len(value) < 63 {
		return nil
	}
	for name := range s.works {
		if flotillav1.WorkLabelValue(name) == value {
			return []string{name}
		}
	}
	return nil
}

// Names lists the Works held.
func (s *Store) Names() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, 0, len(s.works))
	for n := range s.works {
		out = append(out, n)
	}
	return out
}

// Held implements Applier: the Works this member may still run, so that
// after a reconnect or a restart the hub sends only what changed and
// accounts for every Work whose objects are here. A Work applied in this
// process and held is listed with the UID and generation applied. A Work
// the applied set records but the Store does not hold as applied (the
// agent restarted, its last apply failed, or a Delete of it failed) is
// listed with no UID and generation 0: the hub then sends it again if it
// still wants it, and otherwise leaves it to the snapshot's prune (or
// orphans it), confirming its deletion only once that is done. Leaving
// it out would tell the hub the member had none of its objects, and a
// Work being deleted would be confirmed gone while they still run (held
// by the deletion brake, say).
func (s *Store) Held(ctx context.Context) ([]syncclient.HeldWork, error) {
	recorded, err := s.applier.RecordedWorks(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the applied set: %w", err)
	}
	out := make([]syncclient.HeldWork, 0, len(recorded))
	listed := sets.New[string]()
	for _, w := range s.applier.Applied() {
		if s.get(w.Name) == nil {
			continue
		}
		out = append(out, syncclient.HeldWork{Name: w.Name, UID: string(w.UID), Generation: w.Generation})
		listed.Insert(w.Name)
	}
	for _, name := range recorded {
		if !listed.Has(name) {
			out = append(out, syncclient.HeldWork{Name: name})
		}
	}
	slices.SortFunc(out, func(x, y syncclient.HeldWork) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// Apply implements Applier: it records work, applies it and reports its
// status at once, so propagation does not wait for a watch event.
func (s *Store) Apply(ctx context.Context, work *flotillav1.Work) error {
	e := s.entryFor(work.Name)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.work = work.DeepCopy()
	return s.applyLocked(ctx, e, false)
}

// applyLocked applies e.work and reports its status; e.mu is held.
// repair says the Work reconciler found it drifted or failed.
func (s *Store) applyLocked(ctx context.Context, e *entry, repair bool) error {
	start := time.Now()
	results, err := s.applier.Apply(ctx, e.work)
	if s.observe != nil {
		s.observe(repair, time.Since(start), err)
	}
	e.results = results
	s.reportLocked(ctx, e)
	if err != nil {
		return fmt.Errorf("applying Work %s: %w", e.work.Name, err)
	}
	return nil
}

// reportLocked computes e's status from the live objects and sends it when
// it changed; e.mu is held.
func (s *Store) reportLocked(ctx context.Context, e *entry) {
	work := e.work.DeepCopy()
	if e.reported != nil {
		// Keep transition times stable across reports.
		work.Status = *e.reported
	}
	st, recheck, err := s.applier.Status(ctx, work, e.results, s.now())
	if err != nil {
		log.FromContext(ctx).V(1).Info("reading live objects for status", "work", work.Name, "error", err.Error())
	}
	s.recheckLocked(e, work.Name, recheck)
	if s.health != nil {
		st.Health = s.health(work.Name, work.Spec.Health)
	}
	if e.reported != nil && sameStatus(e.reported, &st) {
		return
	}
	e.reported = &st
	if s.reporter != nil {
		s.reporter.ReportStatus(work.Name, st.DeepCopy())
	}
}

// recheckLocked makes the reconciler look at Work name again within d
// (zero asks for nothing): one timer per Work, kept when it fires no later
// than d from now. e.mu is held.
func (s *Store) recheckLocked(e *entry, name string, d time.Duration) {
	if d <= 0 {
		return
	}
	now := time.Now()
	at := now.Add(d)
	if e.recheck != nil && now.Before(e.recheckAt) && !e.recheckAt.After(at) {
		return
	}
	if e.recheck != nil {
		e.recheck.Stop()
	}
	e.recheckAt = at
	e.recheck = time.AfterFunc(d, func() { s.Wake(name) })
}

// sameStatus compares two statuses ignoring report times.
func sameStatus(a, b *flotillav1.WorkStatus) bool {
	x, y := a.DeepCopy(), b.DeepCopy()
	x.LastReportTime, y.LastReportTime = nil, nil
	return equality.Semantic.DeepEqual(x, y)
}

// Delete implements Applier: it deletes what Work name applied. The Work
// is forgotten first, so the delete events of its objects cannot make the
// reconciler apply it again.
func (s *Store) Delete(ctx context.Context, name string) error {
	s.forget(name)
	if _, err := s.applier.Delete(ctx, name); err != nil {
		return fmt.Errorf("deleting the objects of Work %s: %w", name, err)
	}
	return nil
}

// Orphan implements Applier: Work name vanished from the hub without a
// deletion intent. The Store stops reconciling and reporting it at once,
// and the applier drops its applied-set record (apply.Applier.Forget), so
// its objects keep running and no prune can touch them. Until that
// succeeds the Work stays held, so that the hub, after a reconnect, still
// sees it and orphans it again rather than leaving it to a prune.
func (s *Store) Orphan(ctx context.Context, name string) error {
	if e := s.get(name); e != nil {
		e.mu.Lock()
		e.work = nil
		e.mu.Unlock()
	}
	if err := s.applier.Forget(ctx, name); err != nil {
		return fmt.Errorf("orphaning Work %s: %w", name, err)
	}
	s.forget(name)
	log.FromContext(ctx).Info("orphaned Work: the hub lost it without meaning to delete it; its objects keep running, unrecorded", "work", name)
	return nil
}

// forget drops Work name and waits for a reconcile of it in flight, which
// then finds nothing to do.
func (s *Store) forget(name string) {
	s.mu.Lock()
	e := s.works[name]
	delete(s.works, name)
	s.mu.Unlock()
	if e != nil {
		e.mu.Lock()
		e.work = nil
		if e.recheck != nil {
			e.recheck.Stop()
		}
		e.mu.Unlock()
	}
}

// SnapshotComplete implements Applier: it prunes the recorded objects of
// every Work not in keep (see apply.Applier.Prune). Only a complete
// snapshot proves a Work is gone. Works not in keep are forgotten first,
// so they are neither reconciled nor held any more, even when the
// deletion brake holds the prune: their objects then keep running as they
// are, still recorded, until a confirmed prune deletes them or the hub
// sends the Works again. When the brake holds, the error wraps both the
// applier's *apply.PruneBlockedError and the sync client's
// *syncclient.PruneBlockedError, which the client reports to the hub.
func (s *Store) SnapshotComplete(ctx context.Context, keep []string, confirmed bool) error {
	keepSet := sets.New(keep...)
	for _, name := range s.Names() {
		if !keepSet.Has(name) {
			s.forget(name)
		}
	}
	pruned, err := s.applier.Prune(ctx, keepSet, confirmed)
	if len(pruned) > 0 {
		log.FromContext(ctx).Info("pruned objects of Works the hub no longer sends", "objects", len(pruned), "confirmed", confirmed)
	}
	var blocked *apply.PruneBlockedError
	if errors.As(err, &blocked) {
		return &pruneBlockedError{
			client:  &syncclient.PruneBlockedError{WouldDelete: blocked.WouldDelete, Held: blocked.Held, Works: slices.Clone(blocked.Works)},
			applier: err,
		}
	}
	if err != nil {
		return fmt.Errorf("pruning after the snapshot: %w", err)
	}
	return nil
}

// pruneBlockedError is the applier's brake error as the sync client knows
// it: errors.As finds either *apply.PruneBlockedError or
// *syncclient.PruneBlockedError in it.
type pruneBlockedError struct {
	client  *syncclient.PruneBlockedError
	applier error
}

func (e *pruneBlockedError) Error() string   { return "pruning after the snapshot: " + e.applier.Error() }
func (e *pruneBlockedError) Unwrap() []error { return []error{e.client, e.applier} }

// Sync holds work as its source has it now (the hub's push mode, which
// reads Works from the hub's cache rather than a stream) and makes the
// member match it: it applies work when it is new to the applier, changed
// (another generation or UID), its last apply failed or its objects
// drifted (apply.Applier.NeedsApply, which after a restart answers from
// the applied-set record), and otherwise only reports its status. live
// lists the Work's objects as the caller's cache has them. applied says
// whether it applied.
func (s *Store) Sync(ctx context.Context, work *flotillav1.Work, live func(*flotillav1.Work) ([]kclient.Object, error)) (applied bool, err error) {
	e := s.entryFor(work.Name)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.work = work.DeepCopy()
	objs, err := live(e.work)
	if err != nil {
		return false, err
	}
	if s.applier.NeedsApply(e.work, objs) {
		return true, s.applyLocked(ctx, e, false)
	}
	s.reportLocked(ctx, e)
	return false, nil
}

// StandDown implements the sync client's Stander: the hub refused this
// agent, so the Store forgets every Work it holds (nothing is deleted and
// the applied-set records stay), and the reconciler stops applying them.
// Their objects run on as they are; the next accepted stream's snapshot
// hands the Works back.
func (s *Store) StandDown(ctx context.Context) {
	names := s.Names()
	for _, name := range names {
		s.forget(name)
	}
	if len(names) > 0 {
		log.FromContext(ctx).Info("the hub refused this agent: stopped applying the Works it held (nothing deleted; their objects run on)", "works", len(names))
	}
}

var _ syncclient.Stander = (*Store)(nil)

// Holds says whether the Store holds Work name.
func (s *Store) Holds(name string) bool { return s.get(name) != nil }

// Reconcile brings Work name back in line: re-apply when its objects
// drifted (or its last apply failed), then report status. live are the
// Work's objects as the cache has them.
func (s *Store) Reconcile(ctx context.Context, name string, live func(*flotillav1.Work) ([]kclient.Object, error)) error {
	e := s.get(name)
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.work == nil {
		return nil
	}
	objs, err := live(e.work)
	if err != nil {
		return err
	}
	if s.applier.NeedsApply(e.work, objs) {
		return s.applyLocked(ctx, e, true)
	}
	s.reportLocked(ctx, e)
	return nil
}
