package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/ssa"
)

// DefaultFieldOwner is the server-side apply field manager used when
// Options.FieldOwner is empty: the agent's.
const DefaultFieldOwner = v1alpha1.FieldOwnerAgent

// DeploymentKind is the kind a Work carries today, and the default of
// Options.Kinds.
var DeploymentKind = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}

// ErrNotOwned is wrapped by Apply's error when an object of a manifest's
// name exists and Flotilla does not own it. Retrying does not help until
// someone deletes or hands over that object.
var ErrNotOwned = errors.New("object exists and Flotilla does not own it")

// Options configure an Applier. The zero value applies Deployments as
// DefaultFieldOwner and does not create namespaces.
type Options struct {
	// FieldOwner is the server-side apply field manager. Each kind of
	// writer (the agent, a hub in push mode) uses its own, so managedFields
	// say who wrote what. Because Apply forces ownership, two owners
	// applying the same Work would take fields from each other; a member's
	// sync mode makes one of them its only writer.
	FieldOwner string
	// CreateNamespace makes Apply create a manifest's namespace when it
	// does not exist. The namespace is created without Flotilla's labels
	// and is never deleted: other objects may live in it.
	CreateNamespace bool
	// Kinds are the kinds Apply accepts and Delete and Prune look for.
	// Apply refuses other kinds, because what it applied must be found
	// again to be pruned. Defaults to Deployments.
	Kinds []schema.GroupVersionKind
}

// Applier applies Works to one cluster. It is safe for concurrent use; two
// concurrent Applies of the same Work race like two kubectl applies would.
type Applier struct {
	reader client.Reader
	writer client.Client
	mapper meta.RESTMapper
	// confirmNotFound is set when reader is not the writer: a NotFound from
	// a cache is then checked live before anything is created.
	confirmNotFound bool
	owner           string
	createNamespace bool
	kinds           []schema.GroupVersionKind
	tracker         tracker
}

// New returns an Applier that reads through reader and writes through
// writer, whose RESTMapper maps kinds to resources. A nil reader means the
// writer reads too; a non-nil one costs a live read through the writer
// whenever it says an object does not exist (see getLive).
func New(reader client.Reader, writer client.Client, opts Options) *Applier {
	a := &Applier{
		reader:          reader,
		writer:          writer,
		mapper:          writer.RESTMapper(),
		confirmNotFound: reader != nil,
		owner:           opts.FieldOwner,
		createNamespace: opts.CreateNamespace,
		kinds:           slices.Clone(opts.Kinds),
		tracker:         tracker{works: map[string]appliedWork{}},
	}
	if a.reader == nil {
		a.reader = writer
	}
	if a.owner == "" {
		a.owner = DefaultFieldOwner
	}
	if len(a.kinds) == 0 {
		a.kinds = []schema.GroupVersionKind{DeploymentKind}
	}
	return a
}

// FieldOwner is the field manager the Applier applies as.
func (a *Applier) FieldOwner() string { return a.owner }

// Result is the outcome of applying one manifest.
type Result struct {
	// Identifier names the object. For a manifest that could not be
	// decoded it holds what could be read.
	Identifier v1alpha1.ResourceIdentifier
	// Reason is v1alpha1.ReasonApplied, ReasonNotOwned or ReasonApplyFailed.
	Reason string
	// Message says what happened, naming the object.
	Message string
	// Object is the object as the apiserver returned it from the apply;
	// nil unless Reason is ReasonApplied.
	Object *unstructured.Unstructured
}

// Applied says the manifest was applied.
func (r Result) Applied() bool { return r.Reason == v1alpha1.ReasonApplied }

// Apply applies every manifest of work, in order, and returns one Result per
// manifest in the same order. A manifest that fails does not stop the
// others. The error joins every manifest's failure; a manifest left alone
// because Flotilla does not own its object wraps ErrNotOwned.
//
// Only when every manifest applied does the Applier record the Work for
// NeedsApply; any failure makes NeedsApply report true until an Apply of
// the Work succeeds.
func (a *Applier) Apply(ctx context.Context, work *v1alpha1.Work) ([]Result, error) {
	results := make([]Result, 0, len(work.Spec.Manifests))
	var errs []error
	seen := map[v1alpha1.ResourceIdentifier]int{}
	for i := range work.Spec.Manifests {
		r, err := a.applyManifest(ctx, work, &work.Spec.Manifests[i], seen, i)
		results = append(results, r)
		if err != nil {
			errs = append(errs, fmt.Errorf("applying manifest %d (%s) of Work %s: %w", i, describe(r.Identifier), work.Name, err))
		}
	}
	if len(errs) > 0 {
		a.tracker.forget(work.Name)
		return results, errors.Join(errs...)
	}
	a.tracker.record(work, results)
	return results, nil
}

