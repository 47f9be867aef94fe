package apply

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// noManagedFields reads through r and drops the managedFields of what it
// read, as the agent's cache holds objects. With frozen set, a Get answers
// the first copy it read of each object (a cache that has not yet seen a
// change).
type noManagedFields struct {
	r      kclient.Reader
	frozen bool

	mu   sync.Mutex
	seen map[kclient.Key]*unstructured.Unstructured
}

func (n *noManagedFields) Get(ctx context.Context, key kclient.Key, obj kclient.Object) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if u, ok := obj.(*unstructured.Unstructured); ok && n.frozen && n.seen[key] != nil {
		u.Object = n.seen[key].DeepCopy().Object
		return nil
	}
	if err := n.r.Get(ctx, key, obj); err != nil {
		return err
	}
	obj.SetManagedFields(nil)
	if u, ok := obj.(*unstructured.Unstructured); ok && n.frozen {
		if n.seen == nil {
			n.seen = map[kclient.Key]*unstructured.Unstructured{}
		}
		n.seen[key] = u.DeepCopy()
	}
	return nil
}

func (n *noManagedFields) List(ctx context.Context, list kclient.ObjectList, opts kclient.ListOptions) error {
	if err := n.r.List(ctx, list, opts); err != nil {
		return err
	}
	return meta.EachListItem(list, func(o runtime.Object) error {
		if m, err := meta.Accessor(o); err == nil {
			m.SetManagedFields(nil)
		}
		return nil
	})
}

// TestReleaseReadsManagedFieldsLive: an Applier whose reader holds
// objects without managedFields (the agent's cache) still takes its own
// field ownership off what it releases, read live; and releases nothing
// that changed since its reader's copy, until it reads it again.
func TestReleaseReadsManagedFieldsLive(t *testing.T) {
	f := newFixture(t)
	w := f.writer()
	a := New(&noManagedFields{r: w}, w, Options{RecordNamespace: f.ns})
	a.SetIdentity(testFleet, testCluster)
	web := orphanWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 1))
	f.apply(a, web)
	uid := f.getDeployment(f.ns, "web").UID
	// Someone else manages a field too: their entry must survive.
	if err := f.c.Patch(f.ctx, f.getDeployment(f.ns, "web"), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"web"}}}`)), client.FieldOwner("someone-else")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Delete(f.ctx, web.Name); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	f.assertReleased(a, f.ns, "web", uid)
	if d := f.getDeployment(f.ns, "web"); !slices.ContainsFunc(d.ManagedFields, func(e metav1.ManagedFieldsEntry) bool { return e.Manager == "someone-else" }) {
		t.Errorf("releasing took other managers' field ownership too: managedFields %v", d.ManagedFields)
	}

	// The reader's copy is older than the object: not released.
	stale := &noManagedFields{r: w, frozen: true}
	b := New(stale, w, Options{RecordNamespace: f.ns})
	b.SetIdentity(testFleet, testCluster)
	api := orphanWork(t, f.work("api"), 1, deployment(f.ns, "api", "api:1", 1))
	f.apply(b, api)
	uid = f.getDeployment(f.ns, "api").UID
	cached := &unstructured.Unstructured{}
	cached.SetGroupVersionKind(DeploymentKind)
	if err := stale.Get(f.ctx, kclient.Key{Namespace: f.ns, Name: "api"}, cached); err != nil {
		t.Fatal(err)
	}
	if err := w.Patch(f.ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"namespace": f.ns, "name": "api"},
	}}, types.MergePatchType, []byte(`{"metadata":{"labels":{"someone":"else"}}}`)); err != nil {
		t.Fatal(err)
	}
	_, err := b.Delete(f.ctx, api.Name)
	if err == nil || !strings.Contains(err.Error(), "changed since the cache read it") {
		t.Errorf("Delete through a reader with an older copy: %v; want it to say the object changed since the cache read it", err)
	}
	if d := f.getDeployment(f.ns, "api"); d.Labels[v1alpha1.LabelWork] == "" {
		t.Errorf("Deployment api was released from a copy older than it: labels %v", d.Labels)
	}
	// Read again (the cache caught up): released.
	stale.mu.Lock()
	stale.frozen, stale.seen = false, nil
	stale.mu.Unlock()
	if _, err := b.Delete(f.ctx, api.Name); err != nil {
		t.Fatalf("Delete once the reader caught up: %v", err)
	}
	f.assertReleased(b, f.ns, "api", uid)
}

// TestNotOwnedNamesFieldManagersReadLive: the member's account of an
// object in the way names its field managers although the reader holds
// it without them.
func TestNotOwnedNamesFieldManagersReadLive(t *testing.T) {
	f := newFixture(t)
	w := f.writer()
	f.createUnowned(deployment(f.ns, "theirs", "theirs:1", 1))
	a := New(&noManagedFields{r: w}, w, Options{})
	results, err := a.Apply(f.ctx, newWork(t, f.work("web"), 1, deployment(f.ns, "theirs", "ours:1", 1)))
	if !errors.Is(err, ErrNotOwned) {
		t.Fatalf("Apply: %v; want NotOwned", err)
	}
	if !strings.Contains(results[0].Detail, "field managers: kubectl-create") {
		t.Errorf("detail %q does not name the field manager kubectl-create", results[0].Detail)
	}
}
