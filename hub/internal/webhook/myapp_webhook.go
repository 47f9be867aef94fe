package webhook

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/render"
	"github.com/flotilla-dev/flotilla/pkg/nspolicy"
)

// Paths the webhooks are served on (controller-runtime's convention).
const (
	MutatePath   = "/mutate-flotilla-dev-v1alpha1-myapp"
	ValidatePath = "/validate-flotilla-dev-v1alpha1-myapp"
)

// MyAppWebhook defaults and validates MyApps.
type MyAppWebhook struct {
	// Reader lists MemberClusters to warn about weights for clusters that
	// do not exist yet (nil: no such warnings).
	Reader client.Reader
	// Policies lists the FleetNamespacePolicies that decide which member
	// namespaces a MyApp may place into (the manager's cache). nil means
	// no policy: every MyApp places only into its own namespace, so a
	// missing reader fails closed.
	Policies client.Reader
	// Authorizer creates the SubjectAccessReviews that check the user may
	// read each ConfigMap, Secret and ServiceAccount a MyApp newly names
	// (nil: no such check).
	Authorizer client.Client
}

// +kubebuilder:rbac:groups=flotilla.dev,resources=fleetnamespacepolicies,verbs=get;list;watch

var (
	_ admission.Defaulter[*flotillav1.MyApp] = &MyAppWebhook{}
	_ admission.Validator[*flotillav1.MyApp] = &MyAppWebhook{}
)

// SetupWithManager registers both webhooks on the manager's webhook server.
func (w *MyAppWebhook) SetupWithManager(mgr manager.Manager) error {
	return builder.WebhookManagedBy(mgr, &flotillav1.MyApp{}).
		WithDefaulter(w).
		WithValidator(w).
		Complete()
}

// Default fills in the policy in force where the user left it out, with the
// defaults of api/v1alpha1/defaults.go that the CRD, the scheduler and the
// controllers also use.
func (w *MyAppWebhook) Default(_ context.Context, app *flotillav1.MyApp) error {
	if app.Spec.Replicas == nil {
		app.Spec.Replicas = ptr.To(flotillav1.DefaultReplicas)
	}
	p := &app.Spec.Placement
	if p.ReplicaScheduling == nil {
		p.ReplicaScheduling = &flotillav1.ReplicaSchedulingStrategy{}
	}
	rs := p.ReplicaScheduling
	if rs.ReplicaSchedulingType == "" {
		rs.ReplicaSchedulingType = flotillav1.DefaultReplicaSchedulingType
	}
	if rs.ReplicaSchedulingType == flotillav1.ReplicaSchedulingDivided && rs.ReplicaDivisionPreference == "" {
		rs.ReplicaDivisionPreference = flotillav1.DefaultReplicaDivisionPreference
	}
	if app.Spec.Failover == nil {
		app.Spec.Failover = &flotillav1.FailoverPolicy{}
	}
	f := app.Spec.Failover
	if f.ClusterUnreachable == nil {
		f.ClusterUnreachable = &flotillav1.ClusterFailover{}
	}
	cu := f.ClusterUnreachable
	if cu.TolerationSeconds == nil {
		cu.TolerationSeconds = ptr.To(flotillav1.DefaultUnreachableTolerationSeconds)
	}
	if cu.PurgeMode == "" {
		cu.PurgeMode = flotillav1.DefaultPurgeMode
	}
	if cu.GracePeriodSeconds == nil {
		cu.GracePeriodSeconds = ptr.To(flotillav1.DefaultGracePeriodSeconds)
	}
	if f.Failback == nil {
		f.Failback = &flotillav1.FailbackPolicy{}
	}
	if f.Failback.Enabled == nil {
		f.Failback.Enabled = ptr.To(flotillav1.DefaultFailbackEnabled)
	}
	if f.Failback.StabilizationWindowSeconds == nil {
		f.Failback.StabilizationWindowSeconds = ptr.To(flotillav1.DefaultFailbackWindowSeconds)
	}
	if app.Spec.Rollout == nil {
		app.Spec.Rollout = &flotillav1.RolloutPolicy{}
	}
	if app.Spec.Rollout.Strategy == "" {
		app.Spec.Rollout.Strategy = flotillav1.DefaultRolloutStrategy
	}
	return nil
}

