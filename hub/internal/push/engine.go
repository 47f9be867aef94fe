package push

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mchandler "sigs.k8s.io/multicluster-runtime/pkg/handler"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/flotilla-dev/flotilla/agent/capacity"
	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/apply"
	"github.com/flotilla-dev/flotilla/pkg/health"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/crclient"
	"github.com/flotilla-dev/flotilla/pkg/memberprobe"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
	"github.com/flotilla-dev/flotilla/pkg/works"
)

// WorkSource is the hub's view of the Works (the sync bridge's
// WorkSource, shared with the sync server).
type WorkSource interface {
	HasSynced() bool
	ListWorks(cluster string) ([]*flotillav1.Work, error)
	GetWork(cluster, name string) (*flotillav1.Work, error)
	DeletionIntent(cluster, name string) (reason string, known bool)
	TerminatingWorks(cluster string) ([]string, error)
}

// Health is where a Push member's liveness and prunes go (the
// membercluster Tracker, also the agents' AgentSink).
type Health interface {
	PushUp(cluster string, info syncserver.AgentInfo, now time.Time, resources *flotillav1.ResourceSummary)
	PushDown(cluster string, reason error)
	PushUnavailable(cluster, reason, message string)
	AgentPruneBlocked(cluster string, b syncserver.PruneBlocked)
	AgentPruned(cluster string, epoch uint64, confirmed bool)
}

// Engine applies the Works of the engaged Push members. See the package
// documentation.
type Engine struct {
	Works     WorkSource
	Health    Health
	Status    syncserver.StatusSink
	Deletions syncserver.DeletionSink
	// FleetID reads the hub's fleet identity (the sync server's).
	FleetID func(ctx context.Context) (string, error)
	// Fence runs before each batch of deletions: the hub leader's Lease
	// check (pkg/leader), or nil.
	Fence func(ctx context.Context) error
	// Scheme reads the members' typed objects.
	Scheme *runtime.Scheme
	// PrometheusURL gives a member's spec.push.prometheusURL (nil: none),
	// for the Prometheus signals of health shifts.
	PrometheusURL func(ctx context.Context, member string) (string, error)
	// Version and Instance describe this hub in MemberCluster status.
	Version, Instance string
	// HeartbeatInterval is how often each member's /readyz is asked
	// (default 2s); FailureThreshold failures in a row make it down
	// (default 3).
	HeartbeatInterval time.Duration
	FailureThreshold  int
	// DeleteRate and DeleteBurst pace Work deletions per member as the
	// sync server paces its WorkDeletes (defaults: the server's).
	DeleteRate  float64
	DeleteBurst int
	// Resync re-examines every held Work this often (default 5 minutes).
	Resync time.Duration
	// OnLost is told when a member's apiserver stopped answering; the hub
	// disengages the member (Provider.Disengage), so it is engaged afresh,
	// with new caches, when it answers again.
	OnLost func(member string)
	// SkipNameValidation lets tests run several hubs in one process.
	SkipNameValidation bool
	// Metrics count what the engine does (nil: not counted).
	Metrics *Metrics
	Log     logr.Logger

	kick kicker

	mu      sync.Mutex
	members map[string]*member
}

// member is one engaged Push member.
type member struct {
	name    string
	cluster cluster.Cluster
	applier *apply.Applier
	store   *works.Store
	summary *capacity.Summarizer
	limiter *rate.Limiter
	ctx     context.Context

	mu sync.Mutex
	// ready says the member is up and its first sync (prune) after the
	// last connect is done: until then reconciles wait for it.
	ready bool
	// epoch numbers the syncs; blocked is the epoch whose prune the brake
	// holds (0: none).
	epoch   uint64
	blocked uint64
}

var _ mcmanager.Runnable = (*Engine)(nil)

