package myapp

import (
	"maps"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/appstatus"
	"github.com/flotilla-dev/flotilla/hub/render"
	"github.com/flotilla-dev/flotilla/pkg/rollout"
	"github.com/flotilla-dev/flotilla/pkg/workstatus"
)

// plan is what one reconcile will write and how it will look.
type plan struct {
	// apply are the Works to create or update.
	apply []*flotillav1.Work
	// remove are the Works to delete.
	remove []*flotillav1.Work
	// views feed the status computation.
	views []appstatus.ClusterView
	// requeueAfter is when a kept evicted Work's grace period ends.
	requeueAfter time.Duration
	// maxWorkBytes bounds each rendered Work's manifests (0: the default).
	maxWorkBytes int
	// deps gives the rendering the objects the app's pods use.
	deps render.DependencySource
}

// planWorks decides which Works to write, keep and delete for decision,
// rendering each target cluster once with the Pod Security level
// podSecurity. revisions, set for a Progressive rollout, name the revision
// each target cluster renders; replicas always come from decision and the
// current spec. It leaves existing as it is.
func planWorks(app *flotillav1.MyApp, decision *flotillav1.PlacementDecision, clusters clusterSet, existing map[string]*flotillav1.Work, revisions map[string]*flotillav1.RevisionTemplate, podSecurity flotillav1.PodSecurityLevel, maxWorkBytes int, deps render.DependencySource, now time.Time) (plan, error) {
	p := plan{maxWorkBytes: maxWorkBytes, deps: deps}
	wanted := map[string]bool{}
	for _, tc := range decision.Clusters {
		if err := p.target(app, tc, clusters.byName[tc.Name], existing[tc.Name], revisions[tc.Name], podSecurity); err != nil {
			return p, err
		}
		wanted[tc.Name] = true
	}
	p.evicted(app, decision, clusters, existing, wanted, now)
	for name, w := range existing {
		if !wanted[name] && w.DeletionTimestamp.IsZero() {
			p.removeWhenReady(app, w, clusters.byName[name])
		}
	}
	sort.Slice(p.remove, func(i, j int) bool { return p.remove[i].Namespace < p.remove[j].Namespace })
	return p, nil
}

// removeWhenReady plans to delete w, a Work of app in cluster mc (nil when
// the MemberCluster is gone), once the agent knows what to do with its
// objects. The agent deletes or releases them by the Work's
// spec.deletionPolicy as it last received it, and a Work's last change
// and its deletion may reach it as one message, so a Work whose policy is
// not the one in force (the MyApp's changed, or its cluster drains) is
// first updated, and an Orphan Work is deleted only once its agent
// observed it (or the cluster is not Ready, when no agent would hear of
// the update either: its next snapshot prunes by the recorded policy).
// Until then the Work stays and the app is looked at again.
func (p *plan) removeWhenReady(app *flotillav1.MyApp, w *flotillav1.Work, mc *flotillav1.MemberCluster) {
	policy := render.DeletionPolicy(app, mc)
	if render.PolicyOf(w) != policy {
		p.apply = append(p.apply, withDeletionPolicy(w, policy))
		p.requeueAfter = earliest(p.requeueAfter, policyRecheck)
		return
	}
	if policy == flotillav1.DeletionPolicyOrphan && !workstatus.Observed(w) && clusterReady(mc) {
		p.requeueAfter = earliest(p.requeueAfter, policyRecheck)
		return
	}
	p.remove = append(p.remove, w)
}

// withDeletionPolicy is what to apply to make w, as it is, carry policy:
// a new object with w's name, labels and spec (a cached Work's server-set
// metadata cannot go into an apply).
func withDeletionPolicy(w *flotillav1.Work, policy flotillav1.DeletionPolicy) *flotillav1.Work {
	u := &flotillav1.Work{
		TypeMeta:   metav1.TypeMeta{APIVersion: flotillav1.GroupVersion.String(), Kind: "Work"},
		ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace, Labels: maps.Clone(w.Labels)},
		Spec:       *w.Spec.DeepCopy(),
	}
	u.Spec.DeletionPolicy = policy
	return u
}

// policyRecheck is how soon a Work held back by removeWhenReady is looked
// at again; its status update from the agent usually comes first.
const policyRecheck = 2 * time.Second

// clusterReady says mc exists and its Ready condition is True.
func clusterReady(mc *flotillav1.MemberCluster) bool {
	return mc != nil && meta.IsStatusConditionTrue(mc.Status.Conditions, flotillav1.ConditionReady)
}

