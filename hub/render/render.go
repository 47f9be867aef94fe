// Package render turns a MyApp into what each member cluster runs: one
// Deployment per cluster with the per-cluster overrides applied, wrapped in
// the Work the hub writes to flotilla-cluster-<name>. It is pure; the MyApp
// controller and the admission webhook share it.
package render

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/ssa"
	"github.com/flotilla-dev/flotilla/pkg/placement"
)

// ContainerName is the name of the one container a MyApp without
// spec.template.spec renders.
const ContainerName = flotillav1.DefaultContainerName

// ClusterOverrides collects what the MyApp's overrides say for one cluster,
// applied in list order (a later override wins over an earlier one).
type ClusterOverrides struct {
	image        *flotillav1.ImageOverride
	replicas     *int32
	env          []corev1.EnvVar
	resources    *corev1.ResourceRequirements
	nodeSelector map[string]string
	tolerations  []corev1.Toleration
	patches      []overridePatches
}

// overridePatches are the JSON patches of one override, with its place in
// spec.overrides so an error can name it.
type overridePatches struct {
	index   int
	name    string
	patches []flotillav1.JSONPatch
}

// OverridesFor returns the overrides that apply to cluster mc (nil mc: a
// cluster the hub no longer knows, to which no selector applies).
func OverridesFor(app *flotillav1.MyApp, mc *flotillav1.MemberCluster) (ClusterOverrides, error) {
	var out ClusterOverrides
	if mc == nil {
		return out, nil
	}
	for i := range app.Spec.Overrides {
		o := &app.Spec.Overrides[i]
		ok, err := placement.AffinityMatches(&o.TargetCluster, mc)
		if err != nil {
			return out, fmt.Errorf("spec.overrides[%d] (%s): %w", i, o.Name, err)
		}
		if !ok {
			continue
		}
		if o.Image != nil {
			merged := ptr.Deref(out.image, flotillav1.ImageOverride{})
			if o.Image.Registry != "" {
				merged.Registry = o.Image.Registry
			}
			if o.Image.Repository != "" {
				merged.Repository = o.Image.Repository
			}
			if o.Image.Tag != "" {
				merged.Tag = o.Image.Tag
			}
			out.image = &merged
		}
		if o.Replicas != nil {
			out.replicas = ptr.To(*o.Replicas)
		}
		out.env = mergeEnv(out.env, o.Env)
		if o.Resources != nil {
			merged := placement.MergeResources(ptr.Deref(out.resources, corev1.ResourceRequirements{}), o.Resources)
			out.resources = &merged
		}
		for k, v := range o.NodeSelector {
			if out.nodeSelector == nil {
				out.nodeSelector = map[string]string{}
			}
			out.nodeSelector[k] = v
		}
		for _, tol := range o.Tolerations {
			// Two overrides selecting one cluster may carry the same
			// toleration; the pod needs it once.
			if !slices.ContainsFunc(out.tolerations, func(have corev1.Toleration) bool { return equality.Semantic.DeepEqual(have, tol) }) {
				out.tolerations = append(out.tolerations, *tol.DeepCopy())
			}
		}
		if len(o.Patches) > 0 {
			out.patches = append(out.patches, overridePatches{index: i, name: o.Name, patches: o.Patches})
		}
	}
	return out, nil
}

// mergeEnv sets each variable of extra in base, replacing one of the same
// name in place and appending new ones, so the order stays stable.
func mergeEnv(base, extra []corev1.EnvVar) []corev1.EnvVar {
	if len(extra) == 0 {
		return base
	}
	out := append([]corev1.EnvVar(nil), base...)
	for _, e := range extra {
		e := *e.DeepCopy()
		replaced := false
		for i := range out {
			if out[i].Name == e.Name {
				out[i] = e
				replaced = true
				break
			}
		}
		if !replaced {
			out = append(out, e)
		}
	}
	return out
}

