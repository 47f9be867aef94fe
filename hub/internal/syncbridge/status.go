package syncbridge

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/metrics"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
)

// +kubebuilder:rbac:groups=flotilla.dev,resources=works/status,verbs=get;update;patch

// StatusWriter writes agents' status reports into Work status. Reports are
// coalesced per Work (the latest wins while a write is pending) and written
// by Workers goroutines in parallel, so a burst of reports from many agents
// costs one patch per Work, not one per report, and no agent waits for
// another's writes. It is a manager Runnable that runs on the leader only,
// where the sync server runs.
type StatusWriter struct {
	// Client writes Work status.
	Client client.Client
	// Reader reads Works (the cache).
	Reader client.Reader
	// APIReader reads a Work from the apiserver, not the cache, when a
	// write was refused (see replaced), and the resourceVersion this
	// writer starts at (see Informers); nil uses Reader.
	APIReader client.Reader
	// Informers, when set, is the cache Reader reads Works from; it lets
	// the writer skip a report that equals the status the cache holds
	// (its report time aside) for a Work this writer has not written
	// itself, once the cache has shown a Work at or past the
	// resourceVersion the writer started at, so that every write of an
	// earlier leader is in it (see trustCache). An agent reports every
	// Work again after each reconnect: without this, every start of the
	// hub (a restart, a failover to another replica) rewrote the status of
	// every Work in the fleet, and each rewrite reconciled its MyApp.
	Informers informerGetter
	// Workers is the number of parallel writers (default 8).
	Workers int
	// Linger is how long a Work's report waits before it is written, so
	// that the reports of one rollout arriving within it cost one write,
	// and the write keeps out of the way of the MyApp status write the
	// same report triggers at once (see Notify): zero means
	// DefaultLinger, a negative value writes at once.
	Linger time.Duration
	// MaxPendingBytes bounds, per cluster, the reports waiting to be
	// written (their approximate size, see statusSize); zero means
	// DefaultMaxPendingBytes. A report that replaces the pending one of
	// the same Work (latest wins) is taken if the cluster's total stays
	// within the bound; a report that would pass it, for a new Work or a
	// replacement, is dropped and counted
	// (flotilla_work_status_dropped_total{what="buffer_full"}): the agent
	// reports the Work again when it changes and on every reconnect.
	MaxPendingBytes int
	// Notify, when set, is told of each Work whose status a report
	// changes, as the report arrives (before it is written), and again
	// when a report it was told of is dropped unwritten. It receives the
	// Work as the cache holds it and must not block. The MyApp controller
	// uses it to compute an app's status from the reports ahead of their
	// writes (see Reported).
	Notify func(work *flotillav1.Work)

	mu      sync.Mutex
	pending map[client.ObjectKey]*pendingStatus
	// pendingBytes is the size of each cluster's pending reports.
	pendingBytes map[string]int
	// written is the last status applied per Work, bounded by the number
	// of Works (entries go when their Work does).
	written map[client.ObjectKey]*writtenStatus
	// inflight is the report each worker is writing, by Work.
	inflight map[client.ObjectKey]*pendingStatus
	queue    workqueue.TypedRateLimitingInterface[client.ObjectKey]
	once     sync.Once
	// busy counts the workers between taking a report and finishing it.
	busy atomic.Int32
	// cacheTrusted says the cache holds every status written before this
	// writer started (see trustCache).
	cacheTrusted atomic.Bool
}

// informerGetter is the part of controller-runtime's cache the writer
// uses to learn how far its Work informer has come.
type informerGetter interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
}

var _ syncserver.StatusSink = (*StatusWriter)(nil)

func (w *StatusWriter) init() {
	w.once.Do(func() {
		w.pending = map[client.ObjectKey]*pendingStatus{}
		w.pendingBytes = map[string]int{}
		if w.MaxPendingBytes <= 0 {
			w.MaxPendingBytes = DefaultMaxPendingBytes
		}
		w.written = map[client.ObjectKey]*writtenStatus{}
		w.inflight = map[client.ObjectKey]*pendingStatus{}
		w.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[client.ObjectKey](),
			workqueue.TypedRateLimitingQueueConfig[client.ObjectKey]{Name: "work-status"})
		if w.Workers == 0 {
			w.Workers = 8
		}
		if w.Linger == 0 {
			w.Linger = DefaultLinger
		}
	})
}

