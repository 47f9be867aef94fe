package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/ssa"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// DefaultFieldOwner is the server-side apply field manager used when
// Options.FieldOwner is empty: the agent's.
const DefaultFieldOwner = v1alpha1.FieldOwnerAgent

// DeploymentKind is the kind every Work carries, and the default of
// Options.Kinds.
var DeploymentKind = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}

// ServiceKind is the kind of a MyApp's Service.
var ServiceKind = schema.GroupVersionKind{Version: "v1", Kind: "Service"}

// The kinds of a MyApp's dependencies (shared between Works).
var (
	ConfigMapKind      = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	SecretKind         = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	ServiceAccountKind = schema.GroupVersionKind{Version: "v1", Kind: "ServiceAccount"}
)

// WorkKinds are the kinds the hub renders into Works: what the agent and
// the push engine apply, watch and prune.
var WorkKinds = []schema.GroupVersionKind{DeploymentKind, ServiceKind, ConfigMapKind, SecretKind, ServiceAccountKind}

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
	// does not exist. The namespace gets the labels
	// flotilla.dev/namespace-created, flotilla.dev/fleet and
	// flotilla.dev/cluster, and Pod Security Admission's enforce label at
	// the Work's spec.podSecurity (else DefaultPodSecurity) with
	// enforce-version "latest". It never carries the Work's label and is
	// never deleted: other objects may live in it. A namespace that exists
	// is left as it is.
	CreateNamespace bool
	// DefaultPodSecurity is the Pod Security level of a namespace created
	// for a Work whose spec.podSecurity is empty; empty means
	// DefaultPodSecurity (baseline).
	DefaultPodSecurity v1alpha1.PodSecurityLevel
	// Namespaces is where Apply may write; nil means
	// DefaultNamespacePolicy(). A Work that names any object the policy
	// refuses is not applied at all.
	Namespaces *NamespacePolicy
	// Kinds are the kinds Apply accepts. Apply refuses other kinds, so
	// that the Applier manages (and its RBAC names) a known set. Defaults
	// to Deployments.
	Kinds []schema.GroupVersionKind
	// RecordNamespace is the namespace in which the Applier keeps its
	// applied set: one ConfigMap per Work (see RecordName) listing the
	// objects it applied for the Work. It must exist. Empty keeps the
	// applied set in memory only, which a restart forgets (tests, and
	// callers that never delete).
	RecordNamespace string
	// Brake caps what one Prune deletes without confirmation; nil means
	// DefaultBrake.
	Brake *Brake
	// Fence is called right before each batch of deletions (a Prune, a
	// Delete, the objects an Apply dropped); when it returns an error
	// nothing is deleted and the error is returned. The agent passes a
	// check that it still holds its leader lease, so a paused old leader
	// cannot delete after a new one took over.
	Fence func(context.Context) error
}

// Applier applies Works to one cluster and records what it applied (its
// applied set), which is all that Delete and Prune ever delete. It is safe
// for concurrent use; Applies, Deletes and prunes of one Work run one at a
// time.
type Applier struct {
	reader kclient.Reader
	writer kclient.Client
	// confirmNotFound is set when reader is not the writer: a NotFound from
	// a cache is then checked live before anything is created.
	confirmNotFound bool
	owner           string
	createNamespace bool
	podSecurity     v1alpha1.PodSecurityLevel
	namespaces      NamespacePolicy
	kinds           []schema.GroupVersionKind
	tracker         tracker

	recordNamespace string
	brake           Brake
	fence           func(context.Context) error
	// set is the applied set, loaded from recordNamespace on first use
	// (loadMu serialises loads).
	set    appliedSet
	loadMu sync.Mutex
	// locks serialises the Applies, Deletes and prunes of one Work, each
	// a read-modify-write of the Work's record.
	locks keyedMutex

	// sharedMu orders Applies of shared dependencies (read side) before or
	// after the deletion of one (write side): see Apply and deleteObject.
	sharedMu sync.RWMutex

	identityMu sync.RWMutex
	fleet      string
	cluster    string
}