// target renders the Work of one target cluster (at revision rt, when set)
// and plans to write it unless cur already asks for the same.
func (p *plan) target(app *flotillav1.MyApp, tc flotillav1.TargetCluster, mc *flotillav1.MemberCluster, cur *flotillav1.Work, rt *flotillav1.RevisionTemplate, podSecurity flotillav1.PodSecurityLevel) error {
	src := app
	if rt != nil {
		src = rollout.AppAt(app, rt)
	}
	desired, replicas, err := render.Work(src, tc.Name, mc, tc.Replicas, podSecurity, p.deps)
	if err != nil {
		return err
	}
	if err := render.CheckWorkSize(app, desired, p.maxWorkBytes); err != nil {
		return err
	}
	if rt != nil {
		desired.Labels[flotillav1.LabelRevision] = rt.Name
	}
	view := appstatus.ClusterView{Name: tc.Name, Assigned: replicas, Member: mc, Work: cur}
	if cur != nil && !cur.DeletionTimestamp.IsZero() {
		// The old Work waits for its member to confirm its deletion (its
		// finalizer); the new one is written once it is gone, which
		// requeues the app.
		view.Work = nil
		p.views = append(p.views, view)
		p.requeueAfter = earliest(p.requeueAfter, policyRecheck)
		return nil
	}
	if cur == nil || !render.SameManifests(cur.Spec.Manifests, desired.Spec.Manifests) || render.PolicyOf(cur) != desired.Spec.DeletionPolicy ||
		cur.Spec.PodSecurity != desired.Spec.PodSecurity || !equality.Semantic.DeepEqual(cur.Spec.Health, desired.Spec.Health) ||
		!labelsContain(cur.Labels, desired.Labels) || !slices.Contains(cur.Finalizers, flotillav1.WorkFinalizer) {
		p.apply = append(p.apply, desired)
		// The member has not seen this spec yet.
		if cur != nil {
			stale := cur.DeepCopy()
			stale.Generation++
			view.Work = stale
		}
	}
	p.views = append(p.views, view)
	return nil
}

// evicted plans the clusters replicas were moved away from: their Work is
// kept while the purge policy says so (Graciously: until the replacements
// are available or the grace period ends), and a cluster without a Work
// still shows, as lost, until it fails back, so a reader of the status sees
// where the replicas went and why. It marks kept clusters in wanted.
func (p *plan) evicted(app *flotillav1.MyApp, decision *flotillav1.PlacementDecision, clusters clusterSet, existing map[string]*flotillav1.Work, wanted map[string]bool, now time.Time) {
	allAvailable := true
	for _, v := range p.views {
		if appstatus.Cluster(v).Phase != flotillav1.ClusterAppAvailable || v.Work == nil || !workstatus.Observed(v.Work) {
			allAvailable = false
		}
	}
	cu := clusterUnreachable(app)
	for _, e := range decision.Evicted {
		cur := existing[e.Name]
		if cur == nil || !cur.DeletionTimestamp.IsZero() || wanted[e.Name] {
			continue
		}
		mode, since := cu.PurgeMode, e.EvictionTime.Time
		mc := clusters.byName[e.Name]
		if mc != nil && !mc.DeletionTimestamp.IsZero() {
			// A drained cluster's replicas always move graciously: the
			// cluster is still there, and its Work goes once the
			// replacements run (or the grace period ends).
			mode, since = flotillav1.PurgeGraciously, mc.DeletionTimestamp.Time
		}
		keep := mode == flotillav1.PurgeNever
		if mode != flotillav1.PurgeNever && mode != flotillav1.PurgeImmediately { // Graciously
			deadline := since.Add(time.Duration(*cu.GracePeriodSeconds) * time.Second)
			if !allAvailable && now.Before(deadline) {
				keep = true
				p.requeueAfter = earliest(p.requeueAfter, deadline.Sub(now))
			}
		}
		if keep {
			wanted[e.Name] = true
			if policy := render.DeletionPolicy(app, mc); render.PolicyOf(cur) != policy {
				// Tell the agent now what the Work's deletion will mean.
				p.apply = append(p.apply, withDeletionPolicy(cur, policy))
			}
			p.views = append(p.views, appstatus.ClusterView{Name: e.Name, Assigned: e.Replicas, Member: mc, Work: cur, Evicting: true})
		}
	}
	for i, e := range decision.Evicted {
		if !wanted[e.Name] {
			p.views = append(p.views, appstatus.ClusterView{Name: e.Name, Member: clusters.byName[e.Name], Evicted: &decision.Evicted[i]})
		}
	}
}

// clusterUnreachable returns the app's unreachable-cluster policy with the
// CRD's defaults filled in.
func clusterUnreachable(app *flotillav1.MyApp) flotillav1.ClusterFailover {
	out := flotillav1.ClusterFailover{PurgeMode: flotillav1.DefaultPurgeMode, GracePeriodSeconds: ptr.To(flotillav1.DefaultGracePeriodSeconds)}
	if app.Spec.Failover != nil && app.Spec.Failover.ClusterUnreachable != nil {
		in := app.Spec.Failover.ClusterUnreachable
		if in.PurgeMode != "" {
			out.PurgeMode = in.PurgeMode
		}
		if in.GracePeriodSeconds != nil {
			out.GracePeriodSeconds = in.GracePeriodSeconds
		}
	}
	return out
}

func labelsContain(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