// ValidateCreate implements admission.Validator.
func (w *MyAppWebhook) ValidateCreate(ctx context.Context, app *flotillav1.MyApp) (admission.Warnings, error) {
	return w.validate(ctx, nil, app, true)
}

// ValidateUpdate implements admission.Validator. The new object is
// validated in full, the namespace policy included, when its spec
// changes: a tenant whose grant was withdrawn cannot keep changing an app
// that places into the withdrawn namespace, only move it to an allowed
// one or delete it. An update that leaves the spec alone (labels,
// annotations, finalizers: what controllers write) and every update of a
// MyApp being deleted skip the namespace policy, so that a withdrawn grant
// never blocks the hub's finalizer handling or the MyApp's deletion.
// Status updates go to the status subresource, which the webhook
// configuration does not intercept.
func (w *MyAppWebhook) ValidateUpdate(ctx context.Context, old, app *flotillav1.MyApp) (admission.Warnings, error) {
	checkNamespace := app.DeletionTimestamp.IsZero() && !equality.Semantic.DeepEqual(old.Spec, app.Spec)
	return w.validate(ctx, old, app, checkNamespace)
}

// ValidateDelete implements admission.Validator; deletion is always allowed.
func (w *MyAppWebhook) ValidateDelete(context.Context, *flotillav1.MyApp) (admission.Warnings, error) {
	return nil, nil
}

func (w *MyAppWebhook) validate(ctx context.Context, old, app *flotillav1.MyApp, checkNamespace bool) (admission.Warnings, error) {
	errs, warnings := ValidateMyApp(app)
	if w.Reader != nil {
		warnings = append(warnings, w.unknownClusterWarnings(ctx, app)...)
	}
	if checkNamespace {
		nerrs, err := w.validateTargetNamespace(ctx, app)
		if err != nil {
			return warnings, err
		}
		errs = append(errs, nerrs...)
		aerrs, err := w.validateDependencyAccess(ctx, old, app)
		if err != nil {
			return warnings, err
		}
		errs = append(errs, aerrs...)
	}
	if len(errs) > 0 {
		return warnings, apierrors.NewInvalid(flotillav1.GroupVersion.WithKind("MyApp").GroupKind(), app.Name, errs)
	}
	return warnings, nil
}

// validateTargetNamespace refuses a MyApp whose effective target
// namespace the FleetNamespacePolicies do not allow (pkg/nspolicy). A
// failure to list the policies is returned as an error, which refuses the
// request: admission fails closed.
func (w *MyAppWebhook) validateTargetNamespace(ctx context.Context, app *flotillav1.MyApp) (field.ErrorList, error) {
	var policies flotillav1.FleetNamespacePolicyList
	if w.Policies != nil {
		if err := w.Policies.List(ctx, &policies); err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("listing FleetNamespacePolicies to check spec.targetNamespace: %w", err))
		}
	}
	return ValidateTargetNamespace(app, policies.Items), nil
}

// ValidateTargetNamespace returns a field error on spec.targetNamespace
// when policies do not allow app's effective target namespace (its own
// namespace when the field is empty, which is always allowed).
func ValidateTargetNamespace(app *flotillav1.MyApp, policies []flotillav1.FleetNamespacePolicy) field.ErrorList {
	d := nspolicy.Decide(app.Namespace, render.TargetNamespace(app), policies)
	if d.Allowed {
		return nil
	}
	return field.ErrorList{field.Invalid(field.NewPath("spec", "targetNamespace"), d.TargetNamespace, d.Detail())}
}

// imageRef is the container image reference grammar:
// [host[:port]/]path[:tag][@digest], path components lowercase.
var imageRef = regexp.MustCompile(`^` +
	`(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?/)?` +
	`[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*)*` +
	`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?` +
	`(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$`)

// ValidImage says whether s is a valid image reference.
func ValidImage(s string) bool { return len(s) <= 512 && imageRef.MatchString(s) }