// applyManifest applies one manifest and says how it went; the error is
// non-nil exactly when the Result's reason is not ReasonApplied.
func (a *Applier) applyManifest(ctx context.Context, work *v1alpha1.Work, m *v1alpha1.Manifest, seen map[v1alpha1.ResourceIdentifier]int, index int) (Result, error) {
	desired, id, err := a.desired(work, m)
	if err != nil {
		return failed(id, v1alpha1.ReasonApplyFailed, err)
	}
	if first, dup := seen[id]; dup {
		return failed(id, v1alpha1.ReasonApplyFailed, fmt.Errorf("%s is also manifest %d of the Work; each object may appear once", describe(id), first))
	}
	seen[id] = index

	existing, err := a.getLive(ctx, desired.GroupVersionKind(), client.ObjectKeyFromObject(desired))
	if err != nil {
		return failed(id, v1alpha1.ReasonApplyFailed, fmt.Errorf("reading the existing object: %w", err))
	}
	if existing != nil && !claimable(existing, work.Name) {
		msg := notOwnedMessage(id, existing, work.Name)
		return Result{Identifier: id, Reason: v1alpha1.ReasonNotOwned, Message: msg}, fmt.Errorf("%s: %w", msg, ErrNotOwned)
	}

	applied, err := a.serverSideApply(ctx, desired)
	if err != nil {
		return failed(id, v1alpha1.ReasonApplyFailed, err)
	}
	log.FromContext(ctx).V(1).Info("applied", "work", work.Name, "object", describe(id),
		"generation", applied.GetGeneration(), "resourceVersion", applied.GetResourceVersion())
	return Result{Identifier: id, Reason: v1alpha1.ReasonApplied, Message: describe(id) + " applied", Object: applied}, nil
}

// failed is the Result and error of a manifest that could not be applied.
func failed(id v1alpha1.ResourceIdentifier, reason string, err error) (Result, error) {
	return Result{Identifier: id, Reason: reason, Message: describe(id) + ": " + err.Error()}, err
}

// desired decodes manifest m of work into the object to apply: namespace
// defaulted for namespaced kinds, server-set fields and status dropped (an
// apply configuration states intent only), Flotilla's label and annotation
// set.
func (a *Applier) desired(work *v1alpha1.Work, m *v1alpha1.Manifest) (*unstructured.Unstructured, v1alpha1.ResourceIdentifier, error) {
	obj, err := decode(m)
	if err != nil {
		return nil, v1alpha1.ResourceIdentifier{}, fmt.Errorf("decoding the manifest: %w", err)
	}
	gvk := obj.GroupVersionKind()
	id := v1alpha1.ResourceIdentifier{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
	if !slices.ContainsFunc(a.kinds, func(k schema.GroupVersionKind) bool { return k.GroupKind() == gvk.GroupKind() }) {
		return nil, id, fmt.Errorf("kind %s is not one this applier manages (%s), so it could not be pruned later", gvk.GroupKind(), kindList(a.kinds))
	}
	if obj.GetName() == "" {
		return nil, id, errors.New("the manifest has no metadata.name")
	}
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, id, fmt.Errorf("finding the resource for %s: %w", gvk, err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			// Like kubectl: a namespaced object without a namespace goes to
			// "default".
			obj.SetNamespace("default")
		}
	} else {
		obj.SetNamespace("")
	}
	id.Namespace = obj.GetNamespace()

	if obj, err = ssa.Unstructured(obj, ssa.ServerSetMetadata...); err != nil {
		return nil, id, err
	}

	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[v1alpha1.LabelWork] = v1alpha1.WorkLabelValue(work.Name)
	for _, k := range []string{v1alpha1.LabelMyAppName, v1alpha1.LabelMyAppNamespace} {
		if v, ok := work.Labels[k]; ok {
			labels[k] = v
		}
	}
	obj.SetLabels(labels)
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[v1alpha1.AnnotationWork] = work.Name
	obj.SetAnnotations(annotations)
	return obj, id, nil
}

