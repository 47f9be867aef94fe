package apply

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/crclient"
)

// apply applies work and fails the test on any error.
func (f *fixture) apply(a *Applier, work *v1alpha1.Work) []Result {
	f.t.Helper()
	results, err := a.Apply(f.ctx, work)
	if err != nil {
		f.t.Fatalf("applying Work %s: %v", work.Name, err)
	}
	return results
}

// liveOf lists, through the direct client, the Deployments labelled for
// work: what a caller's label-selected cache would hold.
func (f *fixture) liveOf(work *v1alpha1.Work) []kclient.Object {
	f.t.Helper()
	var list appsv1.DeploymentList
	if err := f.c.List(f.ctx, &list, client.MatchingLabels{v1alpha1.LabelWork: v1alpha1.WorkLabelValue(work.Name)}); err != nil {
		f.t.Fatalf("listing the Deployments of Work %s: %v", work.Name, err)
	}
	out := make([]kclient.Object, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out
}

// createUnowned creates Deployment d as a person with kubectl would, so its
// managedFields name kubectl-create.
func (f *fixture) createUnowned(d *appsv1.Deployment) *appsv1.Deployment {
	f.t.Helper()
	if err := f.c.Create(f.ctx, d, client.FieldOwner("kubectl-create")); err != nil {
		f.t.Fatalf("creating Deployment %s/%s: %v", d.Namespace, d.Name, err)
	}
	return d
}

// waitingPod creates pod name of app (label app=app) in the fixture's
// namespace, its only container of image waiting with reason and message,
// as a kubelet would report it.
func (f *fixture) waitingPod(name, app, image, reason, message string) {
	f.t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
	}
	if err := f.c.Create(f.ctx, pod); err != nil {
		f.t.Fatalf("creating pod %s: %v", name, err)
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: image,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}}}
	if err := f.c.Status().Update(f.ctx, pod); err != nil {
		f.t.Fatalf("setting the status of pod %s as the kubelet would: %v", name, err)
	}
}