// ValidateMyApp checks what the CRD schema cannot. It returns errors naming
// the field, and warnings for what is allowed but probably not meant.
func ValidateMyApp(app *flotillav1.MyApp) (field.ErrorList, []string) {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	if !ValidImage(app.Spec.Image) {
		errs = append(errs, field.Invalid(spec.Child("image"), app.Spec.Image,
			"must be an image reference [registry[:port]/]repository[:tag][@digest] with a lowercase repository"))
	}
	if t := app.Spec.Template; t != nil {
		errs = append(errs, validateResources(&t.Resources, spec.Child("template", "resources"))...)
		if t.Spec != nil {
			cp := spec.Child("template", "spec", "containers")
			for i := range t.Spec.Containers {
				errs = append(errs, validateResources(&t.Spec.Containers[i].Resources, cp.Index(i).Child("resources"))...)
			}
			ip := spec.Child("template", "spec", "initContainers")
			for i := range t.Spec.InitContainers {
				errs = append(errs, validateResources(&t.Spec.InitContainers[i].Resources, ip.Index(i).Child("resources"))...)
			}
		}
	}
	// What the hub renders for a cluster no override selects: a template
	// it cannot render (no main container, an image of its own on it)
	// is refused here, naming the field, not in every member.
	base, err := render.Deployment(app, ptr.Deref(app.Spec.Replicas, 1), render.ClusterOverrides{})
	if err != nil {
		var fe *field.Error
		if errors.As(err, &fe) {
			errs = append(errs, fe)
		} else {
			errs = append(errs, field.Invalid(spec.Child("template"), "", err.Error()))
		}
	}
	if s := app.Spec.Service; s != nil {
		errs = append(errs, validateServicePorts(s.Ports, spec.Child("service", "ports"))...)
	}
	errs = append(errs, validatePlacement(&app.Spec.Placement, spec.Child("placement"))...)
	errs = append(errs, validateHealthShift(app.Spec.Placement.HealthShift, spec.Child("placement", "healthShift"))...)
	errs = append(errs, validateTraffic(app.Spec.Traffic, spec.Child("traffic"))...)
	oerrs, warnings := validateOverrides(app, base, spec.Child("overrides"))
	return append(errs, oerrs...), warnings
}

// validateServicePorts checks what a member's apiserver would refuse in
// the Service's ports: with more than one port, each needs a name, and
// names are unique.
func validateServicePorts(ports []flotillav1.ServicePort, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for i, p := range ports {
		switch {
		case p.Name == "" && len(ports) > 1:
			errs = append(errs, field.Required(path.Index(i).Child("name"), "a Service of more than one port needs a name for each"))
		case p.Name != "" && seen[p.Name]:
			errs = append(errs, field.Duplicate(path.Index(i).Child("name"), p.Name))
		}
		seen[p.Name] = true
	}
	return errs
}

// validateResources checks that no request is above its limit, as a
// member's apiserver would.
func validateResources(r *corev1.ResourceRequirements, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name, req := range r.Requests {
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(path.Child("requests").Key(string(name)), req.String(),
				fmt.Sprintf("must be less than or equal to the %s limit %s", name, lim.String())))
		}
	}
	return errs
}

// validatePlacement checks label selectors, tolerations, and that weights
// and spread constraints can be met by the clusters the affinity names.
func validatePlacement(p *flotillav1.Placement, pp *field.Path) field.ErrorList {
	errs := validateAffinity(p.ClusterAffinity, pp.Child("clusterAffinity"))
	for i := range p.ClusterAffinities {
		errs = append(errs, validateAffinity(&p.ClusterAffinities[i].ClusterAffinity, pp.Child("clusterAffinities").Index(i))...)
	}
	for i := range p.ClusterTolerations {
		errs = append(errs, validateToleration(&p.ClusterTolerations[i], pp.Child("clusterTolerations").Index(i))...)
	}

	// Which clusters can ever be selected, when the affinity names them.
	allowed, excluded := namedClusters(p.ClusterAffinity)
	if rs := p.ReplicaScheduling; rs != nil && rs.WeightPreference != nil {
		for i, sw := range rs.WeightPreference.StaticWeightList {
			wp := pp.Child("replicaScheduling", "weightPreference", "staticWeightList").Index(i)
			errs = append(errs, validateAffinity(&sw.TargetCluster, wp.Child("targetCluster"))...)
			for j, n := range sw.TargetCluster.ClusterNames {
				if excluded[n] || (allowed != nil && !allowed[n]) {
					errs = append(errs, field.Invalid(wp.Child("targetCluster", "clusterNames").Index(j), n,
						"names a cluster that spec.placement.clusterAffinity never selects, so the weight could never apply"))
				}
			}
		}
	}
	if allowed != nil {
		for i, sc := range p.SpreadConstraints {
			if sc.SpreadByField == flotillav1.SpreadByFieldCluster && sc.MinGroups != nil && int(*sc.MinGroups) > len(allowed) {
				errs = append(errs, field.Invalid(pp.Child("spreadConstraints").Index(i).Child("minGroups"), *sc.MinGroups,
					fmt.Sprintf("exceeds the %d clusters spec.placement.clusterAffinity.clusterNames allows", len(allowed))))
			}
		}
	}
	return errs
}

