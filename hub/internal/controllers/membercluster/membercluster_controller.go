package membercluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/metrics"
)

// Defaults for the health controller.
const (
	// DefaultGrace is how long a member may go without a heartbeat before
	// it is not Ready and tainted unreachable. Agents heartbeat every 2s;
	// 14s covers an agent restart or leader change (a new agent process
	// waits out the killed leader's 5s Lease) with room to spare, and keeps
	// failover within 30s: see the timing budget in docs/architecture.md.
	DefaultGrace = 14 * time.Second
	// DefaultHeartbeatWriteInterval bounds how often a healthy member's
	// heartbeat alone is written to its status.
	DefaultHeartbeatWriteInterval = 30 * time.Second
)

// +kubebuilder:rbac:groups=flotilla.dev,resources=memberclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=flotilla.dev,resources=memberclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=flotilla.dev,resources=memberclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=flotilla.dev,resources=works,verbs=get;list;watch

// PruneConfirmer sends an admin's prune confirmation to a member's agent;
// the sync server is one.
type PruneConfirmer interface {
	// ConfirmPrune reports whether the confirmation of epoch is on its way
	// to cluster's agent (false: the agent's current stream has another
	// snapshot).
	ConfirmPrune(cluster string, epoch uint64) bool
}

// Reconciler keeps MemberCluster health up to date.
type Reconciler struct {
	Client  client.Client
	Tracker *Tracker
	Clock   clock.PassiveClock
	// Recorder emits events on MemberClusters (an agent refusing this
	// hub, a prune held by an agent's deletion brake, a confirmation
	// sent); nil emits none.
	Recorder events.EventRecorder
	// Prunes sends prune confirmations to agents; nil sends none.
	Prunes PruneConfirmer
	// Grace is the heartbeat grace period (DefaultGrace when zero).
	Grace time.Duration
	// HeartbeatWriteInterval bounds heartbeat-only status writes
	// (DefaultHeartbeatWriteInterval when zero).
	HeartbeatWriteInterval time.Duration
	// Evictions configure the partition brake and the eviction rate limit
	// (see decideEvictions).
	Evictions EvictionOptions
	// APIReader reads every MemberCluster live when a taint is decided
	// (nil: Client).
	APIReader client.Reader
	// Namespace is the hub's namespace, which holds the hub status
	// ConfigMap ("" writes none).
	Namespace string

	since      time.Time // set at the first reconcile: see leaderSince
	fleet      fleetState
	namespaces sync.Map // cluster namespaces known to exist
}

var _ reconcile.Reconciler = &Reconciler{}

// SetupWithManager registers the controller; it reconciles MemberClusters
// on their own changes and when the Tracker wakes it.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Grace == 0 {
		r.Grace = DefaultGrace
	}
	if r.HeartbeatWriteInterval == 0 {
		r.HeartbeatWriteInterval = DefaultHeartbeatWriteInterval
	}
	return ctrl.ControllerManagedBy(mgr).
		For(&flotillav1.MemberCluster{}).
		WatchesRawSource(source.Channel(r.Tracker.events, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4}).
		Named("membercluster").
		Complete(r)
}