// DefaultLinger is StatusWriter.Linger when zero.
const DefaultLinger = 50 * time.Millisecond

// DefaultMaxPendingBytes is StatusWriter.MaxPendingBytes when zero: some
// 4,000 Works' reports of an honest agent (about 2 KiB each) per cluster.
const DefaultMaxPendingBytes = 8 << 20

// pendingStatus is a report waiting to be written.
type pendingStatus struct {
	cluster string
	status  *flotillav1.WorkStatus
	size    int
	// received is when the report reached the writer.
	received time.Time
}

// WorkStatus implements StatusSink: it records the report and returns at
// once. The pending map holds at most one report per Work, and at most
// MaxPendingBytes per cluster, so one member cannot fill the hub's memory.
func (w *StatusWriter) WorkStatus(ctx context.Context, cluster, name string, status *flotillav1.WorkStatus) {
	w.init()
	key := client.ObjectKey{Namespace: flotillav1.ClusterNamespace(cluster), Name: name}
	if !w.putPending(key, &pendingStatus{cluster: cluster, status: status, size: statusSize(status), received: time.Now()}, true) {
		metrics.WorkStatusDropped.WithLabelValues(cluster, metrics.DroppedBufferFull).Inc()
		log.FromContext(ctx).V(1).Info("dropped a Work status report: the cluster's pending reports reached the bound", "work", key, "maxBytes", w.MaxPendingBytes)
		return
	}
	if w.Linger > 0 {
		// The delaying queue keeps the earliest time asked for a key:
		// a later report of the same Work joins the wait, latest wins.
		w.queue.AddAfter(key, w.Linger)
	} else {
		w.queue.Add(key)
	}
	if w.Notify != nil {
		w.notifyIfChanged(ctx, key, status)
	}
}

// notifyIfChanged tells Notify of the Work key when status differs from
// what the writer last wrote to it, or, when it has not written it, from
// the status the cache holds. A Work the cache does not hold has no app to
// tell.
func (w *StatusWriter) notifyIfChanged(ctx context.Context, key client.ObjectKey, status *flotillav1.WorkStatus) {
	work := &flotillav1.Work{}
	if err := w.Reader.Get(ctx, key, work); err != nil {
		return
	}
	w.mu.Lock()
	last := w.written[key]
	w.mu.Unlock()
	if last != nil && last.uid == work.UID && last.status != nil {
		if sameReport(last.status, status) {
			return
		}
	} else if sameReport(&work.Status, status) {
		return
	}
	w.Notify(work)
}

// Reported returns the status the writer is about to give work, when the
// cache does not hold it yet: the report waiting to be written, else the
// one being written, else the writer's last write while the cache shows
// work at an earlier resourceVersion than that write returned. Nil means
// the cache's status of work is the latest the hub has. Its LastReportTime
// is the cache's. Every report it returns is one the writer will write or
// has written: a report the apiserver refuses is dropped (and Notify told)
// and never returned again, so an app's status computed from Reported is
// the one computed from the cache a moment later.
func (w *StatusWriter) Reported(work *flotillav1.Work) *flotillav1.WorkStatus {
	if work == nil {
		return nil
	}
	w.init()
	key := client.ObjectKeyFromObject(work)
	w.mu.Lock()
	defer w.mu.Unlock()
	var st *flotillav1.WorkStatus
	if p := w.pending[key]; p != nil {
		st = p.status
	} else if p := w.inflight[key]; p != nil {
		st = p.status
	} else if last := w.written[key]; last != nil && last.status != nil && last.uid == work.UID && last.resourceVersion != "" {
		if c, err := resourceversion.CompareResourceVersion(work.ResourceVersion, last.resourceVersion); err == nil && c < 0 {
			st = last.status
		}
	}
	if st == nil {
		return nil
	}
	out := st.DeepCopy()
	out.LastReportTime = work.Status.LastReportTime.DeepCopy()
	return out
}

