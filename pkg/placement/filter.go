package placement

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// affinity is a compiled v1alpha1.ClusterAffinity. The zero value (and a
// nil *affinity) selects every cluster.
type affinity struct {
	names    map[string]struct{}
	exclude  map[string]struct{}
	selector labels.Selector
	fields   []v1alpha1.FieldSelectorRequirement
}

// compileAffinity compiles a; nil selects every cluster.
func compileAffinity(a *v1alpha1.ClusterAffinity) (*affinity, error) {
	if a == nil {
		return nil, nil
	}
	out := &affinity{names: set(a.ClusterNames), exclude: set(a.ExcludeClusters)}
	if a.LabelSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(a.LabelSelector)
		if err != nil {
			return nil, fmt.Errorf("invalid labelSelector: %w", err)
		}
		out.selector = sel
	}
	if a.FieldSelector != nil {
		for _, r := range a.FieldSelector.MatchExpressions {
			switch r.Key {
			case v1alpha1.ClusterFieldProvider, v1alpha1.ClusterFieldRegion, v1alpha1.ClusterFieldZone:
			default:
				return nil, fmt.Errorf("invalid fieldSelector: unknown key %q", r.Key)
			}
			switch r.Operator {
			case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist:
			default:
				return nil, fmt.Errorf("invalid fieldSelector: unknown operator %q", r.Operator)
			}
		}
		out.fields = a.FieldSelector.MatchExpressions
	}
	return out, nil
}

func set(names []string) map[string]struct{} {
	if len(names) == 0 {
		return nil
	}
	m := make(map[string]struct{}, len(names))
	for _, n := range names {
		m[n] = struct{}{}
	}
	return m
}

// match says whether the affinity selects mc and, when it does not, why.
// A cluster must match every field that is set and not be excluded.
func (a *affinity) match(mc *v1alpha1.MemberCluster) (bool, string) {
	if a == nil {
		return true, ""
	}
	if _, ok := a.exclude[mc.Name]; ok {
		return false, "excluded by clusterAffinity"
	}
	if a.names != nil {
		if _, ok := a.names[mc.Name]; !ok {
			return false, "not in clusterAffinity (clusterNames)"
		}
	}
	if a.selector != nil && !a.selector.Matches(labels.Set(mc.Labels)) {
		return false, "not in clusterAffinity (labelSelector)"
	}
	for i := range a.fields {
		if !matchField(&a.fields[i], fieldValue(mc, a.fields[i].Key)) {
			return false, "not in clusterAffinity (fieldSelector " + string(a.fields[i].Key) + ")"
		}
	}
	return true, ""
}

// matchField applies one requirement the way a node selector does: an unset
// field ("") does not exist, so only NotIn and DoesNotExist match it.
func matchField(r *v1alpha1.FieldSelectorRequirement, v string) bool {
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return v != "" && slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpNotIn:
		return v == "" || !slices.Contains(r.Values, v)
	case corev1.NodeSelectorOpExists:
		return v != ""
	case corev1.NodeSelectorOpDoesNotExist:
		return v == ""
	}
	return false
}

// fieldValue returns a cluster's provider, region or zone.
func fieldValue(mc *v1alpha1.MemberCluster, f v1alpha1.ClusterField) string {
	switch f {
	case v1alpha1.ClusterFieldProvider:
		return mc.Spec.Provider
	case v1alpha1.ClusterFieldRegion:
		return mc.Spec.Region
	case v1alpha1.ClusterFieldZone:
		return mc.Spec.Zone
	}
	return ""
}

// term is one affinity group to try.
type term struct {
	name string
	aff  *affinity
}

// terms compiles the placement's affinity groups in the order to try them:
// the clusterAffinities list, or the single clusterAffinity (unnamed).
func terms(p *v1alpha1.Placement) ([]term, error) {
	if len(p.ClusterAffinities) == 0 {
		aff, err := compileAffinity(p.ClusterAffinity)
		if err != nil {
			return nil, fmt.Errorf("clusterAffinity: %w", err)
		}
		return []term{{aff: aff}}, nil
	}
	out := make([]term, 0, len(p.ClusterAffinities))
	for i := range p.ClusterAffinities {
		t := &p.ClusterAffinities[i]
		aff, err := compileAffinity(&t.ClusterAffinity)
		if err != nil {
			return nil, fmt.Errorf("clusterAffinities[%s]: %w", t.AffinityName, err)
		}
		out = append(out, term{name: t.AffinityName, aff: aff})
	}
	return out, nil
}

// FilterAcceptance: the MemberCluster is not Accepted (it joined and waits
// for `kubectl flotilla accept`, or it was denied). It is a ClusterReason
// Filter like those in types.go, kept here beside its check.
const FilterAcceptance = "Acceptance"

// accepted says whether mc may take replicas at all as far as the hub's
// double opt-in goes and, when it may not, why. A member that is not
// Accepted has no certificate and no stream, so replicas placed there
// would never run; unlike a NoSchedule taint it keeps nothing either,
// since a Denied member's agent is cut off.
func accepted(mc *v1alpha1.MemberCluster) (bool, string) {
	if mc.IsAccepted() {
		return true, ""
	}
	switch mc.Spec.Acceptance {
	case v1alpha1.AcceptancePending:
		return false, "not Accepted: Pending (kubectl flotilla accept " + mc.Name + ")"
	case v1alpha1.AcceptanceDenied:
		return false, "not Accepted: Denied"
	}
	return false, "not Accepted: " + string(mc.Spec.Acceptance)
}