// splitImage splits [registry/]repository[:tag][@digest] the way container
// runtimes do: the first path part is a registry when it has a dot or a
// port, or is localhost.
func splitImage(image string) (registry, repository, tag, digest string) {
	rest := image
	if i := strings.Index(rest, "@"); i >= 0 {
		rest, digest = rest[:i], rest[i+1:]
	}
	if i := strings.Index(rest, "/"); i >= 0 {
		first := rest[:i]
		if strings.ContainsAny(first, ".:") || first == "localhost" {
			registry, rest = first, rest[i+1:]
		}
	}
	if i := strings.LastIndex(rest, ":"); i >= 0 {
		rest, tag = rest[:i], rest[i+1:]
	}
	return registry, rest, tag, digest
}

// OverrideImage applies o to image. Overriding the tag drops a digest, since
// a digest would pin the old image whatever the tag says.
func OverrideImage(image string, o *flotillav1.ImageOverride) string {
	if o == nil {
		return image
	}
	registry, repository, tag, digest := splitImage(image)
	if o.Registry != "" {
		registry = o.Registry
	}
	if o.Repository != "" {
		repository = o.Repository
	}
	if o.Tag != "" {
		tag, digest = o.Tag, ""
	}
	out := repository
	if registry != "" {
		out = registry + "/" + out
	}
	if tag != "" {
		out += ":" + tag
	}
	if digest != "" {
		out += "@" + digest
	}
	return out
}

// SelectorLabels select the pods of app's Deployment in every member.
func SelectorLabels(app *flotillav1.MyApp) map[string]string {
	return map[string]string{
		flotillav1.LabelMyAppNamespace: app.Namespace,
		flotillav1.LabelMyAppName:      app.Name,
	}
}

// objectMeta is the metadata of the objects rendered for app: its name,
// the target namespace, and as labels the well-known name and manager and
// the selector labels.
func objectMeta(app *flotillav1.MyApp) metav1.ObjectMeta {
	labels := map[string]string{
		"app.kubernetes.io/name":       app.Name,
		"app.kubernetes.io/managed-by": "flotilla",
	}
	maps.Copy(labels, SelectorLabels(app))
	return metav1.ObjectMeta{Name: app.Name, Namespace: TargetNamespace(app), Labels: labels}
}

// TargetNamespace is where the Deployment goes in each member.
func TargetNamespace(app *flotillav1.MyApp) string {
	if app.Spec.TargetNamespace != "" {
		return app.Spec.TargetNamespace
	}
	return app.Namespace
}

// Deployment renders app's Deployment for one cluster with the scheduled
// replicas and that cluster's typed overrides (JSON patches are Work's
// last step). The error names the MyApp field that makes it impossible.
func Deployment(app *flotillav1.MyApp, replicas int32, ov ClusterOverrides) (*appsv1.Deployment, error) {
	sel := SelectorLabels(app)
	pod, err := podTemplate(app, ov)
	if err != nil {
		return nil, err
	}
	// The selector labels win over user labels, or the Deployment would not
	// select its own pods.
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	for k, v := range sel {
		pod.Labels[k] = v
	}
	if ov.replicas != nil {
		replicas = *ov.replicas
	}
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: objectMeta(app),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: pod,
		},
	}
	// The Deployment knobs pass through as they are; unset, the member's
	// apiserver defaults them as for any Deployment.
	if s := app.Spec.Strategy; s != nil {
		d.Spec.Strategy = *s.DeepCopy()
	}
	d.Spec.MinReadySeconds = ptr.Deref(app.Spec.MinReadySeconds, 0)
	d.Spec.ProgressDeadlineSeconds = copyInt32(app.Spec.ProgressDeadlineSeconds)
	d.Spec.RevisionHistoryLimit = copyInt32(app.Spec.RevisionHistoryLimit)
	return d, nil
}

