package myapp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/render"
	"github.com/flotilla-dev/flotilla/internal/truncate"
)

// +kubebuilder:rbac:groups=flotilla.dev,resources=myapps,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=flotilla.dev,resources=myapps/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=flotilla.dev,resources=myapps/finalizers,verbs=update
// +kubebuilder:rbac:groups=flotilla.dev,resources=works,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=flotilla.dev,resources=memberclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=flotilla.dev,resources=fleetnamespacepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler reconciles MyApps into Works.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the hub.
	Client client.Client
	// Recorder emits an event on the MyApp for every placement change.
	Recorder events.EventRecorder
	// Clock is the time source (a fake one in tests).
	Clock clock.PassiveClock
	// MaxConcurrentReconciles bounds parallel reconciles (default
	// DefaultWorkers).
	MaxConcurrentReconciles int
	// WorkCleanupTimeout bounds how long a deleted Work waits for its
	// member's confirmation (DefaultWorkCleanupTimeout when zero).
	WorkCleanupTimeout time.Duration
	// RevisionKey reads the hub's secret key that signs the revision
	// templates a Progressive rollout keeps in MyApp status (see
	// pkg/rollout). It is called once, the first time a Progressive app is
	// reconciled; without it such apps are not reconciled.
	RevisionKey func(context.Context) ([]byte, error)
	// MaxWorkBytes bounds the manifests of one Work (render.DefaultMaxWorkBytes
	// when zero): an app whose Work for some cluster is larger is Degraded
	// (WorkTooLarge) and nothing of it is written.
	MaxWorkBytes int
	// APIReader reads the content of the ConfigMaps, Secrets and
	// ServiceAccounts the apps' pods use, live, when the metadata cache
	// says it changed (only their metadata is cached). Client when nil.
	APIReader client.Reader
	// Reports, when set, gives the Work status the hub's status writer is
	// about to write (see StatusReports): an app's status is computed
	// from it, so it does not wait for the Work status write and its
	// watch event. Placement, rollouts, health shifts and deletions
	// decide on the Works' stored status only.
	Reports StatusReports

	// reported carries the Works ReportArrived is told of to the
	// controller (buffered; see ReportArrived).
	reported chan event.GenericEvent

	deps depCache
	// rolloutSeen is where each rollout stood when last exported
	// (types.NamespacedName -> rolloutMark), to tell when it moved.
	rolloutSeen sync.Map
	// lingers holds when the apps over many clusters were last
	// reconciled, for their Work events to linger (see linger).
	lingers lingers
	keyMu   sync.Mutex
	key     []byte
}

var _ reconcile.Reconciler = &Reconciler{}

// StatusReports is the hub's Work status writer as the MyApp controller
// reads it.
type StatusReports interface {
	// Reported is the status the writer is about to give work, when the
	// cache does not hold it yet; nil when the cache's is the latest.
	Reported(work *flotillav1.Work) *flotillav1.WorkStatus
}

// reportBuffer bounds the Works ReportArrived holds for the controller.
// A report that finds it full is not lost: its Work status write brings
// the same reconcile through the Work watch, only later.
const reportBuffer = 1024

// ReportArrived enqueues the MyApp of work (as its Work events do, see
// workHandler): a member's report changed the status the hub's status
// writer is about to give it. It never blocks.
func (r *Reconciler) ReportArrived(work *flotillav1.Work) {
	if r.reported == nil {
		return
	}
	select {
	case r.reported <- event.GenericEvent{Object: work}:
	default:
	}
}

// DefaultWorkers is MaxConcurrentReconciles when zero. A reconcile spends
// most of its time waiting for the apiserver (its Work writes, its status
// write), so throughput grows with workers well past the core count: the
// scale harness (docs/benchmarks.md, Scale) measured the queue wait at 4.
const DefaultWorkers = 16