func (f *fixture) gone(ns, name string) {
	f.t.Helper()
	f.eventually("deletion of Deployment "+ns+"/"+name, func(ctx context.Context) (bool, error) {
		err := f.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &appsv1.Deployment{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// TestApplyCreatesOwnedDeployment shows that Apply creates a Work's
// Deployment with Flotilla's label and annotation, the Work's MyApp labels
// (and no other Work label), owned by the configured field owner through
// server-side apply; and that a Work name too long for a label gets the
// shortened label value and its full name in the annotation.
func TestApplyCreatesOwnedDeployment(t *testing.T) {
	f := newFixture(t)
	long := f.work(strings.Repeat("w", 70))
	for _, tc := range []struct {
		name, workName, owner, wantOwner string
	}{
		{"default field owner", f.work("web"), "", DefaultFieldOwner},
		{"configured field owner and a long Work name", long, "flotilla-hub", "flotilla-hub"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := f.with(t)
			a := New(nil, f.writer(), Options{FieldOwner: tc.owner})
			deployName := "web-" + tc.wantOwner
			work := newWork(t, tc.workName, 1, deployment(f.ns, deployName, "web:1", 2))
			results := f.apply(a, work)
			if len(results) != 1 || !results[0].Applied() || results[0].Object == nil {
				t.Fatalf("results = %+v, want one applied object", results)
			}
			wantID := v1alpha1.ResourceIdentifier{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: f.ns, Name: deployName}
			if results[0].Identifier != wantID {
				t.Errorf("identifier = %+v, want %+v", results[0].Identifier, wantID)
			}

			d := f.getDeployment(f.ns, deployName)
			if got, want := d.Labels[v1alpha1.LabelWork], v1alpha1.WorkLabelValue(tc.workName); got != want {
				t.Errorf("label %s = %q, want %q", v1alpha1.LabelWork, got, want)
			}
			if got := d.Annotations[v1alpha1.AnnotationWork]; got != tc.workName {
				t.Errorf("annotation %s = %q, want the full Work name %q", v1alpha1.AnnotationWork, got, tc.workName)
			}
			if d.Labels[v1alpha1.LabelMyAppName] != "web" || d.Labels[v1alpha1.LabelMyAppNamespace] != "shop" {
				t.Errorf("MyApp labels not copied from the Work: %v", d.Labels)
			}
			if _, ok := d.Labels["unrelated"]; ok {
				t.Errorf("a Work label other than the MyApp ones was copied: %v", d.Labels)
			}
			if !slices.ContainsFunc(d.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
				return e.Manager == tc.wantOwner && e.Operation == metav1.ManagedFieldsOperationApply
			}) {
				t.Errorf("no server-side apply entry for %s in managedFields %+v", tc.wantOwner, d.ManagedFields)
			}
			if d.UID != results[0].Object.GetUID() {
				t.Errorf("result object UID %s, live %s", results[0].Object.GetUID(), d.UID)
			}
			// The Store keeps each Work's Results: their objects carry what
			// status and drift read, not the field sets the live one has.
			if got := results[0].Object; got.GetGeneration() != d.Generation || got.GetResourceVersion() != d.ResourceVersion || len(got.GetManagedFields()) != 0 {
				t.Errorf("result object generation %d, resourceVersion %s, %d managedFields; live %d, %s", got.GetGeneration(), got.GetResourceVersion(), len(got.GetManagedFields()), d.Generation, d.ResourceVersion)
			}
			// Of the spec, what status reads (replicas, selector), not the
			// pod template.
			spec, _, _ := unstructured.NestedMap(results[0].Object.Object, "spec")
			if replicas, _, _ := unstructured.NestedInt64(spec, "replicas"); replicas != 2 || spec["selector"] == nil || spec["template"] != nil {
				t.Errorf("result object spec %v; want replicas 2 and the selector, without the template", spec)
			}
			if !OwnedBy(d, tc.workName) {
				t.Errorf("OwnedBy(%s) = false for the object it applied", tc.workName)
			}
		})
	}
}

// TestReapplyUnchangedWorkChangesNothing shows that applying the same Work
// again writes nothing: the Deployment keeps its resourceVersion and
// generation, and NeedsApply says no apply is needed.
func TestReapplyUnchangedWorkChangesNothing(t *testing.T) {
	f := newFixture(t)
	a := New(nil, f.writer(), Options{})
	work := newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 2))
	f.apply(a, work)
	before := f.getDeployment(f.ns, "web")
	if a.NeedsApply(work, f.liveOf(work)) {
		t.Errorf("NeedsApply = true right after an apply")
	}

	f.apply(a, work)
	after := f.getDeployment(f.ns, "web")
	if after.ResourceVersion != before.ResourceVersion || after.Generation != before.Generation {
		t.Errorf("re-apply changed the Deployment: resourceVersion %s -> %s, generation %d -> %d",
			before.ResourceVersion, after.ResourceVersion, before.Generation, after.Generation)
	}
}

// TestChangedWorkUpdatesInPlace shows that a new generation of a Work
// updates the same Deployment (same UID), and that a field dropped from the
// manifest is removed from the object, as server-side apply promises.
func TestChangedWorkUpdatesInPlace(t *testing.T) {
	f := newFixture(t)
	a := New(nil, f.writer(), Options{})
	v1 := deployment(f.ns, "web", "web:1", 2)
	v1.Annotations = map[string]string{"team": "checkout"}
	work := newWork(t, f.work("web"), 1, v1)
	f.apply(a, work)
	before := f.getDeployment(f.ns, "web")

	work2 := newWork(t, f.work("web"), 2, deployment(f.ns, "web", "web:2", 3))
	if !a.NeedsApply(work2, f.liveOf(work2)) {
		t.Errorf("NeedsApply = false for a new Work generation")
	}
	f.apply(a, work2)
	after := f.getDeployment(f.ns, "web")
	if after.UID != before.UID {
		t.Errorf("the Deployment was replaced (UID %s -> %s), want an update in place", before.UID, after.UID)
	}
	if got := after.Spec.Template.Spec.Containers[0].Image; got != "web:2" || *after.Spec.Replicas != 3 {
		t.Errorf("Deployment has image %s and %d replicas, want web:2 and 3", got, *after.Spec.Replicas)
	}
	if after.Generation <= before.Generation {
		t.Errorf("generation %d -> %d, want it to move", before.Generation, after.Generation)
	}
	if _, ok := after.Annotations["team"]; ok {
		t.Errorf("annotation dropped from the manifest is still on the Deployment: %v", after.Annotations)
	}
	if after.Annotations[v1alpha1.AnnotationWork] != f.work("web") {
		t.Errorf("Flotilla's annotation is gone: %v", after.Annotations)
	}
}