// podTemplate renders the pod template: spec.template.spec as it is, or
// the first version's one container "app" when it has none, with
// spec.image and the cluster's overrides on the main container.
func podTemplate(app *flotillav1.MyApp, ov ClusterOverrides) (corev1.PodTemplateSpec, error) {
	var pod corev1.PodTemplateSpec
	t := app.Spec.Template
	if t == nil {
		t = &flotillav1.PodTemplate{}
	}
	tp := field.NewPath("spec", "template")
	if len(t.Labels) > 0 {
		pod.Labels = maps.Clone(t.Labels)
	}
	if len(t.Annotations) > 0 {
		pod.Annotations = maps.Clone(t.Annotations)
	}
	if m := t.Metadata; m != nil {
		if len(m.Labels) > 0 && pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		maps.Copy(pod.Labels, m.Labels)
		if len(m.Annotations) > 0 && pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		maps.Copy(pod.Annotations, m.Annotations)
	}
	main, err := flotillav1.MainContainerIndex(&app.Spec)
	if err != nil {
		return pod, err
	}
	if t.Spec == nil {
		// A deep copy: the rendering shares nothing with the MyApp.
		legacy := t.DeepCopy()
		pod.Spec.Containers = []corev1.Container{{
			Name:      ContainerName,
			Command:   legacy.Command,
			Args:      legacy.Args,
			Ports:     legacy.Ports,
			Env:       legacy.Env,
			Resources: legacy.Resources,
		}}
	} else {
		// In field order, so the error names the same field every time.
		for _, f := range []struct {
			name string
			set  bool
		}{{"command", len(t.Command) > 0}, {"args", len(t.Args) > 0}, {"ports", len(t.Ports) > 0}, {"env", len(t.Env) > 0},
			{"resources", len(t.Resources.Requests) > 0 || len(t.Resources.Limits) > 0 || len(t.Resources.Claims) > 0}} {
			if f.set {
				return pod, field.Forbidden(tp.Child(f.name), "describes the one container of a template without spec; with spec.template.spec, set it on the container")
			}
		}
		pod.Spec = *t.Spec.DeepCopy()
		if img := pod.Spec.Containers[main].Image; img != "" {
			return pod, field.Invalid(tp.Child("spec", "containers").Index(main).Child("image"), img,
				"must be empty: spec.image is the main container's image (overrides and rollouts change it there)")
		}
	}
	c := &pod.Spec.Containers[main]
	c.Image = OverrideImage(app.Spec.Image, ov.image)
	c.Env = mergeEnv(c.Env, ov.env)
	if ov.resources != nil {
		c.Resources = placement.MergeResources(c.Resources, ov.resources)
	}
	if len(ov.nodeSelector) > 0 {
		if pod.Spec.NodeSelector == nil {
			pod.Spec.NodeSelector = map[string]string{}
		}
		maps.Copy(pod.Spec.NodeSelector, ov.nodeSelector)
	}
	for _, tol := range ov.tolerations {
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(have corev1.Toleration) bool { return equality.Semantic.DeepEqual(have, tol) }) {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, *tol.DeepCopy())
		}
	}
	return pod, nil
}

// Service renders the app's Service (nil without spec.service): the
// Deployment's name, namespace and labels, selecting its pods. A port
// without a targetPort targets its own number; the member allocates the
// cluster IP and node ports.
func Service(app *flotillav1.MyApp) *corev1.Service {
	s := app.Spec.Service
	if s == nil {
		return nil
	}
	sel := SelectorLabels(app)
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(app),
		Spec: corev1.ServiceSpec{
			Type:     s.Type,
			Selector: sel,
		},
	}
	if svc.Spec.Type == "" {
		svc.Spec.Type = flotillav1.DefaultServiceType
	}
	if len(s.Annotations) > 0 {
		svc.Annotations = maps.Clone(s.Annotations)
	}
	for _, p := range s.Ports {
		port := corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, TargetPort: intstr.FromInt32(p.Port)}
		if port.Protocol == "" {
			port.Protocol = flotillav1.DefaultServiceProtocol
		}
		if p.TargetPort != nil {
			port.TargetPort = *p.TargetPort
		}
		svc.Spec.Ports = append(svc.Spec.Ports, port)
	}
	return svc
}

func copyInt32(p *int32) *int32 {
	if p == nil {
		return nil
	}
	return ptr.To(*p)
}