// Reconcile updates one MemberCluster's health.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	mc := &flotillav1.MemberCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, mc); err != nil {
		if apierrors.IsNotFound(err) {
			pruneBlocked.DeleteLabelValues(req.Name)
			fleetMismatch.DeleteLabelValues(req.Name)
			metrics.ForgetCluster(req.Name)
			r.Tracker.forgetHeartbeat(req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !mc.DeletionTimestamp.IsZero() {
		return r.drain(ctx, mc)
	}
	if err := r.ensureFinalizer(ctx, mc); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.ensureNamespace(ctx, mc.Name); err != nil {
		return reconcile.Result{}, err
	}
	now := r.Clock.Now()
	agent, known := r.Tracker.snapshot(mc.Name)
	h := computeHealth(healthInput{
		now: now, grace: r.Grace, since: r.leaderSince(),
		agent: agent, known: known,
		recorded:   mc.Status.LastHeartbeatTime,
		conditions: mc.Status.Conditions,
		name:       mc.Name, acceptance: mc.Spec.Acceptance,
	})

	// Spec: the unreachable taint follows health.
	// The partition brake and the rate limit may hold a lost member's taint.
	td, err := r.decideTaint(ctx, mc, h, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if td.ready != nil {
		h.ready = *td.ready
	}
	if err := r.writeTaint(ctx, mc, td, now); err != nil {
		return reconcile.Result{}, err
	}
	before := mc.DeepCopy()
	readyBefore := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionReady)
	if err := r.writeStatus(ctx, mc, h, agent, known); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if readyBefore == nil || readyBefore.Status != h.ready.Status {
		r.exportReadiness(ctx)
	}
	r.reportSafety(before, mc)

	requeue := h.recheckAfter
	if d := td.recheckAfter; d > 0 && (requeue == 0 || d < requeue) {
		requeue = d
	}
	if h.healthy && known {
		// Come back to record the heartbeat when it is due.
		if d := r.HeartbeatWriteInterval; requeue == 0 || d < requeue {
			requeue = d
		}
	}
	return reconcile.Result{RequeueAfter: requeue}, nil
}

// writeTaint puts the unreachable taint on mc, or takes it off, as td says.
func (r *Reconciler) writeTaint(ctx context.Context, mc *flotillav1.MemberCluster, td taintDecision, now time.Time) error {
	taints := withUnreachableTaint(mc.Spec.Taints, td.taint, now)
	if equality.Semantic.DeepEqual(taints, mc.Spec.Taints) || (len(taints) == 0 && len(mc.Spec.Taints) == 0) {
		return nil
	}
	before := mc.DeepCopy()
	mc.Spec.Taints = taints
	if err := r.Client.Patch(ctx, mc, client.MergeFrom(before)); err != nil {
		return fmt.Errorf("updating the unreachable taint of %s: %w", mc.Name, err)
	}
	return nil
}

// writeStatus patches mc's status with its health, the agent's info and
// the prune brake, and records the heartbeat when a reader would act on
// the change or the heartbeat write is due. A NotFound error is returned
// as it is.
func (r *Reconciler) writeStatus(ctx context.Context, mc *flotillav1.MemberCluster, h healthOutput, agent agentState, known bool) error {
	before := mc.DeepCopy()
	meta.SetStatusCondition(&mc.Status.Conditions, h.ready)
	meta.SetStatusCondition(&mc.Status.Conditions, h.connected)
	if c := computePruneBlocked(mc.Name, agent, known); c != nil {
		meta.SetStatusCondition(&mc.Status.Conditions, *c)
	}
	r.confirmPrune(mc, agent)
	if known {
		if agent.connected {
			mc.Status.Agent = &flotillav1.AgentInfo{Version: agent.info.Version, Identity: agent.info.Identity, Instance: agent.info.Instance}
			if agent.info.KubernetesVersion != "" {
				mc.Status.KubernetesVersion = agent.info.KubernetesVersion
			}
		}
		if agent.resources != nil {
			mc.Status.Resources = agent.resources.DeepCopy()
		}
	}
	meaningful := !equality.Semantic.DeepEqual(before.Status, mc.Status)
	heartbeatDue := h.healthy && known && !h.lastHeartbeat.IsZero() &&
		(mc.Status.LastHeartbeatTime == nil || h.lastHeartbeat.Sub(mc.Status.LastHeartbeatTime.Time) >= r.HeartbeatWriteInterval)
	if (meaningful || heartbeatDue) && !h.lastHeartbeat.IsZero() && known {
		t := metav1.NewTime(h.lastHeartbeat)
		mc.Status.LastHeartbeatTime = &t
	}
	if equality.Semantic.DeepEqual(before.Status, mc.Status) {
		return nil
	}
	if err := r.Client.Status().Patch(ctx, mc, client.MergeFrom(before)); err != nil {
		if apierrors.IsNotFound(err) {
			return err
		}
		return fmt.Errorf("patching the status of %s: %w", mc.Name, err)
	}
	return nil
}

// confirmPrune sends the agent the confirmation an admin gave with the
// confirm-prune annotation, once per held prune.
func (r *Reconciler) confirmPrune(mc *flotillav1.MemberCluster, agent agentState) {
	epoch, due := confirmDue(mc.Annotations, agent)
	if !due || r.Prunes == nil {
		return
	}
	if r.Prunes.ConfirmPrune(mc.Name, epoch) {
		r.Tracker.markConfirmSent(mc.Name, epoch)
		r.event(mc, corev1.EventTypeNormal, "PruneConfirmed", "ConfirmPrune",
			"sent the agent the confirmation of the prune held after snapshot %d", epoch)
	}
}

// reportSafety emits events and metrics for the conditions an admin must
// act on: an agent refusing this hub, and a prune held by the brake.
func (r *Reconciler) reportSafety(before, after *flotillav1.MemberCluster) {
	connBefore := meta.FindStatusCondition(before.Status.Conditions, flotillav1.ConditionConnected)
	connAfter := meta.FindStatusCondition(after.Status.Conditions, flotillav1.ConditionConnected)
	mismatch := connAfter != nil && connAfter.Reason == flotillav1.ReasonFleetMismatch
	if mismatch && (connBefore == nil || connBefore.Reason != connAfter.Reason || connBefore.Message != connAfter.Message) {
		r.event(after, corev1.EventTypeWarning, flotillav1.ReasonFleetMismatch, "RefuseHub", "%s", connAfter.Message)
	}
	fleetMismatch.WithLabelValues(after.Name).Set(boolGauge(mismatch))

	pbBefore := meta.FindStatusCondition(before.Status.Conditions, flotillav1.ConditionPruneBlocked)
	pbAfter := meta.FindStatusCondition(after.Status.Conditions, flotillav1.ConditionPruneBlocked)
	blocked := pbAfter != nil && pbAfter.Status == metav1.ConditionTrue
	if blocked && (pbBefore == nil || pbBefore.Status != metav1.ConditionTrue || pbBefore.Message != pbAfter.Message) {
		r.event(after, corev1.EventTypeWarning, flotillav1.ConditionPruneBlocked, "HoldPrune", "%s", pbAfter.Message)
	}
	pruneBlocked.WithLabelValues(after.Name).Set(boolGauge(blocked))
}

func (r *Reconciler) event(mc *flotillav1.MemberCluster, typ, reason, action, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(mc, nil, typ, reason, action, format, args...)
	}
}

// ensureNamespace creates flotilla-cluster-<name>, once per process.
func (r *Reconciler) ensureNamespace(ctx context.Context, cluster string) error {
	name := flotillav1.ClusterNamespace(cluster)
	if _, ok := r.namespaces.Load(name); ok {
		return nil
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{flotillav1.LabelCluster: cluster}}}
	if err := r.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	r.namespaces.Store(name, true)
	return nil
}

// exportReadiness recounts clusters by Ready state for the metrics.
func (r *Reconciler) exportReadiness(ctx context.Context) {
	var list flotillav1.MemberClusterList
	if err := r.Client.List(ctx, &list); err != nil {
		return
	}
	counts := map[string]float64{"true": 0, "false": 0, "unknown": 0}
	for _, mc := range list.Items {
		switch c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionReady); {
		case c == nil || c.Status == metav1.ConditionUnknown:
			counts["unknown"]++
		case c.Status == metav1.ConditionTrue:
			counts["true"]++
		default:
			counts["false"]++
		}
	}
	for k, v := range counts {
		metrics.MemberClusters.WithLabelValues(k).Set(v)
	}
}
