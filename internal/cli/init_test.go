package cli

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/deploy"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/hubca"
)

// TestInit installs the hub into a real apiserver: every object of
// deploy/hub is there (with the image asked for, the webhooks trusting the
// hub CA), the join command carries a token that checks and the CA's pin;
// a second init changes none of it and prints a new token; without an
// address to print it fails clearly and creates no token; with a
// LoadBalancer Service it prints the LoadBalancer's address.
func TestInit(t *testing.T) {
	c := hubEnv.client(t)
	ctx := context.Background()
	ns := flotillav1.SystemNamespace
	t.Cleanup(func() {
		// The webhooks point at a hub that never runs here: remove them,
		// so no other test's MyApps meet them.
		for _, o := range []client.Object{
			&admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfiguration{},
		} {
			o.SetName("flotilla-hub")
			_ = c.Delete(ctx, o)
		}
	})
	opts := InitOptions{Namespace: ns, HubAddress: "hub.example.com:9443", Image: "registry.local/flotilla-hub:test",
		Token: bootstrap.Options{TTL: time.Hour, AutoAccept: true}, Now: time.Now()}
	first, err := Init(ctx, c, opts)
	if err != nil {
		t.Fatal(err)
	}

	objs, err := deploy.Objects(deploy.Hub, opts.Image)
	if err != nil {
		t.Fatal(err)
	}
	if first.Applied != len(objs) {
		t.Errorf("applied %d objects, deploy/hub has %d", first.Applied, len(objs))
	}
	versions := map[string]string{}
	for _, o := range objs {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), live); err != nil {
			t.Fatalf("%s %s was not installed: %v", o.GetKind(), objectName(o), err)
		}
		versions[o.GetKind()+"/"+objectName(o)] = live.GetResourceVersion()
	}
	if _, ok := versions["CustomResourceDefinition/memberclusters.flotilla.dev"]; !ok {
		t.Errorf("init applied no MemberCluster CRD: %v", versions)
	}
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: hubDeploymentName}, d); err != nil {
		t.Fatal(err)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; img != opts.Image {
		t.Errorf("hub image %q, want %q", img, opts.Image)
	}
	if args := d.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--serving-hosts=hub.example.com") {
		t.Errorf("hub args %q lack --serving-hosts=hub.example.com: its certificate would not name the address agents dial", args)
	}
	caSecret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: flotillav1.HubCASecretName}, caSecret); err != nil {
		t.Fatalf("the hub CA Secret: %v", err)
	}
	ca, err := hubca.FromSecret(caSecret)
	if err != nil {
		t.Fatal(err)
	}
	if first.CAHash != bootstrap.CAHash(ca.Cert) {
		t.Errorf("init printed CA hash %s, the hub CA's is %s", first.CAHash, bootstrap.CAHash(ca.Cert))
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: "flotilla-hub"}, mwc); err != nil {
		t.Fatal(err)
	}
	for _, h := range mwc.Webhooks {
		if string(h.ClientConfig.CABundle) != string(ca.CertPEM()) {
			t.Errorf("webhook %s: caBundle is not the hub CA", h.Name)
		}
	}
	for _, want := range []string{"--hub hub.example.com:9443", "--token " + first.Token.String(), "--ca-hash " + first.CAHash} {
		if !strings.Contains(first.JoinCommand, want) {
			t.Errorf("join command %q lacks %q", first.JoinCommand, want)
		}
	}
	tokenSecret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: bootstrap.SecretName(first.Token.ID)}, tokenSecret); err != nil {
		t.Fatalf("the token of the join command: %v", err)
	}
	if info, err := bootstrap.Check(tokenSecret, first.Token, "member-1", time.Now()); err != nil || !info.AutoAccept {
		t.Errorf("the printed token does not check (auto-accept %t): %v", info.AutoAccept, err)
	}

	// Again: nothing changes but a new token.
	second, err := Init(ctx, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), live); err != nil {
			t.Fatal(err)
		}
		if k := o.GetKind() + "/" + objectName(o); live.GetResourceVersion() != versions[k] {
			t.Errorf("the second init changed %s (resourceVersion %s -> %s)", k, versions[k], live.GetResourceVersion())
		}
	}
	if second.CAHash != first.CAHash {
		t.Errorf("the second init changed the CA: %s -> %s", first.CAHash, second.CAHash)
	}
	if second.Token.ID == first.Token.ID {
		t.Errorf("the second init printed the same token %s", first.Token.ID)
	}

	// No address: a clear error, and no token made for a command that
	// cannot be printed.
	before, err := ListTokens(ctx, c, ns)
	if err != nil {
		t.Fatal(err)
	}
	noAddr := opts
	noAddr.HubAddress = ""
	if _, err := Init(ctx, c, noAddr); err == nil || !strings.Contains(err.Error(), "--hub-address") {
		t.Errorf("init without an address: error %v, want one naming --hub-address", err)
	}
	after, err := ListTokens(ctx, c, ns)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("init without an address created a token (%d -> %d)", len(before), len(after))
	}

	// A LoadBalancer Service: its address is the one printed.
	lb := noAddr
	lb.ServiceType = corev1.ServiceTypeLoadBalancer
	if _, err := Init(ctx, c, lb); err == nil {
		t.Error("init before the LoadBalancer has an address: no error")
	}
	svc := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: hubServiceName}, svc); err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}
	if err := c.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	res, err := Init(ctx, c, lb)
	if err != nil {
		t.Fatal(err)
	}
	if res.HubAddress != "203.0.113.7:9443" {
		t.Errorf("hub address %q, want the LoadBalancer's 203.0.113.7:9443", res.HubAddress)
	}
}