// validateOverrides checks each override's selector and image, and warns
// when replica overrides make the total differ from spec.replicas.
func validateOverrides(app *flotillav1.MyApp, base *appsv1.Deployment, path *field.Path) (field.ErrorList, []string) {
	var errs field.ErrorList
	var warnings []string
	rs := app.Spec.Placement.ReplicaScheduling
	divided := rs != nil && rs.ReplicaSchedulingType == flotillav1.ReplicaSchedulingDivided
	for i, o := range app.Spec.Overrides {
		op := path.Index(i)
		errs = append(errs, validateAffinity(&o.TargetCluster, op.Child("targetCluster"))...)
		if o.Image != nil && o.Image.Registry != "" && !strings.ContainsAny(o.Image.Registry, ".:") && o.Image.Registry != "localhost" {
			// Runtimes read a first path part without a dot or a port as a
			// Docker Hub namespace: "mirror/team/web" is pulled from
			// docker.io/mirror/team/web, not from a host called mirror.
			errs = append(errs, field.Invalid(op.Child("image", "registry"), o.Image.Registry,
				"must be a registry host with a dot or a port (e.g. mirror.example.com or mirror:5000), or localhost; without one, runtimes pull from Docker Hub"))
		}
		if o.Image != nil {
			img := render.OverrideImage(app.Spec.Image, o.Image)
			if ValidImage(app.Spec.Image) && !ValidImage(img) {
				errs = append(errs, field.Invalid(op.Child("image"), img, "the overridden image is not a valid image reference"))
			}
		}
		errs = append(errs, validateNodeSelector(o.NodeSelector, op.Child("nodeSelector"))...)
		if o.Resources != nil {
			errs = append(errs, validateResources(o.Resources, op.Child("resources"))...)
		}
		errs = append(errs, validatePatches(base, o.Patches, op.Child("patches"))...)
		for j := range o.Tolerations {
			errs = append(errs, validateToleration(&o.Tolerations[j], op.Child("tolerations").Index(j))...)
		}
		if o.Replicas != nil && divided {
			warnings = append(warnings, fmt.Sprintf("spec.overrides[%d].replicas replaces the scheduler's share in the clusters it selects, so the total may differ from spec.replicas", i))
		}
	}
	return errs, warnings
}

// validatePatches checks an override's JSON patches against the app's
// rendered Deployment: each path is allowed, and the patches, in order,
// apply to that rendering on their own and leave a Deployment that still
// selects its pods. (Another override's patches or typed fields that also
// select a cluster are not taken into account: keep patches to one
// override where they build on each other.)
// base is that rendering, nil when the app cannot be rendered (ValidateMyApp
// reports why).
func validatePatches(base *appsv1.Deployment, patches []flotillav1.JSONPatch, path *field.Path) field.ErrorList {
	if len(patches) == 0 {
		return nil
	}
	var errs field.ErrorList
	for j, p := range patches {
		if err := render.CheckPatchPath(p.Path); err != nil {
			errs = append(errs, field.Invalid(path.Index(j).Child("path"), p.Path, err.Error()))
		}
	}
	if len(errs) > 0 {
		return errs
	}
	if base == nil {
		return nil
	}
	if _, err := render.Patch(base, patches); err != nil {
		var pe *render.PatchError
		if errors.As(err, &pe) {
			value := patches[pe.Index].Path
			if pe.Field == "value" && patches[pe.Index].Value != nil {
				value = string(patches[pe.Index].Value.Raw)
			}
			return field.ErrorList{field.Invalid(path.Index(pe.Index).Child(pe.Field), value, pe.Err.Error()+" (checked against the app's rendered Deployment)")}
		}
		return field.ErrorList{field.Invalid(path, len(patches), err.Error())}
	}
	return nil
}