// SetupWithManager registers the engine and its multicluster controller
// with mgr, and listens to works for Work changes (call it before the
// hub's caches start).
func (e *Engine) SetupWithManager(mgr mcmanager.Manager, notify func(func(cluster, name string))) error {
	e.members = map[string]*member{}
	if e.HeartbeatInterval <= 0 {
		e.HeartbeatInterval = 2 * time.Second
	}
	if e.FailureThreshold <= 0 {
		e.FailureThreshold = 3
	}
	if e.Resync <= 0 {
		e.Resync = 5 * time.Minute
	}
	if e.DeleteRate == 0 {
		e.DeleteRate = syncserver.DefaultDeleteRate
	}
	if e.DeleteBurst == 0 {
		e.DeleteBurst = syncserver.DefaultDeleteBurst
	}
	// The engine is added first, so it knows a member before the
	// controller's watches on it start.
	if err := mgr.Add(e); err != nil {
		return err
	}
	notify(func(cluster, name string) {
		if e.member(cluster) != nil {
			e.kick.add(request(cluster, name))
		}
	})
	workOf := mchandler.TypedEnqueueRequestsFromMapFunc[client.Object, mcreconcile.Request](func(_ context.Context, o client.Object) []mcreconcile.Request {
		var out []mcreconcile.Request
		for _, n := range works.WorkOf(o) {
			out = append(out, mcreconcile.Request{Request: request1(n)})
		}
		return out
	})
	// A dependency's event names no cluster here; Work names are the same
	// in every member, so the Works of any member that holds it are asked
	// for, in the member the event came from.
	dependencyOf := func(gvk schema.GroupVersionKind) mchandler.TypedEventHandlerFunc[client.Object, mcreconcile.Request] {
		return mchandler.TypedEnqueueRequestsFromMapFunc[client.Object, mcreconcile.Request](func(_ context.Context, o client.Object) []mcreconcile.Request {
			var out []mcreconcile.Request
			for _, n := range works.DependencyWorks(e.holders, gvk, o) {
				out = append(out, mcreconcile.Request{Request: request1(n)})
			}
			return out
		})
	}
	return mcbuilder.ControllerManagedBy(mgr).
		Named("push").
		Watches(&appsv1.Deployment{}, workOf, mcbuilder.WithEngageWithLocalCluster(false)).
		Watches(&corev1.Service{}, workOf, mcbuilder.WithEngageWithLocalCluster(false)).
		Watches(&discoveryv1.EndpointSlice{}, mchandler.TypedEnqueueRequestsFromMapFunc[client.Object, mcreconcile.Request](func(_ context.Context, o client.Object) []mcreconcile.Request {
			var out []mcreconcile.Request
			for _, r := range e.workOfLabel(o.GetLabels()[flotillav1.LabelWork]) {
				out = append(out, mcreconcile.Request{Request: r})
			}
			return out
		}), mcbuilder.WithEngageWithLocalCluster(false)).
		Watches(&corev1.ConfigMap{}, dependencyOf(apply.ConfigMapKind), mcbuilder.WithEngageWithLocalCluster(false)).
		Watches(&corev1.Secret{}, dependencyOf(apply.SecretKind), mcbuilder.WithEngageWithLocalCluster(false)).
		Watches(&corev1.ServiceAccount{}, dependencyOf(apply.ServiceAccountKind), mcbuilder.WithEngageWithLocalCluster(false)).
		WatchesRawSource(&e.kick).
		WithOptions(controller.TypedOptions[mcreconcile.Request]{
			MaxConcurrentReconciles: 4,
			SkipNameValidation:      &e.SkipNameValidation,
		}).
		Complete(e)
}

func request(cluster, name string) mcreconcile.Request {
	return mcreconcile.Request{ClusterName: multicluster.ClusterName(cluster), Request: reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}}
}

// Start implements manager.Runnable; the work happens in Engage and
// Reconcile.
func (e *Engine) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// NeedLeaderElection: only the leader pushes.
func (e *Engine) NeedLeaderElection() bool { return true }

// workOfLabel is the request for the Work, held by any member, whose
// flotilla.dev/work label value is value.
func (e *Engine) workOfLabel(value string) []reconcile.Request {
	for _, m := range e.engaged() {
		if m.store == nil {
			continue
		}
		if names := m.store.WorkOfLabel(value); len(names) > 0 {
			out := make([]reconcile.Request, len(names))
			for i, n := range names {
				out[i] = request1(n)
			}
			return out
		}
	}
	return nil
}

// request1 is the request for Work name (its cluster comes with the event).
func request1(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Name: name}}
}