// TestUnownedDeploymentIsLeftAlone shows that a Deployment Flotilla did not
// create is not taken over, even when the Applier reads through a cache
// that only holds Flotilla's labelled objects and so cannot see it: Apply
// leaves its spec unchanged, reports NotOwned naming its field manager, and
// the Work's status is Degraded with that message.
func TestUnownedDeploymentIsLeftAlone(t *testing.T) {
	f := newFixture(t)
	owned, err := labels.NewRequirement(v1alpha1.LabelWork, selection.Exists, nil)
	if err != nil {
		t.Fatal(err)
	}
	labelled, err := cache.New(startEnv(t), cache.Options{DefaultLabelSelector: labels.NewSelector().Add(*owned)})
	if err != nil {
		t.Fatalf("creating a cache: %v", err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	t.Cleanup(cancel)
	go func() {
		if err := labelled.Start(ctx); err != nil {
			t.Errorf("running the cache: %v", err)
		}
	}()

	for _, tc := range []struct {
		name, deployment string
		reader           client.Reader
	}{
		{"reading live", "web-live", nil},
		{"reading through a cache of labelled objects", "web-cached", labelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := f.with(t)
			name := tc.deployment
			existing := f.createUnowned(deployment(f.ns, name, "theirs:1", 1))
			a := New(crclient.Reader(tc.reader), f.writer(), Options{})
			work := newWork(t, f.work("web"), 1, deployment(f.ns, name, "ours:1", 3))

			results, err := a.Apply(f.ctx, work)
			if !errors.Is(err, ErrNotOwned) {
				t.Fatalf("Apply error = %v, want one wrapping ErrNotOwned", err)
			}
			r := results[0]
			if r.Reason != v1alpha1.ReasonNotOwned || r.Object != nil {
				t.Fatalf("result = %+v, want reason NotOwned and no object", r)
			}
			// The member keeps the whole account; the hub, where the
			// tenant reads it, learns nothing about the other owner.
			for _, part := range []string{"Deployment " + f.ns + "/" + name, "no flotilla.dev/work label", "field managers: kubectl-create", "left unchanged"} {
				if !strings.Contains(r.Detail, part) || !strings.Contains(err.Error(), part) {
					t.Errorf("detail %q or error %q does not say %q", r.Detail, err, part)
				}
			}
			for _, part := range []string{"Deployment " + f.ns + "/" + name, "left unchanged"} {
				if !strings.Contains(r.Message, part) {
					t.Errorf("message %q does not say %q", r.Message, part)
				}
			}
			if strings.Contains(r.Message, "kubectl-create") || strings.Contains(r.Message, "field managers") {
				t.Errorf("the message for the hub %q names the other owner's field managers", r.Message)
			}

			d := f.getDeployment(f.ns, name)
			if d.ResourceVersion != existing.ResourceVersion || d.Spec.Template.Spec.Containers[0].Image != "theirs:1" || *d.Spec.Replicas != 1 {
				t.Errorf("the unowned Deployment changed: resourceVersion %s -> %s, image %s, replicas %d",
					existing.ResourceVersion, d.ResourceVersion, d.Spec.Template.Spec.Containers[0].Image, *d.Spec.Replicas)
			}
			if _, ok := d.Labels[v1alpha1.LabelWork]; ok {
				t.Errorf("Flotilla's label was added to the unowned Deployment")
			}
			if !a.NeedsApply(work, f.liveOf(work)) {
				t.Errorf("NeedsApply = false for a Work whose object was not applied")
			}

			st, _, err := a.Status(f.ctx, work, results, time.Now())
			if err != nil {
				t.Fatalf("computing status: %v", err)
			}
			degraded := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDegraded)
			if degraded == nil || degraded.Status != metav1.ConditionTrue || degraded.Reason != v1alpha1.ReasonNotOwned || degraded.Message != r.Message {
				t.Errorf("Work Degraded = %+v, want True NotOwned with message %q", degraded, r.Message)
			}
			applied := meta.FindStatusCondition(st.Manifests[0].Conditions, v1alpha1.ConditionApplied)
			if applied == nil || applied.Status != metav1.ConditionFalse || applied.Reason != v1alpha1.ReasonNotOwned {
				t.Errorf("manifest Applied = %+v, want False NotOwned", applied)
			}
		})
	}
}

