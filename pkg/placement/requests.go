package placement

import (
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// MergeResources returns base with the requests, limits and claims of o
// set on top, per resource name (o's value wins). It is how a resources
// override changes the main container.
func MergeResources(base corev1.ResourceRequirements, o *corev1.ResourceRequirements) corev1.ResourceRequirements {
	out := *base.DeepCopy()
	if len(o.Requests) > 0 && out.Requests == nil {
		out.Requests = corev1.ResourceList{}
	}
	for k, q := range o.Requests {
		out.Requests[k] = q.DeepCopy()
	}
	if len(o.Limits) > 0 && out.Limits == nil {
		out.Limits = corev1.ResourceList{}
	}
	for k, q := range o.Limits {
		out.Limits[k] = q.DeepCopy()
	}
	for _, c := range o.Claims {
		if i := slices.IndexFunc(out.Claims, func(have corev1.ResourceClaim) bool { return have.Name == c.Name }); i >= 0 {
			out.Claims[i] = c
		} else {
			out.Claims = append(out.Claims, c)
		}
	}
	return out
}

// PodRequests is what one replica's pod requests, as the kubelet and the
// Kubernetes scheduler count it: each container's requests (its limits
// where it sets no request), summed over the containers and the sidecars
// (init containers that keep running), and at least what each plain init
// container needs beside the sidecars started before it, plus the pod's
// overhead. main, when not nil, replaces per resource name the main
// container's requirements (a resources override). An unrenderable spec
// (no main container) counts the containers it has.
func PodRequests(spec *v1alpha1.MyAppSpec, main *corev1.ResourceRequirements) corev1.ResourceList {
	t := spec.Template
	if t == nil || t.Spec == nil {
		var r corev1.ResourceRequirements
		if t != nil {
			r = t.Resources
		}
		if main != nil {
			r = MergeResources(r, main)
		}
		return containerRequests(&r)
	}
	mainIdx, err := v1alpha1.MainContainerIndex(spec)
	sum := corev1.ResourceList{}
	for i := range t.Spec.Containers {
		r := t.Spec.Containers[i].Resources
		if main != nil && err == nil && i == mainIdx {
			r = MergeResources(r, main)
		}
		addTo(sum, containerRequests(&r))
	}
	sidecars := corev1.ResourceList{}
	initMax := corev1.ResourceList{}
	for i := range t.Spec.InitContainers {
		c := &t.Spec.InitContainers[i]
		req := containerRequests(&c.Resources)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			addTo(sidecars, req)
			continue
		}
		// A plain init container runs beside the sidecars started before it.
		addTo(req, sidecars)
		maxInto(initMax, req)
	}
	addTo(sum, sidecars)
	maxInto(sum, initMax)
	addTo(sum, t.Spec.Overhead)
	return sum
}

// containerRequests is a container's requests, defaulted from its limits
// as the apiserver defaults them.
func containerRequests(r *corev1.ResourceRequirements) corev1.ResourceList {
	out := make(corev1.ResourceList, len(r.Limits)+len(r.Requests))
	for name, q := range r.Limits {
		out[name] = q.DeepCopy()
	}
	for name, q := range r.Requests {
		out[name] = q.DeepCopy()
	}
	return out
}

func addTo(sum, add corev1.ResourceList) {
	for name, q := range add {
		have := sum[name]
		have.Add(q)
		sum[name] = have
	}
}

func maxInto(acc, other corev1.ResourceList) {
	for name, q := range other {
		if have, ok := acc[name]; !ok || q.Cmp(have) > 0 {
			acc[name] = q.DeepCopy()
		}
	}
}

// clusterRequests is what one replica's pod requests in each cluster
// whose overrides change the main container's resources; clusters not
// listed use the app's own requests.
func clusterRequests(app *v1alpha1.MyApp, clusters []v1alpha1.MemberCluster) map[string]corev1.ResourceList {
	var withResources []*v1alpha1.ClusterOverride
	for i := range app.Spec.Overrides {
		if app.Spec.Overrides[i].Resources != nil {
			withResources = append(withResources, &app.Spec.Overrides[i])
		}
	}
	if len(withResources) == 0 {
		return nil
	}
	out := map[string]corev1.ResourceList{}
	for i := range clusters {
		mc := &clusters[i]
		var merged *corev1.ResourceRequirements
		for _, o := range withResources {
			// An override whose selector does not compile is refused by
			// the webhook and fails rendering; here it selects nothing.
			if ok, err := AffinityMatches(&o.TargetCluster, mc); err != nil || !ok {
				continue
			}
			m := MergeResources(ptrDeref(merged), o.Resources)
			merged = &m
		}
		if merged != nil {
			out[mc.Name] = PodRequests(&app.Spec, merged)
		}
	}
	return out
}

func ptrDeref(r *corev1.ResourceRequirements) corev1.ResourceRequirements {
	if r == nil {
		return corev1.ResourceRequirements{}
	}
	return *r
}
