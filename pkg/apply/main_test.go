package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/crclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

// One apiserver serves every test of the package; it starts on the first
// test that needs it, so the pure table tests run without it.
var sharedEnv envtestenv.Shared

func TestMain(m *testing.M) { envtestenv.Main(m, &sharedEnv) }

// startEnv returns the config of the package's envtest apiserver.
func startEnv(t *testing.T) *rest.Config { return sharedEnv.Config(t) }

// writerFor returns the kclient.Client this package's Appliers write
// through, on the apiserver cfg reaches: controller-runtime's client c
// (through crclient, as the agent and the hub's Push mode pass today), or,
// with FLOTILLA_KCLIENT=direct, pkg/kclient/direct, which an agent without
// controller-runtime would pass. make test-race runs the package both ways,
// so every test of the Applier holds for both clients.
func writerFor(t testing.TB, cfg *rest.Config, c client.Client) kclient.Client {
	t.Helper()
	switch v := os.Getenv("FLOTILLA_KCLIENT"); v {
	case "", "controller-runtime":
		return crclient.Client(c)
	case "direct":
		// pkg/apply reads and writes unstructured objects, but for the
		// two lists it reads typed (pods, EndpointSlices): a scheme of
		// core and discovery is enough.
		s := runtime.NewScheme()
		if err := corev1.AddToScheme(s); err != nil {
			t.Fatal(err)
		}
		if err := discoveryv1.AddToScheme(s); err != nil {
			t.Fatal(err)
		}
		d, err := direct.New(cfg, s)
		if err != nil {
			t.Fatalf("creating the direct client: %v", err)
		}
		return d
	default:
		t.Fatalf("FLOTILLA_KCLIENT=%q: want controller-runtime or direct", v)
		return nil
	}
}

// writer is writerFor on the package's apiserver and f's client.
func (f *fixture) writer() kclient.Client { return writerFor(f.t, startEnv(f.t), f.c) }

// fixture is one test's view of the apiserver: a direct client and a fresh
// namespace of its own.
type fixture struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
	ns  string
}

var namespaces atomic.Int32

func newFixture(t *testing.T) *fixture {
	t.Helper()
	cfg := startEnv(t)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatalf("creating a client: %v", err)
	}
	f := &fixture{t: t, ctx: t.Context(), c: c, ns: uniqueNamespace()}
	f.createNamespace(f.ns)
	return f
}

// with is f for subtest t, so that its helpers fail the subtest from the
// subtest's own goroutine.
func (f *fixture) with(t *testing.T) *fixture {
	c := *f
	c.t = t
	return &c
}

// work is the name of the Work of MyApp app in the test's namespace. Tests
// share one apiserver and Delete and Prune act on every namespace, so each
// test's Works have names of their own.
func (f *fixture) work(app string) string { return v1alpha1.WorkName(f.ns, app) }

// Identity of the fleet and cluster the tests' recording appliers serve.
const (
	testFleet   = "fleet-test"
	testCluster = "member-1"
)

// recordingApplier is an Applier that keeps its applied set in the test's
// namespace and serves testFleet as testCluster, as the agent does once
// the hub said hello. Each call is a new Applier: a restarted agent.
func (f *fixture) recordingApplier(opts Options) *Applier {
	opts.RecordNamespace = f.ns
	a := New(nil, f.writer(), opts)
	a.SetIdentity(testFleet, testCluster)
	return a
}

// uniqueNamespace returns a namespace name no other test uses.
func uniqueNamespace() string { return fmt.Sprintf("apply-%d", namespaces.Add(1)) }

func (f *fixture) createNamespace(name string) {
	f.t.Helper()
	if err := f.c.Create(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		f.t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// deployment is the kind of Deployment the hub renders.
func deployment(ns, name, image string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
	}
}

// newWork is Work name at generation gen carrying objs as raw JSON, as the
// hub sends them, with the MyApp labels the hub sets.
func newWork(t *testing.T, name string, gen int64, objs ...runtime.Object) *v1alpha1.Work {
	t.Helper()
	w := &v1alpha1.Work{ObjectMeta: metav1.ObjectMeta{
		Name: name, Namespace: v1alpha1.ClusterNamespace("member-1"), Generation: gen, UID: types.UID("uid-" + name),
		Labels: map[string]string{v1alpha1.LabelMyAppName: "web", v1alpha1.LabelMyAppNamespace: "shop", "unrelated": "not copied"},
	}}
	for _, o := range objs {
		raw, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		w.Spec.Manifests = append(w.Spec.Manifests, v1alpha1.Manifest{RawExtension: runtime.RawExtension{Raw: raw}})
	}
	return w
}

func (f *fixture) getDeployment(ns, name string) *appsv1.Deployment {
	f.t.Helper()
	d := &appsv1.Deployment{}
	if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: ns, Name: name}, d); err != nil {
		f.t.Fatalf("getting Deployment %s/%s: %v", ns, name, err)
	}
	return d
}

// eventually polls cond every 100ms for up to 10s and fails the test,
// naming what did not converge, if it never holds.
func (f *fixture) eventually(what string, cond func(ctx context.Context) (bool, error)) {
	f.t.Helper()
	if err := wait.PollUntilContextTimeout(f.ctx, 100*time.Millisecond, 10*time.Second, true, cond); err != nil {
		f.t.Fatalf("%s did not happen within 10s: %v", what, err)
	}
}