// TestAnotherWorksObjectIsNotTakenOver shows that a Work naming a
// Deployment another Work applied leaves it with that Work and says whose
// it is.
func TestAnotherWorksObjectIsNotTakenOver(t *testing.T) {
	f := newFixture(t)
	a := New(nil, f.writer(), Options{})
	f.apply(a, newWork(t, f.work("first"), 1, deployment(f.ns, "web", "first:1", 1)))
	before := f.getDeployment(f.ns, "web")

	results, err := a.Apply(f.ctx, newWork(t, f.work("second"), 1, deployment(f.ns, "web", "second:1", 2)))
	if !errors.Is(err, ErrNotOwned) {
		t.Fatalf("Apply error = %v, want one wrapping ErrNotOwned", err)
	}
	if want := `belongs to Work "` + f.work("first") + `", not "` + f.work("second") + `"`; results[0].Reason != v1alpha1.ReasonNotOwned || !strings.Contains(results[0].Detail, want) {
		t.Errorf("result = %s %q, want NotOwned with the detail %q", results[0].Reason, results[0].Detail, want)
	}
	if strings.Contains(results[0].Message, f.work("first")) {
		t.Errorf("the message for the hub %q names the other tenant's Work %q", results[0].Message, f.work("first"))
	}
	after := f.getDeployment(f.ns, "web")
	if after.ResourceVersion != before.ResourceVersion || after.Annotations[v1alpha1.AnnotationWork] != f.work("first") {
		t.Errorf("the first Work's Deployment changed: resourceVersion %s -> %s, annotation %q",
			before.ResourceVersion, after.ResourceVersion, after.Annotations[v1alpha1.AnnotationWork])
	}
}

// TestDeleteRemovesOnlyThatWorksObjects shows that Delete removes the
// Work's objects in every namespace and leaves another Work's, an
// unlabelled one, and one carrying the Work's label without its annotation.
func TestDeleteRemovesOnlyThatWorksObjects(t *testing.T) {
	f := newFixture(t)
	other := uniqueNamespace()
	f.createNamespace(other)
	a := f.recordingApplier(Options{})
	f.apply(a, newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 1), deployment(other, "web", "web:1", 1)))
	f.apply(a, newWork(t, f.work("api"), 1, deployment(f.ns, "api", "api:1", 1)))
	f.createUnowned(deployment(f.ns, "theirs", "theirs:1", 1))
	copied := deployment(f.ns, "copied-label", "theirs:1", 1)
	copied.Labels = map[string]string{v1alpha1.LabelWork: f.work("web")}
	f.createUnowned(copied)

	deleted, err := a.Delete(f.ctx, f.work("web"))
	if err != nil {
		t.Fatalf("deleting Work %s: %v", f.work("web"), err)
	}
	want := []v1alpha1.ResourceIdentifier{
		{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: f.ns, Name: "web"},
		{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: other, Name: "web"},
	}
	slices.SortFunc(deleted, func(x, y v1alpha1.ResourceIdentifier) int { return strings.Compare(x.Namespace, y.Namespace) })
	slices.SortFunc(want, func(x, y v1alpha1.ResourceIdentifier) int { return strings.Compare(x.Namespace, y.Namespace) })
	if !slices.Equal(deleted, want) {
		t.Errorf("deleted %+v, want %+v", deleted, want)
	}
	f.gone(f.ns, "web")
	f.gone(other, "web")
	for _, name := range []string{"api", "theirs", "copied-label"} {
		f.getDeployment(f.ns, name)
	}
	if slices.ContainsFunc(a.Applied(), func(w AppliedWork) bool { return w.Name == f.work("web") }) {
		t.Errorf("Applied() still lists the deleted Work: %+v", a.Applied())
	}
}