// TestInitCommand runs init as a user does and checks what it prints.
func TestInitCommand(t *testing.T) {
	kc := hubEnv.kubeconfig(t)
	out, err := run(t, "--kubeconfig", kc, "init", "--hub-address", "10.0.0.1:9443", "--ttl", "2h", "--single-use")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := hubEnv.client(t)
		for _, o := range []client.Object{
			&admissionregistrationv1.MutatingWebhookConfiguration{}, &admissionregistrationv1.ValidatingWebhookConfiguration{},
		} {
			o.SetName("flotilla-hub")
			if err := c.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
				t.Error(err)
			}
		}
	})
	for _, want := range []string{"kubectl flotilla join --hub 10.0.0.1:9443 --token ", "--ca-hash sha256:", "valid for 2h0m0s, single use"} {
		if !strings.Contains(out, want) {
			t.Errorf("init printed\n%s\nwithout %q", out, want)
		}
	}
	if _, err := run(t, "--kubeconfig", kc, "init", "--hub-address", "10.0.0.1"); err == nil || !strings.Contains(err.Error(), "--hub-address") {
		t.Errorf("init --hub-address without a port: error %v, want one naming the flag", err)
	}
}

// TestInitHubOutsideCluster: for a hub run as a process, init applies
// the CRDs, namespace and RBAC, and nothing that points at an in-cluster
// hub (webhooks that would fail closed, the Works admission policy that
// admits only the in-cluster service account).
func TestInitHubOutsideCluster(t *testing.T) {
	c := hubEnv.client(t)
	ctx := context.Background()
	opts := InitOptions{Namespace: flotillav1.SystemNamespace, HubOutsideCluster: true, Now: time.Now()}
	if _, err := Init(ctx, c, opts); err == nil || !strings.Contains(err.Error(), "--hub-address") {
		t.Fatalf("init --hub-outside-cluster without --hub-address: %v, want an error naming --hub-address", err)
	}
	opts.HubAddress = "127.0.0.1:9443"
	res, err := Init(ctx, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := deploy.Objects(deploy.Hub, "")
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	kinds := map[string]bool{}
	for _, o := range objs {
		if !inClusterOnly[o.GetKind()] {
			want++
			kinds[o.GetKind()] = true
		}
	}
	if res.Applied != want {
		t.Errorf("applied %d objects, want the %d that are not in-cluster only", res.Applied, want)
	}
	for _, k := range []string{"CustomResourceDefinition", "ClusterRole", "Namespace"} {
		if !kinds[k] {
			t.Errorf("the hub base has no %s left to apply", k)
		}
	}
	for k := range inClusterOnly {
		if kinds[k] {
			t.Errorf("%s applied with --hub-outside-cluster", k)
		}
	}
	if !strings.Contains(res.JoinCommand, "--hub 127.0.0.1:9443") {
		t.Errorf("join command %q", res.JoinCommand)
	}
}