// New returns an Applier that reads through reader and writes through
// writer, which also maps kinds to resources. A nil reader means the
// writer reads too; a non-nil one costs a live read through the writer
// whenever it says an object does not exist (see getLive). Objects are
// read and written unstructured, but for two lists read typed, so both
// must know their types: core/v1 PodList (the writer: the pods of an
// unavailable Deployment) and discovery/v1 EndpointSliceList (the reader:
// a Service's endpoints).
func New(reader kclient.Reader, writer kclient.Client, opts Options) *Applier {
	a := &Applier{
		reader:          reader,
		writer:          writer,
		confirmNotFound: reader != nil,
		owner:           opts.FieldOwner,
		createNamespace: opts.CreateNamespace,
		podSecurity:     opts.DefaultPodSecurity,
		namespaces:      DefaultNamespacePolicy(),
		kinds:           slices.Clone(opts.Kinds),
		tracker:         tracker{works: map[string]appliedWork{}},
		recordNamespace: opts.RecordNamespace,
		brake:           DefaultBrake,
		fence:           opts.Fence,
		set:             appliedSet{records: map[string]*record{}},
	}
	if opts.Brake != nil {
		a.brake = *opts.Brake
	}
	if opts.Namespaces != nil {
		a.namespaces = NamespacePolicy{
			Denied:        slices.Clone(opts.Namespaces.Denied),
			Allowed:       slices.Clone(opts.Namespaces.Allowed),
			ClusterScoped: opts.Namespaces.ClusterScoped,
		}
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

// SetIdentity sets the fleet the Applier works for (the hub's fleet id) and
// the name of the cluster it applies to. Every object Apply writes, and
// every record, carries them as the labels flotilla.dev/fleet and
// flotilla.dev/cluster; Delete and Prune delete only objects that carry
// them with these values, and refuse to delete anything (ErrNoIdentity)
// while no fleet id is set. The agent sets them from the hub's hello.
func (a *Applier) SetIdentity(fleetID, cluster string) {
	a.identityMu.Lock()
	defer a.identityMu.Unlock()
	a.fleet, a.cluster = fleetID, cluster
}

// Identity returns the fleet id and cluster name set by SetIdentity.
func (a *Applier) Identity() (fleetID, cluster string) {
	a.identityMu.RLock()
	defer a.identityMu.RUnlock()
	return a.fleet, a.cluster
}

// Result is the outcome of applying one manifest.
type Result struct {
	// Identifier names the object. For a manifest that could not be
	// decoded it holds what could be read.
	Identifier v1alpha1.ResourceIdentifier
	// Reason is v1alpha1.ReasonApplied, ReasonNotOwned or ReasonApplyFailed.
	Reason string
	// Message says what happened, naming the object. It is reported to the
	// hub, where the tenant reads it, so it never holds what the member
	// knows about other tenants' objects: who owns an object in the way,
	// its field managers, the text of the member apiserver's refusal.
	Message string
	// Detail is the whole account for the member's own logs and events:
	// Message plus what it leaves out. Empty when Message says it all.
	Detail string
	// Object is the object as the apiserver returned it from the apply,
	// or the newer copy in place, cut to what status and the applied-set
	// records read (see slim); nil unless Reason is ReasonApplied.
	Object *unstructured.Unstructured
}

// Applied says the manifest was applied.
func (r Result) Applied() bool { return r.Reason == v1alpha1.ReasonApplied }

// Apply applies every manifest of work, in order, and returns one Result per
// manifest in the same order. A manifest that fails does not stop the
// others. The error joins every manifest's failure; a manifest left alone
// because Flotilla does not own its object wraps ErrNotOwned.
//
// A Work that names any object the Applier's NamespacePolicy refuses is
// not applied at all, nor recorded, and nothing is deleted for it: every
// manifest's Result has reason NamespaceDenied and the error wraps
// ErrNamespaceDenied. What an earlier generation of the Work applied stays
// as it was, and stays recorded, so deleting the Work still deletes it.
//
// Each object is recorded in the Work's applied set before it is applied
// (without a UID) and with its UID right after, so a crash between the two
// cannot lose track of an object the apply created. When every manifest
// applied, the objects the record holds that the Work no longer names (its
// target namespace changed, a manifest was dropped) are deleted, under the
// same rules as Delete.
//
// Only when all of that succeeded does the Applier record the Work for
// NeedsApply; any failure makes NeedsApply report true until an Apply of
// the Work succeeds. It then also stores that drift record in the Work's
// applied-set record, for a restarted Applier: with the UIDs on a first
// apply, else in one write at the end, only when the Work's generation or
// an object's version changed. That last write failing is logged, never
// returned: the applied set is kept whole either way, and a restarted
// Applier applies the Work once more.
func (a *Applier) Apply(ctx context.Context, work *v1alpha1.Work) ([]Result, error) {
	ctx = quiet(ctx)
	unlock := a.locks.lock(work.Name)
	defer unlock()

	n := len(work.Spec.Manifests)
	results := make([]Result, n)
	errs := make([]error, n)
	desired := make([]*unstructured.Unstructured, n)
	refusals := make([]string, n)
	var wanted []v1alpha1.ResourceIdentifier
	seen := map[v1alpha1.ResourceIdentifier]int{}
	for i := range work.Spec.Manifests {
		obj, id, refusal, err := a.desired(work, &work.Spec.Manifests[i])
		refusals[i] = refusal
		if err == nil {
			if first, dup := seen[id]; dup {
				err = fmt.Errorf("%s is also manifest %d of the Work; each object may appear once", describe(id), first)
			}
		}
		if err != nil {
			results[i], errs[i] = failed(id, v1alpha1.ReasonApplyFailed, err)
			continue
		}
		seen[id] = i
		desired[i] = obj
		wanted = append(wanted, id)
	}
	if refused, err := a.refuseDenied(work.Name, results, desired, refusals); err != nil {
		// All or nothing: applying the allowed half of a Work would leave
		// the member running something its author never wrote.
		a.tracker.forget(work.Name)
		return refused, err
	}

	// Shared dependencies are recorded and applied under the read side of
	// sharedMu; a deletion of one decides whether another Work still holds
	// it, and deletes it, under the write side, so it cannot delete an
	// object this Apply is about to count on.
	releaseShared := func() {}
	if slices.ContainsFunc(desired, func(o *unstructured.Unstructured) bool { return o != nil && IsShared(o) }) {
		a.sharedMu.RLock()
		releaseShared = sync.OnceFunc(a.sharedMu.RUnlock)
	}
	defer releaseShared()

	// What the member holds of each object is read while the intent is
	// recorded: the reads need nothing from the record, and each object
	// the cache does not hold (every new one) costs a live read, a round
	// trip that would otherwise come after the record's write and before
	// the apply.
	live := a.readLive(ctx, desired)
	// Record first: an object created by an apply whose record write
	// never happened could not be deleted by anyone later.
	recErr := a.ensureLoaded(ctx)
	if recErr == nil {
		recErr = a.recordIntent(ctx, work.Name, wanted, work.Spec.DeletionPolicy)
	}
	existing := live()
	for i, obj := range desired {
		switch {
		case obj == nil:
		case recErr != nil:
			id, _ := identifier(obj)
			results[i], errs[i] = failed(id, v1alpha1.ReasonApplyFailed, fmt.Errorf("recording the object in the applied set before applying it: %w", recErr))
		default:
			results[i], errs[i] = a.applyManifest(ctx, work, obj, existing[i])
		}
	}

	var all []error
	for i, err := range errs {
		if err != nil {
			all = append(all, fmt.Errorf("applying manifest %d (%s) of Work %s: %w", i, describe(results[i].Identifier), work.Name, err))
		}
	}
	if recErr == nil {
		if err := a.recordApplied(ctx, work, results, len(all) == 0); err != nil {
			all = append(all, err)
		}
	}
	// Deleting a dropped shared dependency takes the write side.
	releaseShared()
	if len(all) == 0 {
		if err := a.deleteDropped(ctx, work.Name, wanted); err != nil {
			all = append(all, fmt.Errorf("deleting the objects Work %s no longer names: %w", work.Name, err))
		}
	}
	if len(all) > 0 {
		a.tracker.forget(work.Name)
		return results, errors.Join(all...)
	}
	a.tracker.record(work, results)
	a.recordDrift(ctx, work, results)
	return results, nil
}

// refuseDenied decides, from refusals (per manifest of Work work, the
// NamespacePolicy's refusal or ""), whether the Work is refused. When it
// is, it returns a Result with reason NamespaceDenied for every manifest
// (decoded holds the failed Result of each manifest desired has no object
// for) and an error wrapping ErrNamespaceDenied that names what was
// refused; otherwise nil, nil.
func (a *Applier) refuseDenied(work string, decoded []Result, desired []*unstructured.Unstructured, refusals []string) ([]Result, error) {
	first := ""
	for _, r := range refusals {
		if r != "" {
			first = r
			break
		}
	}
	if first == "" {
		return nil, nil
	}
	results := make([]Result, len(desired))
	var errs []error
	for i, obj := range desired {
		id := decoded[i].Identifier
		var msg string
		switch {
		case refusals[i] != "":
			msg = describe(id) + ": " + refusals[i]
			errs = append(errs, fmt.Errorf("manifest %d of Work %s: %s", i, work, msg))
		case obj == nil:
			// Keep the manifest's own failure in view; the Work's reason
			// is still the policy's, since nothing was applied.
			msg = decoded[i].Message + "; and nothing of the Work was applied, because " + first
		default:
			id, _ = identifier(obj)
			msg = describe(id) + ": not applied, because the Work also names an object the namespace policy refuses (" + first + "); a Work is applied whole or not at all"
		}
		results[i] = Result{Identifier: id, Reason: v1alpha1.ReasonNamespaceDenied, Message: msg}
	}
	return results, fmt.Errorf("%w, so none of it was applied: %w", ErrNamespaceDenied, errors.Join(errs...))
}

// identifier names obj.
func identifier(obj *unstructured.Unstructured) (v1alpha1.ResourceIdentifier, schema.GroupVersionKind) {
	gvk := obj.GroupVersionKind()
	return v1alpha1.ResourceIdentifier{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}, gvk
}

// liveObject is what getLive read of one object: the object, nil when it
// does not exist, or the error that kept it from being read.
type liveObject struct {
	obj *unstructured.Unstructured
	err error
}

// readLive starts reading, in parallel, the live state of each object of
// desired (nil entries are skipped) and returns a function that waits for
// the reads and gives their results, by index.
func (a *Applier) readLive(ctx context.Context, desired []*unstructured.Unstructured) func() []liveObject {
	out := make([]liveObject, len(desired))
	var wg sync.WaitGroup
	for i, obj := range desired {
		if obj == nil {
			continue
		}
		wg.Go(func() {
			_, gvk := identifier(obj)
			out[i].obj, out[i].err = a.getLive(ctx, gvk, kclient.KeyOf(obj))
		})
	}
	return func() []liveObject {
		wg.Wait()
		return out
	}
}

// applyManifest applies desired, one manifest of work, over live (what
// readLive found of it), and says how it went; the error is non-nil
// exactly when the Result's reason is not ReasonApplied.
func (a *Applier) applyManifest(ctx context.Context, work *v1alpha1.Work, desired *unstructured.Unstructured, live liveObject) (Result, error) {
	id, _ := identifier(desired)
	existing, err := live.obj, live.err
	if err != nil {
		return refused(id, fmt.Errorf("reading the existing object: %w", err))
	}
	shared := IsShared(desired)
	if existing != nil {
		fleet, cluster := a.Identity()
		var detail string
		switch {
		case shared && !sharedClaimable(existing, desired, fleet, cluster):
			detail = sharedNotOwnedMessage(id, a.withManagedFields(ctx, existing), desired)
		case !shared && !claimable(existing, work.Name):
			detail = notOwnedMessage(id, a.withManagedFields(ctx, existing), work.Name)
		}
		if detail != "" {
			return Result{Identifier: id, Reason: v1alpha1.ReasonNotOwned, Message: describe(id) + notOwnedPublic, Detail: detail},
				fmt.Errorf("%s: %w", detail, ErrNotOwned)
		}
		if shared && newerSource(existing, desired) {
			// Another Work, rendered after this one, applied a newer copy;
			// this Work will carry it too once the hub renders it again.
			log.FromContext(ctx).V(1).Info("not overwriting a newer copy of a shared dependency", "work", work.Name, "object", describe(id),
				"liveSourceVersion", existing.GetAnnotations()[v1alpha1.AnnotationSourceVersion],
				"sourceVersion", desired.GetAnnotations()[v1alpha1.AnnotationSourceVersion])
			return Result{Identifier: id, Reason: v1alpha1.ReasonApplied, Message: describe(id) + " applied (a newer copy is in place)", Object: slim(existing.DeepCopy())}, nil
		}
	}

	applied, err := a.serverSideApply(ctx, work, desired)
	if err != nil {
		return refused(id, err)
	}
	log.FromContext(ctx).V(1).Info("applied", "work", work.Name, "object", describe(id),
		"generation", applied.GetGeneration(), "resourceVersion", applied.GetResourceVersion())
	return Result{Identifier: id, Reason: v1alpha1.ReasonApplied, Message: describe(id) + " applied", Object: applied}, nil
}

// failed is the Result and error of a manifest that could not be applied
// for a reason of its own (it does not decode, it is a duplicate) or of the
// applier's: nothing in err is about another tenant.
func failed(id v1alpha1.ResourceIdentifier, reason string, err error) (Result, error) {
	return Result{Identifier: id, Reason: reason, Message: describe(id) + ": " + err.Error()}, err
}

// notOwnedPublic ends the hub's message for an object in the way.
const notOwnedPublic = " exists in the member and is not this Work's, so it was left unchanged; the member's agent logs who owns it"

// refused is the Result and error of a manifest the member's apiserver
// refused. The text of the refusal can name other objects, quotas,
// webhooks and policies of the member, so the hub gets only its kind: the
// HTTP reason and code and, for an invalid object, the field paths.
func refused(id v1alpha1.ResourceIdentifier, err error) (Result, error) {
	r := Result{Identifier: id, Reason: v1alpha1.ReasonApplyFailed, Message: describe(id) + ": " + publicError(err), Detail: describe(id) + ": " + err.Error()}
	return r, err
}

// publicError is what the hub may see of err from the member's apiserver.
func publicError(err error) string {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return "the member's apiserver could not be reached or answered with an error; the member's agent logs it"
	}
	s := st.Status()
	msg := fmt.Sprintf("the member refused it: %s (HTTP %d)", s.Reason, s.Code)
	if s.Details != nil {
		var fields []string
		for _, c := range s.Details.Causes {
			if c.Field != "" && !slices.Contains(fields, c.Field) {
				fields = append(fields, c.Field)
			}
		}
		if len(fields) > 0 {
			msg += " at " + strings.Join(fields, ", ")
		}
	}
	return msg + "; the member's agent logs the whole answer"
}

// desired decodes manifest m of work into the object to apply: namespace
// defaulted for namespaced kinds, server-set fields and status dropped (an
// apply configuration states intent only), Flotilla's label and annotation
// set. refusal is non-empty, and says why, when the NamespacePolicy
// refuses the object.
func (a *Applier) desired(work *v1alpha1.Work, m *v1alpha1.Manifest) (_ *unstructured.Unstructured, _ v1alpha1.ResourceIdentifier, refusal string, _ error) {
	obj, err := decode(m)
	if err != nil {
		return nil, v1alpha1.ResourceIdentifier{}, "", fmt.Errorf("decoding the manifest: %w", err)
	}
	gvk := obj.GroupVersionKind()
	id := v1alpha1.ResourceIdentifier{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
	managed := slices.ContainsFunc(a.kinds, func(k schema.GroupVersionKind) bool { return k.GroupKind() == gvk.GroupKind() })
	if obj.GetName() == "" {
		return nil, id, "", errors.New("the manifest has no metadata.name")
	}
	mapping, err := a.writer.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		if !managed {
			return nil, id, "", errNotManaged(gvk, a.kinds)
		}
		return nil, id, "", fmt.Errorf("finding the resource for %s: %w", gvk, err)
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
	// The policy is asked once the scope is known and before the kind is:
	// a cluster-scoped object refuses the whole Work, whatever its kind.
	if refusal = a.namespaces.Refusal(id); refusal != "" {
		return nil, id, refusal, errors.New(refusal)
	}
	if !managed {
		return nil, id, "", errNotManaged(gvk, a.kinds)
	}

	if obj, err = ssa.Unstructured(obj, ssa.ServerSetMetadata...); err != nil {
		return nil, id, "", err
	}

	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	shared := IsShared(obj)
	if shared {
		// A shared dependency carries no Work's name: the Works that apply
		// it would take it from each other on every apply. It belongs to
		// the hub namespace it was copied from.
		if work.Labels[v1alpha1.LabelMyAppNamespace] == "" {
			return nil, id, "", fmt.Errorf("a shared dependency (label %s=true) needs the Work's %s label, which names the hub namespace it comes from", v1alpha1.LabelDependency, v1alpha1.LabelMyAppNamespace)
		}
		delete(labels, v1alpha1.LabelWork)
		delete(labels, v1alpha1.LabelMyAppName)
	} else {
		labels[v1alpha1.LabelWork] = v1alpha1.WorkLabelValue(work.Name)
	}
	// The manifest cannot choose its own identity labels: they are what a
	// deletion checks.
	delete(labels, v1alpha1.LabelFleet)
	delete(labels, v1alpha1.LabelCluster)
	if fleet, cluster := a.Identity(); fleet != "" {
		labels[v1alpha1.LabelFleet] = fleet
		if cluster != "" {
			labels[v1alpha1.LabelCluster] = cluster
		}
	}
	for _, k := range []string{v1alpha1.LabelMyAppName, v1alpha1.LabelMyAppNamespace} {
		if v, ok := work.Labels[k]; ok && (!shared || k == v1alpha1.LabelMyAppNamespace) {
			labels[k] = v
		}
	}
	obj.SetLabels(labels)
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	if shared {
		delete(annotations, v1alpha1.AnnotationWork)
	} else {
		annotations[v1alpha1.AnnotationWork] = work.Name
	}
	if len(annotations) > 0 {
		obj.SetAnnotations(annotations)
	}
	return obj, id, "", nil
}

// errNotManaged is the error of a manifest whose kind gvk is not among
// kinds.
func errNotManaged(gvk schema.GroupVersionKind, kinds []schema.GroupVersionKind) error {
	return fmt.Errorf("kind %s is not one this applier manages (%s), so it could not be pruned later", gvk.GroupKind(), kindList(kinds))
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

// lacksManagedFields says obj may have come without its managedFields: it
// has none, and came from a reader that is not the writer (a cache, which
// may hold objects without them, as the agent's does).
func (a *Applier) lacksManagedFields(obj *unstructured.Unstructured) bool {
	return a.confirmNotFound && len(obj.GetManagedFields()) == 0
}

// readThroughWriter reads obj's object again through the writer.
func (a *Applier) readThroughWriter(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	fresh := &unstructured.Unstructured{}
	fresh.SetGroupVersionKind(obj.GroupVersionKind())
	err := a.writer.Get(ctx, kclient.KeyOf(obj), fresh)
	return fresh, err
}

// withManagedFields returns obj with its managedFields: obj itself, or,
// when it lacks them (lacksManagedFields), the object read again through
// the writer. Only the messages that name an object's field managers need
// them; a failed read returns obj as it is.
func (a *Applier) withManagedFields(ctx context.Context, obj *unstructured.Unstructured) *unstructured.Unstructured {
	if !a.lacksManagedFields(obj) {
		return obj
	}
	fresh, err := a.readThroughWriter(ctx, obj)
	if err != nil || fresh.GetUID() != obj.GetUID() {
		return obj
	}
	return fresh
}

// getLive returns the object named key, or nil when it does not exist. A
// NotFound from a reader that is not the writer (a cache, perhaps one that
// holds only labelled objects) is confirmed through the writer, so that an
// unowned object the cache cannot see is not taken over.
func (a *Applier) getLive(ctx context.Context, gvk schema.GroupVersionKind, key kclient.Key) (*unstructured.Unstructured, error) {
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

// serverSideApply applies obj, an object of work, as the Applier's field
// owner, forcing ownership of conflicting fields: Flotilla is the source of
// truth for what it applies. When the object's namespace is missing and
// CreateNamespace is on, it creates the namespace and applies once more.
func (a *Applier) serverSideApply(ctx context.Context, work *v1alpha1.Work, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	out := obj.DeepCopy()
	err := a.writer.ForceApply(ctx, out, a.owner)
	if err == nil {
		return slim(out), nil
	}
	ns := obj.GetNamespace()
	if !isNamespaceNotFound(err, ns) {
		return nil, fmt.Errorf("server-side applying: %w", err)
	}
	if !a.createNamespace {
		return nil, fmt.Errorf("namespace %s does not exist and namespace creation is off: %w", ns, err)
	}
	if err := a.ensureNamespace(ctx, work, ns); err != nil {
		return nil, err
	}
	out = obj.DeepCopy()
	if err := a.writer.ForceApply(ctx, out, a.owner); err != nil {
		return nil, fmt.Errorf("server-side applying after creating namespace %s: %w", ns, err)
	}
	return slim(out), nil
}

// slim keeps of an apply's answer only what readers of Result.Object
// use: apiVersion, kind, metadata without its managedFields (the UID,
// generation and resourceVersion the applied set and drift records
// read), status, and of a Deployment's spec its replicas and selector
// (status: a cache that has not yet seen the apply falls back to the
// answer, see ReadLive, and deploymentState and unavailablePods read
// these). The rest (a pod template, a ConfigMap's or Secret's data, the
// field set per writer of managedFields) is most of an object's size,
// and the Store keeps each Work's last Results: memory held for every
// Work an agent or push member holds.
func slim(obj *unstructured.Unstructured) *unstructured.Unstructured {
	kept := make(map[string]any, 5)
	for _, k := range []string{"apiVersion", "kind", "metadata", "status"} {
		if v, ok := obj.Object[k]; ok {
			kept[k] = v
		}
	}
	unstructured.RemoveNestedField(kept, "metadata", "managedFields")
	if obj.GroupVersionKind().GroupKind() == DeploymentKind.GroupKind() {
		spec := map[string]any{}
		for _, k := range []string{"replicas", "selector"} {
			if v, found, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", k); found {
				spec[k] = v
			}
		}
		kept["spec"] = spec
	}
	obj.Object = kept
	return obj
}

// ensureNamespace creates namespace name for work, labelled as
// createdNamespaceLabels says; one that appeared meanwhile is fine, and is
// left as it is: a namespace someone else made is theirs to label.
func (a *Applier) ensureNamespace(ctx context.Context, work *v1alpha1.Work, name string) error {
	fleet, cluster := a.Identity()
	labels, err := createdNamespaceLabels(work, a.podSecurity, fleet, cluster)
	if err != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName(name)
	ns.SetLabels(labels)
	err = a.writer.Create(ctx, ns, a.owner)
	switch {
	case err == nil:
		log.FromContext(ctx).Info("created namespace", "namespace", name, "podSecurity", labels[LabelPodSecurityEnforce])
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