// TestPruneRemovesOwnedObjectsNotKept shows that Prune deletes the objects
// of every Work not in keep, keeps those in keep, and never touches an
// unlabelled Deployment, not even with an empty keep set.
func TestPruneRemovesOwnedObjectsNotKept(t *testing.T) {
	f := newFixture(t)
	a := f.recordingApplier(Options{})
	f.apply(a, newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 1)))
	f.apply(a, newWork(t, f.work("api"), 1, deployment(f.ns, "api", "api:1", 1)))
	f.createUnowned(deployment(f.ns, "theirs", "theirs:1", 1))

	deleted, err := a.Prune(f.ctx, sets.New(f.work("web")), false)
	if err != nil {
		t.Fatalf("pruning: %v", err)
	}
	api := v1alpha1.ResourceIdentifier{Group: "apps", Version: "v1", Kind: "Deployment", Namespace: f.ns, Name: "api"}
	if !slices.Contains(deleted, api) {
		t.Errorf("Prune reported %+v, want it to include %+v", deleted, api)
	}
	f.gone(f.ns, "api")
	f.getDeployment(f.ns, "web")
	f.getDeployment(f.ns, "theirs")
	if got := a.Applied(); len(got) != 1 || got[0].Name != f.work("web") {
		t.Errorf("Applied() = %+v, want only %s", got, f.work("web"))
	}

	if _, err := a.Prune(f.ctx, sets.New[string](), false); err != nil {
		t.Fatalf("pruning everything: %v", err)
	}
	f.gone(f.ns, "web")
	if d := f.getDeployment(f.ns, "theirs"); d.DeletionTimestamp != nil {
		t.Errorf("the unlabelled Deployment is being deleted")
	}
}

// TestNamespaceCreation shows that a missing namespace is created when
// CreateNamespace is on, and that with it off Apply fails saying so and
// creates nothing.
func TestNamespaceCreation(t *testing.T) {
	f := newFixture(t)
	t.Run("off", func(t *testing.T) {
		f := f.with(t)
		ns := uniqueNamespace()
		a := New(nil, f.writer(), Options{})
		results, err := a.Apply(f.ctx, newWork(t, f.work("web"), 1, deployment(ns, "web", "web:1", 1)))
		if err == nil || !strings.Contains(err.Error(), "namespace "+ns+" does not exist and namespace creation is off") {
			t.Fatalf("Apply error = %v, want one saying the namespace is missing and creation is off", err)
		}
		if results[0].Reason != v1alpha1.ReasonApplyFailed {
			t.Errorf("reason = %s, want ApplyFailed", results[0].Reason)
		}
		if err := f.c.Get(f.ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
			t.Errorf("namespace %s: get error %v, want NotFound", ns, err)
		}
	})
	t.Run("on", func(t *testing.T) {
		f := f.with(t)
		ns := uniqueNamespace()
		a := New(nil, f.writer(), Options{CreateNamespace: true})
		f.apply(a, newWork(t, f.work("web"), 1, deployment(ns, "web", "web:1", 1)))
		f.getDeployment(ns, "web")
		var created corev1.Namespace
		if err := f.c.Get(f.ctx, client.ObjectKey{Name: ns}, &created); err != nil {
			t.Fatalf("getting the created namespace: %v", err)
		}
		if _, ok := created.Labels[v1alpha1.LabelWork]; ok {
			t.Errorf("the created namespace carries %s, so a Prune could delete it", v1alpha1.LabelWork)
		}
	})
}