// Replicas is the replica count the Work rendered for cluster mc would ask
// for when the scheduler gave it scheduled: an override's replicas win. It
// costs no rendering.
func Replicas(app *flotillav1.MyApp, mc *flotillav1.MemberCluster, scheduled int32) (int32, error) {
	ov, err := OverridesFor(app, mc)
	if err != nil {
		return 0, err
	}
	return deploymentReplicas(scheduled, ov), nil
}

// deploymentReplicas is the replica count a rendered Work asks for.
func deploymentReplicas(scheduled int32, ov ClusterOverrides) int32 {
	if ov.replicas != nil {
		return *ov.replicas
	}
	return scheduled
}

// manifestJSON encodes obj without the fields a client never sets (status,
// creationTimestamp), so what the hub stores compares equal to what it
// renders next time.
func manifestJSON(obj runtime.Object) ([]byte, error) {
	u, err := ssa.Unstructured(obj)
	if err != nil {
		return nil, err
	}
	return json.Marshal(u.Object)
}

// Work renders the Work that tells cluster to run replicas of app.
// podSecurity is the Pod Security level the agent enforces on a member
// namespace it creates for the Work (nspolicy.PodSecurity of the
// FleetNamespacePolicies that match app's namespace; empty: the agent's
// default).
//
// deps gives the ConfigMaps, Secrets and ServiceAccount of app's namespace
// that the rendered pods use; the Work carries a copy of each, ahead of the
// Deployment, marked as a shared dependency, and, with
// spec.rolloutOnConfigChange, the pod template carries the hash of their
// content. A nil deps renders no dependencies.
func Work(app *flotillav1.MyApp, cluster string, mc *flotillav1.MemberCluster, replicas int32, podSecurity flotillav1.PodSecurityLevel, deps DependencySource) (*flotillav1.Work, int32, error) {
	ov, err := OverridesFor(app, mc)
	if err != nil {
		return nil, 0, err
	}
	d, err := Deployment(app, replicas, ov)
	if err != nil {
		return nil, 0, err
	}
	for _, op := range ov.patches {
		if d, err = Patch(d, op.patches); err != nil {
			return nil, 0, fmt.Errorf("spec.overrides[%d] (%s) for %s: %w", op.index, op.name, cluster, err)
		}
	}
	depObjs, hash, err := dependencies(app, d, deps)
	if err != nil {
		return nil, 0, err
	}
	if hash != "" && app.Spec.RollsOnConfigChange() {
		if d.Spec.Template.Annotations == nil {
			d.Spec.Template.Annotations = map[string]string{}
		}
		d.Spec.Template.Annotations[flotillav1.AnnotationConfigHash] = hash
	}
	manifests := make([]flotillav1.Manifest, 0, len(depObjs)+2)
	for _, o := range depObjs {
		raw, err := manifestJSON(o)
		if err != nil {
			return nil, 0, fmt.Errorf("encoding %s %s for %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), cluster, err)
		}
		manifests = append(manifests, flotillav1.Manifest{RawExtension: runtime.RawExtension{Raw: raw}})
	}
	raw, err := manifestJSON(d)
	if err != nil {
		return nil, 0, fmt.Errorf("encoding the Deployment for %s: %w", cluster, err)
	}
	manifests = append(manifests, flotillav1.Manifest{RawExtension: runtime.RawExtension{Raw: raw}})
	if svc := Service(app); svc != nil {
		raw, err := manifestJSON(svc)
		if err != nil {
			return nil, 0, fmt.Errorf("encoding the Service for %s: %w", cluster, err)
		}
		manifests = append(manifests, flotillav1.Manifest{RawExtension: runtime.RawExtension{Raw: raw}})
	}
	w := &flotillav1.Work{
		TypeMeta: metav1.TypeMeta{APIVersion: flotillav1.GroupVersion.String(), Kind: "Work"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      flotillav1.WorkName(app.Namespace, app.Name),
			Namespace: flotillav1.ClusterNamespace(cluster),
			// The Work's deletion completes once its member confirms.
			Finalizers: []string{flotillav1.WorkFinalizer},
			Labels: map[string]string{
				flotillav1.LabelMyAppNamespace: app.Namespace,
				flotillav1.LabelMyAppName:      app.Name,
				flotillav1.LabelCluster:        cluster,
			},
		},
		Spec: flotillav1.WorkSpec{
			Manifests:      manifests,
			DeletionPolicy: DeletionPolicy(app, mc),
			PodSecurity:    podSecurity,
			Health:         WorkHealth(app, cluster),
		},
	}
	return w, deploymentReplicas(replicas, ov), nil
}

// DeletionPolicy is the deletion policy of app's Work in cluster mc (nil
// when unknown): Orphan when the MyApp says so, or when mc is being deleted
// and its own policy (Orphan by default) says so; Delete otherwise.
func DeletionPolicy(app *flotillav1.MyApp, mc *flotillav1.MemberCluster) flotillav1.DeletionPolicy {
	if app.Spec.DeletionPolicy == flotillav1.DeletionPolicyOrphan {
		return flotillav1.DeletionPolicyOrphan
	}
	if mc != nil && !mc.DeletionTimestamp.IsZero() && mc.Spec.DeletionPolicy != flotillav1.DeletionPolicyDelete {
		return flotillav1.DeletionPolicyOrphan
	}
	return flotillav1.DeletionPolicyDelete
}

// PolicyOf is w's deletion policy, Delete when unset.
func PolicyOf(w *flotillav1.Work) flotillav1.DeletionPolicy {
	if w.Spec.DeletionPolicy == "" {
		return flotillav1.DeletionPolicyDelete
	}
	return w.Spec.DeletionPolicy
}

// SameManifests says whether two Works ask for the same objects, comparing
// decoded JSON so key order and the apiserver's re-encoding do not count.
func SameManifests(a, b []flotillav1.Manifest) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		var x, y any
		if json.Unmarshal(a[i].Raw, &x) != nil || json.Unmarshal(b[i].Raw, &y) != nil {
			return false
		}
		if !jsonEqual(x, y) {
			return false
		}
	}
	return true
}