// putPending makes p key's pending report if the cluster's pending bytes
// stay within the bound; replace says whether it may replace a pending
// report of key (a retry may not: the report waiting is newer).
func (w *StatusWriter) putPending(key client.ObjectKey, p *pendingStatus, replace bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	old, ok := w.pending[key]
	if ok && !replace {
		return true
	}
	total := w.pendingBytes[p.cluster] + p.size
	if ok {
		total -= old.size
	}
	if total > w.MaxPendingBytes {
		return false
	}
	w.pending[key] = p
	w.pendingBytes[p.cluster] = total
	return true
}

// takePending removes and returns key's pending report, and makes it the
// one in flight, in one step, so that Reported never finds it in neither
// place.
func (w *StatusWriter) takePending(key client.ObjectKey) *pendingStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending[key]
	if p == nil {
		return nil
	}
	delete(w.pending, key)
	w.inflight[key] = p
	if w.pendingBytes[p.cluster] -= p.size; w.pendingBytes[p.cluster] <= 0 {
		delete(w.pendingBytes, p.cluster)
	}
	return p
}

// statusSize approximates the memory a report holds: its strings and a
// fixed cost per condition and manifest. It need not be exact, only grow
// with what an agent can make large.
func statusSize(st *flotillav1.WorkStatus) int {
	const perItem = 128
	conds := func(cs []metav1.Condition) int {
		n := 0
		for _, c := range cs {
			n += perItem + len(c.Type) + len(c.Status) + len(c.Reason) + len(c.Message)
		}
		return n
	}
	n := perItem + conds(st.Conditions)
	for _, m := range st.Manifests {
		id := m.ResourceIdentifier
		n += perItem + len(id.Group) + len(id.Version) + len(id.Kind) + len(id.Namespace) + len(id.Name) + conds(m.Conditions)
		if m.Workload != nil {
			n += perItem
		}
	}
	return n
}

// NeedLeaderElection says the writer runs on the leader only.
func (w *StatusWriter) NeedLeaderElection() bool { return true }

// Start runs the workers until ctx ends.
func (w *StatusWriter) Start(ctx context.Context) error {
	w.init()
	if stop := w.trustCache(ctx); stop != nil {
		defer stop()
	}
	var wg sync.WaitGroup
	for range w.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	w.queue.ShutDown()
	wg.Wait()
	return nil
}

func (w *StatusWriter) next(ctx context.Context) bool {
	key, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(key)
	// busy before takePending, so Idle never sees the report in neither
	// place.
	w.busy.Add(1)
	defer w.busy.Add(-1)
	p := w.takePending(key)
	if p == nil {
		w.queue.Forget(key)
		return true
	}
	defer w.clearInflight(key)
	wrote, err := w.write(ctx, key, p.status)
	if wrote {
		metrics.WorkStatusLatency.Observe(time.Since(p.received).Seconds())
	}
	if err != nil {
		if rejected(err) {
			// The apiserver refuses this status (invalid, too large,
			// forbidden): retrying the same report cannot succeed, and
			// would retry forever. The agent's next report may pass.
			log.FromContext(ctx).Error(err, "the apiserver refused a Work status write; dropping the report", "work", key)
			metrics.WorkStatusWrites.WithLabelValues(metrics.DroppedRejected).Inc()
			metrics.WorkStatusDropped.WithLabelValues(p.cluster, metrics.DroppedRejected).Inc()
			w.queue.Forget(key)
			w.dropped(ctx, key)
			return true
		}
		log.FromContext(ctx).Error(err, "writing Work status", "work", key)
		metrics.WorkStatusWrites.WithLabelValues("error").Inc()
		// Put the report back unless a newer one arrived meanwhile (or
		// the cluster's bound is reached: then it is dropped, counted).
		if !w.putPending(key, p, false) {
			metrics.WorkStatusDropped.WithLabelValues(p.cluster, metrics.DroppedBufferFull).Inc()
			w.dropped(ctx, key)
		}
		w.queue.AddRateLimited(key)
		return true
	}
	w.queue.Forget(key)
	return true
}

// clearInflight records that no report of key is being written
// (takePending sets one).
func (w *StatusWriter) clearInflight(key client.ObjectKey) {
	w.mu.Lock()
	delete(w.inflight, key)
	w.mu.Unlock()
}