// holders lists the Works that hold id in any member's applied set.
func (e *Engine) holders(id flotillav1.ResourceIdentifier) []string {
	var out []string
	for _, m := range e.engaged() {
		if m.applier == nil {
			continue
		}
		for _, w := range m.applier.Holders(id) {
			if !slices.Contains(out, w) {
				out = append(out, w)
			}
		}
	}
	return out
}

// engaged is a snapshot of the engaged members.
func (e *Engine) engaged() []*member {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Collect(maps.Values(e.members))
}

func (e *Engine) member(name string) *member {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.members[name]
}

// Engage implements multicluster.Aware: a Push member was engaged. It sets
// up the member's applier and starts its health loop; both end with ctx.
func (e *Engine) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	fleet, err := e.FleetID(ctx)
	if err != nil {
		return fmt.Errorf("reading the hub's fleet identity: %w", err)
	}
	m := &member{
		name:    string(name),
		cluster: cl,
		ctx:     ctx,
		summary: &capacity.Summarizer{Reader: crclient.Reader(cl.GetAPIReader())},
		limiter: rate.NewLimiter(rate.Limit(e.DeleteRate), e.DeleteBurst),
	}
	if e.DeleteRate < 0 {
		m.limiter = rate.NewLimiter(rate.Inf, 0)
	}
	denied := append(slices.Clone(apply.DefaultDeniedNamespaces), flotillav1.SystemNamespace)
	m.applier = apply.New(crclient.Reader(crclient.TypedReader{Cache: cl.GetCache(), Scheme: e.Scheme}), crclient.Client(cl.GetClient()), apply.Options{
		CreateNamespace: true,
		Namespaces:      &apply.NamespacePolicy{Denied: denied},
		RecordNamespace: flotillav1.SystemNamespace,
		Fence:           e.Fence,
		Kinds:           apply.WorkKinds,
	})
	m.applier.SetIdentity(fleet, m.name)
	m.store = works.NewStore(m.applier)
	m.store.SetReporter(reporter{sink: e.Status, cluster: m.name})
	// The health-shift signals, evaluated here as an agent would.
	runner := &health.Runner{Works: m.store, Reader: crclient.Reader(cl.GetClient()), Prometheus: &health.URLQuerier{
		Lookup: func(ctx context.Context) (string, error) {
			if e.PrometheusURL == nil {
				return "", nil
			}
			return e.PrometheusURL(ctx, m.name)
		},
		None: "no Prometheus is configured for Push member " + m.name + " (spec.push.prometheusURL)",
	}}
	m.store.SetHealth(runner.Status)
	// A signal's change reaches the hub as the Work's next status report:
	// the engine's controller reconciles the Work.
	m.store.SetWake(func(work string) { e.kick.add(request(m.name, work)) })
	e.mu.Lock()
	e.members[m.name] = m
	e.mu.Unlock()
	go func() {
		_ = m.summary.Start(ctx)
	}()
	go e.health(ctx, m, fleet)
	go func() { _ = runner.Start(ctx) }()
	go func() {
		<-ctx.Done()
		e.mu.Lock()
		if e.members[m.name] == m {
			delete(e.members, m.name)
		}
		e.mu.Unlock()
		e.Metrics.forget(m.name)
		e.Health.PushDown(m.name, errors.New("the hub no longer pushes to it (disengaged)"))
	}()
	e.Log.Info("pushing to member", "member", m.name)
	return nil
}

// reporter sends a Work's status to the StatusSink, as the sync server
// does with an agent's report.
type reporter struct {
	sink    syncserver.StatusSink
	cluster string
}

func (r reporter) ReportStatus(name string, st *flotillav1.WorkStatus) {
	r.sink.WorkStatus(context.Background(), r.cluster, name, st)
}

