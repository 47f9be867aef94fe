package myapp

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// +kubebuilder:rbac:groups=gateway.networking.k8s.io,resources=httproutes,verbs=get;update

// syncHTTPRoute writes the traffic weights of st into the HTTPRoute that
// app's spec.traffic.httpRoute names: each backendRef that stands for a
// cluster (in every rule) gets the cluster's weight, a cluster that runs
// nothing gets 0, and nothing else in the route changes. It reads the
// route live (no informer: the Gateway API may not be installed on the
// hub) and updates it only when a weight differs, with optimistic locking,
// so a concurrent edit is never overwritten blindly; a conflict is tried
// again on the next reconcile. It returns the route's status and whether
// the write must be retried.
func (r *Reconciler) syncHTTPRoute(ctx context.Context, app *flotillav1.MyApp, st *flotillav1.TrafficStatus) (*flotillav1.HTTPRouteStatus, bool) {
	spec := app.Spec.Traffic.HTTPRoute
	out := &flotillav1.HTTPRouteStatus{Name: spec.Name}
	fail := func(format string, args ...any) (*flotillav1.HTTPRouteStatus, bool) {
		out.Message = fmt.Sprintf(format, args...)
		return out, true
	}
	route := &gatewayv1.HTTPRoute{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: app.Namespace, Name: spec.Name}, route); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return fail("HTTPRoute %s/%s: %v", app.Namespace, spec.Name, err)
		}
		return fail("reading HTTPRoute %s/%s: %v", app.Namespace, spec.Name, err)
	}
	weights := map[string]int32{}
	for _, c := range st.Clusters {
		weights[c.Name] = c.Weight
	}
	byRef := map[backendKey]string{}
	for _, b := range spec.Backends {
		byRef[keyOf(b.BackendGroup, b.BackendKind, b.BackendName)] = b.Cluster
	}
	found := map[string]bool{}
	changed := false
	for i := range route.Spec.Rules {
		for j := range route.Spec.Rules[i].BackendRefs {
			ref := &route.Spec.Rules[i].BackendRefs[j].BackendRef
			if ref.Namespace != nil && string(*ref.Namespace) != app.Namespace {
				continue
			}
			group, kind := "", "Service"
			if ref.Group != nil {
				group = string(*ref.Group)
			}
			if ref.Kind != nil {
				kind = string(*ref.Kind)
			}
			cluster, ok := byRef[keyOf(group, kind, string(ref.Name))]
			if !ok {
				continue
			}
			found[cluster] = true
			w := weights[cluster]
			if ref.Weight == nil || *ref.Weight != w {
				ref.Weight = &w
				changed = true
			}
		}
	}
	var missing []string
	for _, b := range spec.Backends {
		if !found[b.Cluster] && weights[b.Cluster] > 0 {
			missing = append(missing, fmt.Sprintf("%s (%s)", b.Cluster, b.BackendName))
		}
	}
	if changed {
		if err := r.Client.Update(ctx, route); err != nil {
			return fail("writing the weights into HTTPRoute %s/%s: %v", app.Namespace, spec.Name, err)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		out.Message = "no backendRef in the route for the clusters " + strings.Join(missing, ", ") + ", which carry traffic"
		return out, false
	}
	out.Synced = true
	return out, false
}

// httpRouteRetry is how soon a route that could not be read or written is
// tried again.
const httpRouteRetry = 5 * time.Second

type backendKey struct{ group, kind, name string }

func keyOf(group, kind, name string) backendKey {
	if kind == "" {
		kind = "Service"
	}
	return backendKey{group: group, kind: kind, name: name}
}