func jsonEqual(x, y any) bool {
	xb, err1 := json.Marshal(x)
	yb, err2 := json.Marshal(y)
	// encoding/json sorts map keys, so equal values encode equally.
	return err1 == nil && err2 == nil && string(xb) == string(yb)
}

// DefaultMaxWorkBytes is the largest a Work's manifests may be by default:
// 1 MiB, well inside the 1.5 MiB an etcd stores in one object by default.
const DefaultMaxWorkBytes = 1 << 20

// WorkTooLargeError says a rendered Work is over the hub's limit.
type WorkTooLargeError struct {
	App     string // namespace/name of the MyApp
	Cluster string
	Bytes   int
	Limit   int
}

func (e *WorkTooLargeError) Error() string {
	return fmt.Sprintf("the Work of MyApp %s for cluster %s is %d bytes, over the hub's limit of %d (--max-work-bytes): make the pod template, or what travels with it, smaller",
		e.App, e.Cluster, e.Bytes, e.Limit)
}

// WorkBytes is the size of w's manifests as the hub stores and sends them.
func WorkBytes(w *flotillav1.Work) int {
	n := 0
	for i := range w.Spec.Manifests {
		n += len(w.Spec.Manifests[i].Raw)
	}
	return n
}

// CheckWorkSize returns a *WorkTooLargeError when w, rendered for app, is
// over limit (DefaultMaxWorkBytes when limit is 0 or less).
func CheckWorkSize(app *flotillav1.MyApp, w *flotillav1.Work, limit int) error {
	if limit <= 0 {
		limit = DefaultMaxWorkBytes
	}
	if n := WorkBytes(w); n > limit {
		return &WorkTooLargeError{App: app.Namespace + "/" + app.Name, Cluster: w.Labels[flotillav1.LabelCluster], Bytes: n, Limit: limit}
	}
	return nil
}