// dropped tells Notify of key's Work after a report of it was dropped
// unwritten, once it is no longer in flight, so that a status computed
// from it (see Reported) is computed again from what the hub holds.
func (w *StatusWriter) dropped(ctx context.Context, key client.ObjectKey) {
	if w.Notify == nil {
		return
	}
	w.clearInflight(key)
	work := &flotillav1.Work{}
	if err := w.Reader.Get(ctx, key, work); err == nil {
		w.Notify(work)
	}
}

// write replaces the Work's status with status (see statusPatch). It skips the
// write when status equals the last one this writer applied to the same
// Work. For a Work this writer has not written (since it started, or since
// a write whose outcome it does not know), it skips the write when status
// equals the cached Work's status, report time aside, and the cache is
// trusted (trustCache): the cache is never asked about a Work this writer
// wrote, because a cache that has not yet seen that write could make a
// needed write look like a no-op, and nothing would come back to fix it.
// It says whether it wrote.
func (w *StatusWriter) write(ctx context.Context, key client.ObjectKey, status *flotillav1.WorkStatus) (wrote bool, err error) {
	work := &flotillav1.Work{}
	if err := w.Reader.Get(ctx, key, work); err != nil {
		if apierrors.IsNotFound(err) {
			w.forget(key)
			return false, nil
		}
		return false, err
	}
	w.mu.Lock()
	last := w.written[key]
	w.mu.Unlock()
	if last != nil && last.uid == work.UID && last.status != nil && sameReport(last.status, status) {
		metrics.WorkStatusWrites.WithLabelValues("unchanged").Inc()
		return false, nil
	}
	// A status never written has no report time (and an agent's report is
	// never empty).
	if last == nil && w.cacheTrusted.Load() && work.Status.LastReportTime != nil && sameReport(&work.Status, status) {
		w.remember(key, work.UID, status)
		metrics.WorkStatusWrites.WithLabelValues("unchanged").Inc()
		return false, nil
	}
	desired := status.DeepCopy()
	now := metav1.NewTime(time.Now())
	desired.LastReportTime = &now
	obj := &flotillav1.Work{
		TypeMeta:   metav1.TypeMeta{APIVersion: flotillav1.GroupVersion.String(), Kind: "Work"},
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, UID: work.UID},
		Status:     *desired,
	}
	patch, err := statusPatch(work.UID, desired)
	if err != nil {
		return false, err
	}
	start := time.Now()
	if err := w.Client.Status().Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(flotillav1.FieldOwnerHubStatus)); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) && w.replaced(ctx, key, work.UID) {
			// Gone, or replaced by a Work of the same name: its agent
			// reports on the new one. An app shown the report (see
			// Reported) is shown the new Work's stored status again.
			w.forget(key)
			w.dropped(ctx, key)
			return false, nil
		}
		// The write may have happened anyway (a timeout): until a write
		// succeeds, neither the last write nor the cache says what the
		// Work holds.
		w.remember(key, work.UID, nil)
		return false, err
	}
	metrics.WorkStatusWriteDuration.Observe(time.Since(start).Seconds())
	w.rememberWrite(key, work.UID, status.DeepCopy(), obj.ResourceVersion)
	metrics.WorkStatusWrites.WithLabelValues("written").Inc()
	return true, nil
}

// remember records status as what key holds; nil says it is unknown.
func (w *StatusWriter) remember(key client.ObjectKey, uid types.UID, status *flotillav1.WorkStatus) {
	w.rememberWrite(key, uid, status, "")
}

// rememberWrite is remember for a write that returned resourceVersion rv.
func (w *StatusWriter) rememberWrite(key client.ObjectKey, uid types.UID, status *flotillav1.WorkStatus, rv string) {
	w.mu.Lock()
	w.written[key] = &writtenStatus{uid: uid, status: status, resourceVersion: rv}
	w.mu.Unlock()
}

// sameReport says whether a and b are the same report but for the report
// time (the writer sets its own).
func sameReport(a, b *flotillav1.WorkStatus) bool {
	x := *a
	x.LastReportTime = b.LastReportTime
	return equality.Semantic.DeepEqual(&x, b)
}

