package apply

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// service is a ClusterIP Service selecting app=selector, as the hub renders
// one.
func service(ns, name, selector string) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": selector},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80}},
		},
	}
}

// serviceID names Service ns/name.
func serviceID(ns, name string) v1alpha1.ResourceIdentifier {
	return v1alpha1.ResourceIdentifier{Version: "v1", Kind: "Service", Namespace: ns, Name: name}
}

// endpoint is one endpoint at addr whose ready condition is ready (nil:
// unset).
func endpoint(addr string, ready *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
}

// createSlice creates, as the EndpointSlice controller would (there is none
// in envtest), EndpointSlice name of Service svc in ns.
func (f *fixture) createSlice(ns, name, svc string, family discoveryv1.AddressType, eps ...discoveryv1.Endpoint) {
	f.t.Helper()
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc,
			discoveryv1.LabelManagedBy:   "endpointslice-controller.k8s.io",
		}},
		AddressType: family,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80)}},
	}
	if err := f.c.Create(f.ctx, s); err != nil {
		f.t.Fatalf("creating EndpointSlice %s/%s: %v", ns, name, err)
	}
}

func (f *fixture) createService(svc *corev1.Service) {
	f.t.Helper()
	if err := f.c.Create(f.ctx, svc); err != nil {
		f.t.Fatalf("creating Service %s/%s: %v", svc.Namespace, svc.Name, err)
	}
}

// liveService reads Service ns/name as ReadLive does.
func (f *fixture) liveService(a *Applier, ns, name string) *unstructured.Unstructured {
	f.t.Helper()
	obj, err := a.getLive(f.ctx, ServiceKind, client.ObjectKey{Namespace: ns, Name: name})
	if err != nil || obj == nil {
		f.t.Fatalf("reading Service %s/%s: %v (found %v)", ns, name, err, obj != nil)
	}
	return obj
}

// TestServiceEndpoints counts a Service's endpoints from EndpointSlices
// made by hand: x's IPv4 slices hold 2 ready (one true, one unset) and 1
// not ready, then 1 more ready; its IPv6 slice 1 ready; the slices of
// another Service, and of a Service of the same name in another namespace,
// are not counted.
func TestServiceEndpoints(t *testing.T) {
	f := newFixture(t)
	other := uniqueNamespace()
	f.createNamespace(other)
	f.createService(service(f.ns, "x", "x"))
	f.createService(service(f.ns, "y", "y"))
	f.createService(service(other, "x", "x"))

	f.createSlice(f.ns, "x-v4a", "x", discoveryv1.AddressTypeIPv4,
		endpoint("10.1.0.1", ptr.To(true)), endpoint("10.1.0.2", nil), endpoint("10.1.0.3", ptr.To(false)))
	f.createSlice(f.ns, "x-v4b", "x", discoveryv1.AddressTypeIPv4, endpoint("10.1.0.4", ptr.To(true)))
	f.createSlice(f.ns, "x-v6", "x", discoveryv1.AddressTypeIPv6, endpoint("fd00::1", ptr.To(true)))
	f.createSlice(f.ns, "y-v4", "y", discoveryv1.AddressTypeIPv4,
		endpoint("10.2.0.1", ptr.To(true)), endpoint("10.2.0.2", ptr.To(true)), endpoint("10.2.0.3", ptr.To(true)),
		endpoint("10.2.0.4", ptr.To(false)), endpoint("10.2.0.5", ptr.To(false)))
	f.createSlice(other, "x-v4", "x", discoveryv1.AddressTypeIPv4,
		endpoint("10.3.0.1", ptr.To(true)), endpoint("10.3.0.2", ptr.To(true)), endpoint("10.3.0.3", ptr.To(true)),
		endpoint("10.3.0.4", ptr.To(true)), endpoint("10.3.0.5", ptr.To(false)))

	a := New(nil, f.writer(), Options{Kinds: WorkKinds})

	t.Run("serviceEndpoints", func(t *testing.T) {
		f := f.with(t)
		got, err := a.serviceEndpoints(f.ctx, f.liveService(a, f.ns, "x"))
		if err != nil {
			t.Fatalf("counting the endpoints of x: %v", err)
		}
		if got == nil || *got != (v1alpha1.EndpointsStatus{Ready: 3, NotReady: 1}) {
			t.Errorf("endpoints of x = %v, want {Ready:3 NotReady:1} (IPv4 slices only, y's and the other namespace's not counted)", got)
		}
		gotY, err := a.serviceEndpoints(f.ctx, f.liveService(a, f.ns, "y"))
		if err != nil {
			t.Fatalf("counting the endpoints of y: %v", err)
		}
		if gotY == nil || *gotY != (v1alpha1.EndpointsStatus{Ready: 3, NotReady: 2}) {
			t.Errorf("endpoints of y = %v, want {Ready:3 NotReady:2}: only y's own slice", gotY)
		}
	})

	t.Run("ReadLive", func(t *testing.T) {
		f := f.with(t)
		xID, yID := serviceID(f.ns, "x"), serviceID(f.ns, "y")
		results := []Result{appliedResult(xID), appliedResult(yID)}
		live, err := a.ReadLive(f.ctx, results)
		if err != nil {
			t.Fatalf("reading live state: %v", err)
		}
		if live.Objects[xID] == nil || live.Objects[yID] == nil {
			t.Errorf("live objects %v, want both Services", live.Objects)
		}
		if got := live.Endpoints[xID]; got == nil || *got != (v1alpha1.EndpointsStatus{Ready: 3, NotReady: 1}) {
			t.Errorf("live endpoints of x = %v, want {Ready:3 NotReady:1}", got)
		}
		if got := live.Endpoints[yID]; got == nil || *got != (v1alpha1.EndpointsStatus{Ready: 3, NotReady: 2}) {
			t.Errorf("live endpoints of y = %v, want {Ready:3 NotReady:2}", got)
		}
		if len(live.Endpoints) != 2 {
			t.Errorf("live endpoints for %d objects, want 2: %v", len(live.Endpoints), live.Endpoints)
		}
	})

	t.Run("a Service whose result is not Applied is not read", func(t *testing.T) {
		f := f.with(t)
		xID := serviceID(f.ns, "x")
		live, err := a.ReadLive(f.ctx, []Result{{Identifier: xID, Reason: v1alpha1.ReasonNotOwned}})
		if err != nil {
			t.Fatalf("reading live state: %v", err)
		}
		if _, ok := live.Endpoints[xID]; ok {
			t.Errorf("endpoints read for a Service that was not applied")
		}
	})
}