// SetupWithManager registers the controller: MyApps, the Works they own
// (mapped back by label), MemberCluster changes that matter to placement,
// and FleetNamespacePolicy changes (the MyApps of the hub namespaces they
// match).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = DefaultWorkers
	}
	if r.APIReader == nil {
		r.APIReader = r.Client
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &flotillav1.Work{}, workAppIndex, workAppKeys); err != nil {
		return fmt.Errorf("indexing Works by MyApp: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &flotillav1.MyApp{}, dependencyIndex, dependencyKeys); err != nil {
		return fmt.Errorf("indexing MyApps by dependency: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if r.Reports != nil {
		r.reported = make(chan event.GenericEvent, reportBuffer)
		b = b.WatchesRawSource(source.Channel(r.reported, byEvent{workHandler{r}}))
	}
	// Only metadata: the hub does not keep every ConfigMap and Secret of
	// the cluster in memory, and reads the content of those apps use.
	for _, kind := range dependencyKinds {
		b = b.Watches(metadataOf(kind), handler.EnqueueRequestsFromMapFunc(r.dependencyToMyApps(kind)), builder.OnlyMetadata)
	}
	return b.
		// Every MyApp event, status writes included: the status is patched
		// against the cached MyApp, and a reconcile that ran on a cache
		// that had not yet seen the previous write must be followed by one
		// that has, or a stale status could stay (level-based: the extra
		// reconcile finds nothing to do once the cache has caught up).
		For(&flotillav1.MyApp{}).
		Watches(&flotillav1.Work{}, byEvent{workHandler{r}}).
		Watches(&flotillav1.MemberCluster{}, byEvent{memberClusterHandler{r}},
			builder.WithPredicates(placementRelevant{})).
		Watches(&flotillav1.FleetNamespacePolicy{}, handler.EnqueueRequestsFromMapFunc(r.policyToMyApps)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Named("myapp").
		Complete(r)
}

// Reconcile converges one MyApp in three steps: read the MyApp, the
// MemberClusters and its Works once (read); compute the placement, the
// rollout step, the Works to write and the status with pure functions
// (desired); write the Works and the status in one place (write).
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	start := time.Now()
	app := &flotillav1.MyApp{}
	if err := r.Client.Get(ctx, req.NamespacedName, app); err != nil {
		if apierrors.IsNotFound(err) {
			// The MyApp is gone: remove Works it may have left behind (a
			// Work written before its finalizer was, for example).
			r.clearRollout(req.Namespace, req.Name)
			r.lingers.forget(req.NamespacedName)
			return r.deleteWorks(ctx, req.Namespace, req.Name)
		}
		return reconcile.Result{}, fmt.Errorf("getting MyApp %s: %w", req, err)
	}
	began := r.now()
	r.lingers.reconciled(req.NamespacedName, len(app.Status.Clusters), began)
	if !app.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, app)
	}

	s, err := r.read(ctx, app)
	if err != nil {
		return reconcile.Result{}, err
	}
	d, err := desired(s)
	if err != nil {
		// An override selector that does not parse, or override patches
		// that do not apply to a cluster's rendering: retrying cannot help,
		// a new spec (or a fleet change) brings the next reconcile, and
		// until then every cluster keeps its last Work. Say so where the
		// user looks.
		if werr := r.renderFailed(ctx, app, err); werr != nil {
			return reconcile.Result{}, werr
		}
		return reconcile.Result{}, reconcile.TerminalError(err)
	}
	if n := len(d.status.Clusters); n > len(app.Status.Clusters) {
		// A new app over many clusters lingers from its first reconcile,
		// the one that writes its Works, not from the first status write.
		r.lingers.reconciled(req.NamespacedName, n, began)
	}
	return r.write(ctx, s, d, start)
}

func (r *Reconciler) maxWorkBytes() int {
	if r.MaxWorkBytes <= 0 {
		return render.DefaultMaxWorkBytes
	}
	return r.MaxWorkBytes
}

// renderFailed marks app Degraded with reason RenderFailed (WorkTooLarge
// when a Work is over the limit) and cause, and
// emits a warning event; the rest of its status stays as it was (the
// clusters still run their last Works). The next successful reconcile
// computes every condition afresh.
func (r *Reconciler) renderFailed(ctx context.Context, app *flotillav1.MyApp, cause error) error {
	msg := truncate.String("nothing was written, every cluster keeps its last Work: "+cause.Error(), 1024)
	reason := flotillav1.ReasonRenderFailed
	if tooLarge := (*render.WorkTooLargeError)(nil); errors.As(cause, &tooLarge) {
		reason = flotillav1.ReasonWorkTooLarge
	}
	if missing := (*render.DependencyMissingError)(nil); errors.As(cause, &missing) {
		reason = flotillav1.ReasonDependencyMissing
	}
	st := *app.Status.DeepCopy()
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: flotillav1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: reason,
		Message: msg, ObservedGeneration: app.Generation,
	})
	r.event(app, corev1.EventTypeWarning, reason, "Render", "%s", msg)
	return r.writeStatus(ctx, app, st, false)
}