// trustCache starts watching the Work informer for the point from which
// its cache holds every status written before this writer started: an
// event of a Work at or past the resourceVersion a consistent list returns
// now. The writer runs on the leader only, and a leader starts after the
// previous one stopped writing, so every write of a previous leader is at
// or before that resourceVersion; informer handlers run after the cache
// is updated, in order. Until that event the cache is not asked (the
// writer writes every report, as without Informers); the writer's own first
// write, or any other Work change, brings it. It returns the function that
// removes the handler, or nil when it cannot watch (logged: the writer
// then writes every report).
func (w *StatusWriter) trustCache(ctx context.Context) (stop func()) {
	w.cacheTrusted.Store(false)
	if w.Informers == nil {
		return nil
	}
	logger := log.FromContext(ctx).WithName("work-status")
	r := w.APIReader
	if r == nil {
		r = w.Reader
	}
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(flotillav1.GroupVersion.WithKind("WorkList"))
	if err := r.List(ctx, list, client.Limit(1)); err != nil {
		logger.Error(err, "reading the Works' resourceVersion; every agent report is written, unchanged ones too")
		return nil
	}
	since := list.ResourceVersion
	inf, err := w.Informers.GetInformer(ctx, &flotillav1.Work{})
	if err != nil {
		logger.Error(err, "getting the Work informer; every agent report is written, unchanged ones too")
		return nil
	}
	seen := func(obj any) {
		if w.cacheTrusted.Load() {
			return
		}
		o, ok := obj.(metav1.Object)
		if !ok {
			return
		}
		if c, err := resourceversion.CompareResourceVersion(o.GetResourceVersion(), since); err == nil && c >= 0 {
			w.cacheTrusted.Store(true)
		}
	}
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	})
	if err != nil {
		logger.Error(err, "watching the Work informer; every agent report is written, unchanged ones too")
		return nil
	}
	return func() { _ = inf.RemoveEventHandler(reg) }
}

// TrustsCache says whether the writer skips reports equal to the cached
// status of Works it has not written (see trustCache).
func (w *StatusWriter) TrustsCache() bool { return w.cacheTrusted.Load() }

// Idle says whether no report waits to be written and none is being
// written.
func (w *StatusWriter) Idle() bool {
	w.init()
	w.mu.Lock()
	n := len(w.pending)
	w.mu.Unlock()
	return n == 0 && w.queue.Len() == 0 && w.busy.Load() == 0
}

// statusPatch is a JSON patch that replaces a Work's status with status,
// on the condition that the Work's UID is uid: its first operation tests
// the UID, so a Work replaced under the same name since the cache saw it
// is not written (the apiserver refuses the patch, see uidTestFailed).
//
// A JSON patch, not a server-side apply: the hub is the only writer of
// Work status, so apply's field ownership buys nothing here and costs the
// apiserver much more CPU per write; at scale the hub cluster's apiserver
// is what limits how fast MyApps become Ready (docs/benchmarks.md, Scale).
func statusPatch(uid types.UID, status *flotillav1.WorkStatus) ([]byte, error) {
	return json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": uid},
		// add replaces the member when it exists, and creates it when not.
		{"op": "add", "path": "/status", "value": status},
	})
}

// replaced says whether the Work key no longer has uid, as the apiserver
// sees it now: statusPatch's UID test fails as Invalid with no detail, the
// same answer as a status the schema refuses, so a live read tells them
// apart.
func (w *StatusWriter) replaced(ctx context.Context, key client.ObjectKey, uid types.UID) bool {
	r := w.APIReader
	if r == nil {
		r = w.Reader
	}
	live := &flotillav1.Work{}
	err := r.Get(ctx, key, live)
	return apierrors.IsNotFound(err) || err == nil && live.UID != uid
}

// rejected says whether err is the apiserver refusing a write for good:
// a 4xx other than a conflict or throttling (429), which pass on a retry.
func rejected(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return false
	}
	code := st.Status().Code
	return code >= 400 && code < 500 && code != http.StatusConflict && code != http.StatusTooManyRequests
}

func (w *StatusWriter) forget(key client.ObjectKey) {
	w.mu.Lock()
	delete(w.written, key)
	w.mu.Unlock()
}

// writtenStatus is the last status applied to a Work; status is nil when
// a write's outcome is unknown.
type writtenStatus struct {
	uid    types.UID
	status *flotillav1.WorkStatus
	// resourceVersion is the Work's after the write ("" when unknown, or
	// not written by this writer: found unchanged in the cache).
	resourceVersion string
}