// health asks the member's /readyz every heartbeat interval and tells
// Health; on each (re)connect it syncs the member first.
func (e *Engine) health(ctx context.Context, m *member, fleet string) {
	check, err := memberprobe.Readyz(m.cluster.GetConfig())
	if err != nil {
		e.Health.PushUnavailable(m.name, flotillav1.ReasonKubeconfigInvalid, fmt.Sprintf("the kubeconfig for Push member %s cannot be used: %v", m.name, err))
		return
	}
	info := syncserver.AgentInfo{
		Identity: "push:" + m.name,
		Version:  e.Version,
		Instance: e.Instance,
		Peer:     m.cluster.GetConfig().Host,
	}
	up, fails := false, 0
	tick := time.NewTicker(e.HeartbeatInterval)
	defer tick.Stop()
	for {
		err := check(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			fails = 0
			if !up {
				if info.KubernetesVersion == "" {
					info.KubernetesVersion = memberprobe.ServerVersion(m.cluster.GetConfig())
				}
				if err := e.connect(ctx, m, fleet); err != nil {
					e.Log.Info("a Push member answers but could not be synced; trying again", "member", m.name, "error", err.Error())
					break
				}
				up = true
				e.Metrics.setUp(m.name, true)
			}
			res, _ := m.summary.Latest(ctx)
			e.Health.PushUp(m.name, info, time.Now(), res)
		default:
			fails++
			if up && fails >= e.FailureThreshold {
				up = false
				e.Metrics.setUp(m.name, false)
				m.setReady(false)
				e.Health.PushDown(m.name, err)
				e.Log.Info("lost a Push member's apiserver", "member", m.name, "error", err.Error())
				if e.OnLost != nil {
					// The member's caches would come back stale (their
					// reflectors back off for up to 30 s after an outage):
					// end this engagement; the provider engages the member
					// afresh once its apiserver answers again.
					e.OnLost(m.name)
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// connect readies m after a (re)connect: the member's namespace and fleet
// identity record, then a sync of every Work (see sync).
func (e *Engine) connect(ctx context.Context, m *member, fleet string) error {
	if err := ensureNamespace(ctx, m.cluster.GetClient(), flotillav1.SystemNamespace); err != nil {
		return err
	}
	identity := &works.FleetIdentity{
		Reader: crclient.Reader(m.cluster.GetAPIReader()), Writer: crclient.Client(m.cluster.GetClient()), Namespace: flotillav1.SystemNamespace,
		Applier: m.applier, Log: e.Log.WithValues("member", m.name),
	}
	if err := identity.Admit(ctx, fleet, m.name); err != nil {
		// The member serves another fleet (or cluster name): push nothing.
		e.Health.PushUnavailable(m.name, flotillav1.ReasonFleetMismatch, fmt.Sprintf("Push member %s refused: %v", m.name, err))
		return err
	}
	if err := m.applier.Load(ctx); err != nil {
		return fmt.Errorf("loading the applied-set records: %w", err)
	}
	if !m.cluster.GetCache().WaitForCacheSync(ctx) {
		return errors.New("the member's cache did not sync")
	}
	return e.sync(ctx, m, false)
}

// sync is the push counterpart of a complete snapshot: once the hub's Work
// cache has synced, it prunes the recorded objects of every Work the hub
// no longer has for m (under the deletion brake, unless confirmed), marks
// m ready and asks for a reconcile of each of its Works.
func (e *Engine) sync(ctx context.Context, m *member, confirmed bool) error {
	for !e.Works.HasSynced() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	list, err := e.Works.ListWorks(m.name)
	if err != nil {
		return err
	}
	keep := make([]string, 0, len(list))
	for _, w := range list {
		keep = append(keep, w.Name)
	}
	m.mu.Lock()
	m.epoch++
	epoch := m.epoch
	m.mu.Unlock()
	err = m.store.SnapshotComplete(ctx, keep, confirmed)
	var blocked *apply.PruneBlockedError
	switch {
	case errors.As(err, &blocked):
		m.mu.Lock()
		m.blocked = epoch
		m.mu.Unlock()
		e.Health.AgentPruneBlocked(m.name, syncserver.PruneBlocked{Epoch: epoch, WouldDelete: int64(blocked.WouldDelete), Held: int64(blocked.Held), Works: slices.Clone(blocked.Works)})
	case err != nil:
		return err
	default:
		m.mu.Lock()
		m.blocked = 0
		m.mu.Unlock()
		e.Health.AgentPruned(m.name, epoch, confirmed)
	}
	m.setReady(true)
	for _, name := range keep {
		e.kick.add(request(m.name, name))
	}
	terminating, err := e.Works.TerminatingWorks(m.name)
	if err != nil {
		return err
	}
	for _, name := range terminating {
		e.kick.add(request(m.name, name))
	}
	return nil
}

// ConfirmPrune releases the prune of epoch that the deletion brake held
// for member, as an admin's confirmation does for an agent. It reports
// whether member is a Push member this engine serves (and the prune was
// started).
func (e *Engine) ConfirmPrune(cluster string, epoch uint64) bool {
	m := e.member(cluster)
	if m == nil {
		return false
	}
	m.mu.Lock()
	ok := m.blocked != 0 && m.blocked == epoch
	m.mu.Unlock()
	if !ok {
		return false
	}
	go func() {
		if err := e.sync(m.ctx, m, true); err != nil && m.ctx.Err() == nil {
			e.Log.Error(err, "the confirmed prune of a Push member failed", "member", m.name)
		}
	}()
	return true
}

// Serves says whether member is an engaged Push member.
func (e *Engine) Serves(cluster string) bool { return e.member(cluster) != nil }

func (m *member) setReady(ready bool) {
	m.mu.Lock()
	m.ready = ready
	m.mu.Unlock()
}

func (m *member) isReady() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ready
}

// Reconcile makes member req.ClusterName run Work req.Name as the hub has
// it: apply (or only report, when nothing changed or drifted), or delete,
// orphan and confirm when the Work is going.
func (e *Engine) Reconcile(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
	m := e.member(string(req.ClusterName))
	if m == nil || !m.isReady() || !e.Works.HasSynced() {
		// Its (re)connect syncs every Work.
		return reconcile.Result{}, nil
	}
	name := req.Name
	work, err := e.Works.GetWork(m.name, name)
	if err != nil {
		return reconcile.Result{}, err
	}
	if work == nil {
		return e.remove(ctx, m, name)
	}
	live := func(w *flotillav1.Work) ([]kclient.Object, error) {
		return works.LiveObjects(ctx, crclient.Reader(m.cluster.GetCache()), w)
	}
	applied, err := m.store.Sync(ctx, work, live)
	if applied {
		e.Metrics.applied(m.name, err)
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: e.Resync}, nil
}

// remove handles a Work that is going (terminating, held by its finalizer)
// or gone: by its deletion intent, the objects it applied are deleted
// (paced per member), or released from the record (no intent: the Work
// vanished without meaning to delete, as WorkOrphan); then the hub hears
// the member is done with it.
func (e *Engine) remove(ctx context.Context, m *member, name string) (reconcile.Result, error) {
	recorded := len(m.applier.AppliedSet(name)) > 0
	if recorded || m.store.Holds(name) {
		reason, known := e.Works.DeletionIntent(m.name, name)
		if known && reason != "" {
			r := m.limiter.Reserve()
			if d := r.Delay(); d > 0 {
				r.Cancel()
				return reconcile.Result{RequeueAfter: d}, nil
			}
			if err := m.store.Delete(ctx, name); err != nil {
				return reconcile.Result{}, err
			}
		} else if err := m.store.Orphan(ctx, name); err != nil {
			return reconcile.Result{}, err
		}
	}
	e.Deletions.WorkGone(ctx, m.name, name)
	return reconcile.Result{}, nil
}

// kicker is a source the engine feeds requests into: a member's Works
// after it (re)connects, and Works the hub's informer changed.
type kicker struct {
	mu      sync.Mutex
	q       workqueue.TypedRateLimitingInterface[mcreconcile.Request]
	pending []mcreconcile.Request
}

var _ source.TypedSource[mcreconcile.Request] = (*kicker)(nil)

// Start implements source.TypedSource.
func (k *kicker) Start(_ context.Context, q workqueue.TypedRateLimitingInterface[mcreconcile.Request]) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.q = q
	for _, r := range k.pending {
		q.Add(r)
	}
	k.pending = nil
	return nil
}

func (k *kicker) add(r mcreconcile.Request) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.q == nil {
		k.pending = append(k.pending, r)
		return
	}
	k.q.Add(r)
}

// String names the source in logs.
func (k *kicker) String() string { return "push-kicker" }

func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s in the member: %w", name, err)
	}
	return nil
}