// TestServiceEndpointsFamilies: the family with most endpoints counts (the
// same pods are listed once per family of a dual-stack Service, so summing
// would count each twice), and a Service without slices has zero
// endpoints, reported as such.
func TestServiceEndpointsFamilies(t *testing.T) {
	f := newFixture(t)
	a := New(nil, f.writer(), Options{Kinds: WorkKinds})

	f.createService(service(f.ns, "none", "none"))
	got, err := a.serviceEndpoints(f.ctx, f.liveService(a, f.ns, "none"))
	if err != nil {
		t.Fatalf("counting the endpoints of none: %v", err)
	}
	if got == nil || *got != (v1alpha1.EndpointsStatus{}) {
		t.Errorf("endpoints of a Service without slices = %v, want {0 0}", got)
	}

	f.createService(service(f.ns, "v6", "v6"))
	f.createSlice(f.ns, "v6-v4", "v6", discoveryv1.AddressTypeIPv4, endpoint("10.4.0.1", nil))
	f.createSlice(f.ns, "v6-v6", "v6", discoveryv1.AddressTypeIPv6,
		endpoint("fd00::4:1", nil), endpoint("fd00::4:2", ptr.To(false)), endpoint("fd00::4:3", ptr.To(false)))
	got, err = a.serviceEndpoints(f.ctx, f.liveService(a, f.ns, "v6"))
	if err != nil {
		t.Fatalf("counting the endpoints of v6: %v", err)
	}
	if got == nil || *got != (v1alpha1.EndpointsStatus{Ready: 1, NotReady: 2}) {
		t.Errorf("endpoints of v6 = %v, want the IPv6 family's {Ready:1 NotReady:2}", got)
	}

	// Families of equal size (one slice caught mid-update): either
	// family's numbers, never their sum.
	f.createService(service(f.ns, "tie", "tie"))
	f.createSlice(f.ns, "tie-v4", "tie", discoveryv1.AddressTypeIPv4, endpoint("10.5.0.1", nil), endpoint("10.5.0.2", nil))
	f.createSlice(f.ns, "tie-v6", "tie", discoveryv1.AddressTypeIPv6, endpoint("fd00::5:1", nil), endpoint("fd00::5:2", ptr.To(false)))
	svc := f.liveService(a, f.ns, "tie")
	seen := map[v1alpha1.EndpointsStatus]bool{}
	for range 20 {
		got, err := a.serviceEndpoints(f.ctx, svc)
		if err != nil {
			t.Fatalf("counting the endpoints of tie: %v", err)
		}
		if *got != (v1alpha1.EndpointsStatus{Ready: 2}) && *got != (v1alpha1.EndpointsStatus{Ready: 1, NotReady: 1}) {
			t.Fatalf("endpoints of tie = %+v, want one family's numbers", *got)
		}
		seen[*got] = true
	}
	if len(seen) > 1 {
		t.Logf("note: with families of equal size the count depends on map order: %v", seen)
	}
}

// TestStatusReportsServiceEndpoints: Apply then Status of a Work with a
// Deployment and a Service puts the Service's endpoints on its manifest
// status, and none on the Deployment's.
func TestStatusReportsServiceEndpoints(t *testing.T) {
	f := newFixture(t)
	a := f.recordingApplier(Options{Kinds: WorkKinds})
	work := newWork(t, f.work("web"), 1, deployment(f.ns, "web", "web:1", 2), service(f.ns, "web", "web"))
	results := f.apply(a, work)

	f.createSlice(f.ns, "web-abcde", "web", discoveryv1.AddressTypeIPv4,
		endpoint("10.6.0.1", ptr.To(true)), endpoint("10.6.0.2", ptr.To(false)))

	st, _, err := a.Status(f.ctx, work, results, time.Now())
	if err != nil {
		t.Fatalf("computing status: %v", err)
	}
	if len(st.Manifests) != 2 {
		t.Fatalf("%d manifest statuses, want 2: %+v", len(st.Manifests), st.Manifests)
	}
	for _, m := range st.Manifests {
		switch m.Kind {
		case "Deployment":
			if m.Endpoints != nil {
				t.Errorf("endpoints %+v on the Deployment", *m.Endpoints)
			}
		case "Service":
			if m.Endpoints == nil || *m.Endpoints != (v1alpha1.EndpointsStatus{Ready: 1, NotReady: 1}) {
				t.Errorf("endpoints of the Service = %v, want {Ready:1 NotReady:1}", m.Endpoints)
			}
		default:
			t.Errorf("unexpected manifest %+v", m.ResourceIdentifier)
		}
	}
}