// decode turns a manifest into an unstructured object; the hub sends raw
// JSON, and a Work built in Go may carry a typed Object instead.
func decode(m *v1alpha1.Manifest) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	switch {
	case len(m.Raw) > 0:
		if err := obj.UnmarshalJSON(m.Raw); err != nil {
			return nil, err
		}
	case m.Object != nil:
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m.Object)
		if err != nil {
			return nil, err
		}
		obj.Object = content
		if obj.GetKind() == "" {
			obj.SetGroupVersionKind(m.Object.GetObjectKind().GroupVersionKind())
		}
	default:
		return nil, errors.New("the manifest is empty")
	}
	if obj.GetKind() == "" || obj.GetAPIVersion() == "" {
		return nil, errors.New("the manifest has no apiVersion or kind")
	}
	return obj, nil
}

// getLive returns the object named key, or nil when it does not exist. A
// NotFound from a reader that is not the writer (a cache, perhaps one that
// holds only labelled objects) is confirmed through the writer, so that an
// unowned object the cache cannot see is not taken over.
func (a *Applier) getLive(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	err := a.reader.Get(ctx, key, obj)
	if err == nil {
		return obj, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	if !a.confirmNotFound {
		return nil, nil
	}
	obj = &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	if err := a.writer.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return obj, nil
}

// serverSideApply applies obj as the Applier's field owner, forcing
// ownership of conflicting fields: Flotilla is the source of truth for what
// it applies. When the object's namespace is missing and CreateNamespace is
// on, it creates the namespace and applies once more.
func (a *Applier) serverSideApply(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	out := obj.DeepCopy()
	err := a.writer.Apply(ctx, client.ApplyConfigurationFromUnstructured(out), client.FieldOwner(a.owner), client.ForceOwnership)
	if err == nil {
		return out, nil
	}
	ns := obj.GetNamespace()
	if !isNamespaceNotFound(err, ns) {
		return nil, fmt.Errorf("server-side applying: %w", err)
	}
	if !a.createNamespace {
		return nil, fmt.Errorf("namespace %s does not exist and namespace creation is off: %w", ns, err)
	}
	if err := a.ensureNamespace(ctx, ns); err != nil {
		return nil, err
	}
	out = obj.DeepCopy()
	if err := a.writer.Apply(ctx, client.ApplyConfigurationFromUnstructured(out), client.FieldOwner(a.owner), client.ForceOwnership); err != nil {
		return nil, fmt.Errorf("server-side applying after creating namespace %s: %w", ns, err)
	}
	return out, nil
}

// ensureNamespace creates namespace name; one that appeared meanwhile is
// fine.
func (a *Applier) ensureNamespace(ctx context.Context, name string) error {
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName(name)
	err := a.writer.Create(ctx, ns, client.FieldOwner(a.owner))
	switch {
	case err == nil:
		log.FromContext(ctx).Info("created namespace", "namespace", name)
		return nil
	case apierrors.IsAlreadyExists(err):
		return nil
	default:
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
}

// isNamespaceNotFound says err is the apiserver refusing an object because
// its namespace ns does not exist.
func isNamespaceNotFound(err error, ns string) bool {
	if ns == "" || !apierrors.IsNotFound(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Kind == "namespaces" && d.Name == ns
}

// describe names an object the way people read it: "Deployment shop/web".
func describe(id v1alpha1.ResourceIdentifier) string {
	kind := id.Kind
	if kind == "" {
		kind = "object"
	}
	switch {
	case id.Name == "":
		return kind
	case id.Namespace == "":
		return kind + " " + id.Name
	default:
		return kind + " " + id.Namespace + "/" + id.Name
	}
}

func kindList(kinds []schema.GroupVersionKind) string {
	s := ""
	for i, k := range kinds {
		if i > 0 {
			s += ", "
		}
		s += k.GroupKind().String()
	}
	return s
}
