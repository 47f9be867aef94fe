package direct_test

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
)

// answers records the Content-Type of each answer to a list request (a
// GET without a name), by the request's path.
type answers struct {
	mu   sync.Mutex
	seen map[string][]string
}

type recordingTransport struct {
	next http.RoundTripper
	a    *answers
}

func (r recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil && req.Method == http.MethodGet {
		r.a.mu.Lock()
		r.a.seen[req.URL.Path] = append(r.a.seen[req.URL.Path], resp.Header.Get("Content-Type"))
		r.a.mu.Unlock()
	}
	return resp, err
}

func (a *answers) of(path string) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.seen[path])
}

// TestTypedListsSkipUnstructured: a typed List asks for protobuf and
// decodes into the caller's list (a custom resource, which has no
// protobuf, arrives as JSON into its Go type); pages, selectors and an
// all-namespace list hold as on the unstructured path, each item carries
// its apiVersion and kind, and an unstructured List stays JSON.
func TestTypedListsSkipUnstructured(t *testing.T) {
	cfg := rest.CopyConfig(sharedEnv.ConfigWithCRDs(t))
	a := &answers{seen: map[string][]string{}}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return recordingTransport{rt, a} })
	s := scheme(t)
	if err := flotillav1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := direct.New(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	ns := namespace(t, c)
	for _, name := range []string{"a", "b", "c"} {
		if err := c.Create(ctx, configMap(ns, name, map[string]string{"set": "typed"}, nil), "test"); err != nil {
			t.Fatal(err)
		}
	}

	// Pages of at most one, by label, across every namespace. (With a
	// selector the apiserver may end on an empty page: it stops after
	// Limit objects read, matching or not.)
	typedSet := kclient.MatchingLabels("", map[string]string{"set": "typed"}).Labels
	var got []string
	cont, pages := "", 0
	for ; ; pages++ {
		if pages > 20 {
			t.Fatalf("more than 20 pages of 1 for 3 ConfigMaps: %v", got)
		}
		var page corev1.ConfigMapList
		if err := c.List(ctx, &page, kclient.ListOptions{Labels: typedSet, Limit: 1, Continue: cont}); err != nil {
			t.Fatalf("listing page %d: %v", pages, err)
		}
		if len(page.Items) > 1 {
			t.Fatalf("page %d has %d items, want at most 1", pages, len(page.Items))
		}
		for _, it := range page.Items {
			if it.APIVersion != "v1" || it.Kind != "ConfigMap" {
				t.Errorf("item %s/%s has apiVersion %q and kind %q, want v1 ConfigMap", it.Namespace, it.Name, it.APIVersion, it.Kind)
			}
			if it.Namespace != ns || it.Labels["set"] != "typed" || it.UID == "" {
				t.Errorf("item %s/%s (labels %v, uid %q): want one of this test's ConfigMaps, whole", it.Namespace, it.Name, it.Labels, it.UID)
			}
			got = append(got, it.Name)
		}
		if cont = page.Continue; cont == "" {
			break
		}
	}
	if !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("the pages gave %v, want a, b and c", got)
	}
	if ct := a.of("/api/v1/configmaps"); len(ct) != pages+1 || !allHave(ct, runtime.ContentTypeProtobuf) {
		t.Errorf("the %d typed pages were answered as %v, want each in %s", pages+1, ct, runtime.ContentTypeProtobuf)
	}

	// By field, in one namespace.
	var byName corev1.ConfigMapList
	if err := c.List(ctx, &byName, kclient.ListOptions{Namespace: ns, Fields: fields.OneTermEqualSelector("metadata.name", "b")}); err != nil {
		t.Fatal(err)
	}
	if len(byName.Items) != 1 || byName.Items[0].Name != "b" {
		t.Errorf("listing metadata.name=b in %s gave %d items, want b alone", ns, len(byName.Items))
	}

	// Unstructured stays JSON.
	ul := &unstructured.UnstructuredList{}
	ul.SetAPIVersion("v1")
	ul.SetKind("ConfigMapList")
	if err := c.List(ctx, ul, kclient.ListOptions{Namespace: ns}); err != nil {
		t.Fatal(err)
	}
	if ct := a.of("/api/v1/namespaces/" + ns + "/configmaps"); len(ct) != 2 || !strings.HasPrefix(ct[1], runtime.ContentTypeJSON) {
		t.Errorf("the namespace's lists were answered as %v, want protobuf (typed) then JSON (unstructured)", ct)
	}

	// A custom resource: JSON, decoded into its Go type.
	work := &flotillav1.Work{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "w"}}
	work.Spec.Manifests = []flotillav1.Manifest{{RawExtension: runtime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"m"}}`)}}}
	if err := c.Create(ctx, work, "test"); err != nil {
		t.Fatalf("creating Work w: %v", err)
	}
	var works flotillav1.WorkList
	if err := c.List(ctx, &works, kclient.ListOptions{Namespace: ns}); err != nil {
		t.Fatalf("listing Works: %v", err)
	}
	if len(works.Items) != 1 || works.Items[0].Name != "w" || works.Items[0].Kind != "Work" {
		t.Errorf("listing Works gave %d items (%v), want Work w with its kind", len(works.Items), works.Items)
	}

	// A refusal is the apiserver's error: a field selector it does not
	// support is a BadRequest naming the field.
	err = c.List(ctx, &corev1.ConfigMapList{}, kclient.ListOptions{Namespace: ns, Fields: fields.OneTermEqualSelector("data.k", "v")})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), "data.k") {
		t.Errorf("listing by an unsupported field: %v, want a BadRequest naming data.k", err)
	}
}

func allHave(cts []string, prefix string) bool {
	for _, ct := range cts {
		if !strings.HasPrefix(ct, prefix) {
			return false
		}
	}
	return true
}