// TestNeedsApplyDetectsDrift shows that NeedsApply stays false while
// nothing but status changes, and turns true when someone edits the spec
// (the generation moves), removes Flotilla's label, or deletes the object;
// and that the next Apply undoes the hand edit.
func TestNeedsApplyDetectsDrift(t *testing.T) {
	f := newFixture(t)
	a := New(nil, f.writer(), Options{})
	work := newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 2))
	f.apply(a, work)

	d := f.getDeployment(f.ns, "web")
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2}
	if err := f.c.Status().Update(f.ctx, d); err != nil {
		t.Fatalf("updating status as the Deployment controller would: %v", err)
	}
	if a.NeedsApply(work, f.liveOf(work)) {
		t.Errorf("NeedsApply = true after a status update only")
	}

	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Replicas = new(int32(5))
	if err := f.c.Patch(f.ctx, d, patch, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatalf("editing the spec by hand: %v", err)
	}
	if !a.NeedsApply(work, f.liveOf(work)) {
		t.Errorf("NeedsApply = false after a hand edit of the spec (generation moved)")
	}
	f.apply(a, work)
	if got := *f.getDeployment(f.ns, "web").Spec.Replicas; got != 2 {
		t.Errorf("replicas = %d after re-applying, want the Work's 2", got)
	}
	if a.NeedsApply(work, f.liveOf(work)) {
		t.Errorf("NeedsApply = true right after the apply that undid the edit")
	}

	d = f.getDeployment(f.ns, "web")
	patch = client.MergeFrom(d.DeepCopy())
	delete(d.Annotations, v1alpha1.AnnotationWork)
	if err := f.c.Patch(f.ctx, d, patch); err != nil {
		t.Fatalf("removing Flotilla's annotation by hand: %v", err)
	}
	if !a.NeedsApply(work, []kclient.Object{d}) {
		t.Errorf("NeedsApply = false for an object that lost Flotilla's annotation")
	}
	f.apply(a, work)

	if err := f.c.Delete(f.ctx, f.getDeployment(f.ns, "web")); err != nil {
		t.Fatalf("deleting the Deployment by hand: %v", err)
	}
	f.gone(f.ns, "web")
	if !a.NeedsApply(work, f.liveOf(work)) {
		t.Errorf("NeedsApply = false after the Deployment was deleted")
	}
}

// TestStatusFromLiveDeployment shows Status reading the live Deployment
// (whose status the test writes, as the Deployment controller would) and,
// only while it is not available, its pods: a pod that cannot pull its
// image makes the Work Degraded ImagePullBackOff, and a Deployment that
// becomes available makes it Available.
func TestStatusFromLiveDeployment(t *testing.T) {
	f := newFixture(t)
	a := New(nil, f.writer(), Options{})
	work := newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:nope", 2))
	results := f.apply(a, work)

	f.waitingPod("web-abc", "web", "web:nope", "ImagePullBackOff", `Back-off pulling image "web:nope"`)
	d := f.getDeployment(f.ns, "web")
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, UnavailableReplicas: 2}
	if err := f.c.Status().Update(f.ctx, d); err != nil {
		t.Fatalf("updating the Deployment's status: %v", err)
	}

	st, _, err := a.Status(f.ctx, work, results, time.Now())
	if err != nil {
		t.Fatalf("computing status: %v", err)
	}
	checkCondition(t, "Work", st.Conditions, v1alpha1.ConditionDegraded,
		want{metav1.ConditionTrue, "ImagePullBackOff", "pod web-abc container app: ImagePullBackOff"})
	checkCondition(t, "Work", st.Conditions, v1alpha1.ConditionAvailable, want{metav1.ConditionFalse, v1alpha1.ReasonUnavailable, "0 of 2"})
	if w := st.Manifests[0].Workload; w == nil || w.UnavailableReplicas != 2 || w.Generation != d.Generation {
		t.Errorf("workload = %+v, want the Deployment's numbers", w)
	}

	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
	if err := f.c.Status().Update(f.ctx, d); err != nil {
		t.Fatalf("updating the Deployment's status: %v", err)
	}
	live, err := a.ReadLive(f.ctx, results)
	if err != nil {
		t.Fatalf("reading live state: %v", err)
	}
	if _, listed := live.Pods[results[0].Identifier]; listed {
		t.Errorf("pods were listed for an available Deployment")
	}
	st = WorkStatus(work, results, live, time.Now())
	checkCondition(t, "Work", st.Conditions, v1alpha1.ConditionAvailable, want{metav1.ConditionTrue, v1alpha1.ReasonAvailable, "2 of 2"})
	checkCondition(t, "Work", st.Conditions, v1alpha1.ConditionDegraded, want{metav1.ConditionFalse, v1alpha1.ReasonAsExpected, ""})
}