// validateNodeSelector checks what a member's apiserver would refuse in a
// pod's node selector, so the refusal comes at admission and names the
// override, not as an apply error in every selected member.
func validateNodeSelector(sel map[string]string, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for k, v := range sel {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(path.Key(k), k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(path.Key(k), v, msg))
		}
	}
	return errs
}

// validateToleration checks a toleration as a pod's apiserver would:
// Exists takes no value, an empty key needs Exists, tolerationSeconds
// only with NoExecute, and the operator and effect are known ones. The
// placement's cluster tolerations (of MemberCluster taints) and the
// overrides' pod tolerations follow the same rules.
func validateToleration(t *corev1.Toleration, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.Key != "" {
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(path.Child("key"), t.Key, msg))
		}
	}
	switch t.Operator {
	case corev1.TolerationOpEqual, "":
		if t.Key == "" {
			errs = append(errs, field.Invalid(path.Child("operator"), t.Operator, "must be Exists when key is empty"))
		}
		for _, msg := range validation.IsValidLabelValue(t.Value) {
			errs = append(errs, field.Invalid(path.Child("value"), t.Value, msg))
		}
	case corev1.TolerationOpExists:
		if t.Value != "" {
			errs = append(errs, field.Invalid(path.Child("value"), t.Value, "must be empty when operator is Exists"))
		}
	default:
		errs = append(errs, field.Invalid(path.Child("operator"), t.Operator, "must be Equal or Exists"))
	}
	switch t.Effect {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		errs = append(errs, field.Invalid(path.Child("effect"), t.Effect, "must be NoSchedule, PreferNoSchedule or NoExecute (or empty: all three)"))
	}
	if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
		errs = append(errs, field.Invalid(path.Child("tolerationSeconds"), *t.TolerationSeconds, "is only valid with effect NoExecute"))
	}
	return errs
}

// validateAffinity checks the label selector of an affinity.
func validateAffinity(a *flotillav1.ClusterAffinity, path *field.Path) field.ErrorList {
	if a == nil || a.LabelSelector == nil {
		return nil
	}
	if _, err := metav1.LabelSelectorAsSelector(a.LabelSelector); err != nil {
		return field.ErrorList{field.Invalid(path.Child("labelSelector"), a.LabelSelector.String(), err.Error())}
	}
	return nil
}

// namedClusters returns, when the affinity lists clusterNames, the set it
// allows (nil otherwise), and the excluded set.
func namedClusters(a *flotillav1.ClusterAffinity) (allowed, excluded map[string]bool) {
	excluded = map[string]bool{}
	if a == nil {
		return nil, excluded
	}
	for _, n := range a.ExcludeClusters {
		excluded[n] = true
	}
	if len(a.ClusterNames) == 0 {
		return nil, excluded
	}
	allowed = map[string]bool{}
	for _, n := range a.ClusterNames {
		if !excluded[n] {
			allowed[n] = true
		}
	}
	return allowed, excluded
}

// unknownClusterWarnings warns about cluster names that no MemberCluster
// has yet: allowed, since clusters may join later, but often a typo.
func (w *MyAppWebhook) unknownClusterWarnings(ctx context.Context, app *flotillav1.MyApp) []string {
	var list flotillav1.MemberClusterList
	if err := w.Reader.List(ctx, &list); err != nil {
		return nil
	}
	known := map[string]bool{}
	for _, mc := range list.Items {
		known[mc.Name] = true
	}
	var out []string
	check := func(path string, names []string) {
		for i, n := range names {
			if !known[n] {
				out = append(out, fmt.Sprintf("%s[%d]: no MemberCluster %q exists (yet)", path, i, n))
			}
		}
	}
	if a := app.Spec.Placement.ClusterAffinity; a != nil {
		check("spec.placement.clusterAffinity.clusterNames", a.ClusterNames)
	}
	if rs := app.Spec.Placement.ReplicaScheduling; rs != nil && rs.WeightPreference != nil {
		for i, sw := range rs.WeightPreference.StaticWeightList {
			check(fmt.Sprintf("spec.placement.replicaScheduling.weightPreference.staticWeightList[%d].targetCluster.clusterNames", i), sw.TargetCluster.ClusterNames)
		}
	}
	return out
}
