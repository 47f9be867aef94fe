package leastprivilege

import (
	"context"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/test/deployrbac"
)

const systemNS = "flotilla-system"

// access is one question to the RBAC authorizer and its expected answer.
type access struct {
	verb, group, resource, namespace, name string
	want                                   bool
}

func (a access) String() string {
	s := a.verb + " " + a.resource
	if a.group != "" {
		s += "." + a.group
	}
	if a.name != "" {
		s += " " + a.name
	}
	if a.namespace != "" {
		s += " in " + a.namespace
	} else {
		s += " (cluster-wide)"
	}
	return s
}

// checkAccess asks, for each of table, whether service account
// flotilla-system/sa may do it, and fails for every answer not wanted.
func checkAccess(t *testing.T, c client.Client, sa string, table []access) {
	t.Helper()
	ctx := context.Background()
	for _, a := range table {
		got, err := deployrbac.Allowed(ctx, c, systemNS, sa, &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: a.resource, Namespace: a.namespace, Name: a.name,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got != a.want {
			t.Errorf("%s may %s: %v, want %v", sa, a, got, a.want)
		}
	}
}

// adminClient returns an admin client of the package's apiserver.
func adminClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(sharedEnv.Config(t), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAgentRBAC installs deploy/agent's RBAC and checks the agent's
// service account: its Lease, events, ConfigMaps and its two identity
// Secrets only in its own namespace, no Lease in kube-node-lease, no other
// Secret anywhere, Deployments
// in any namespace (a Work may target any namespace the hub allows).
func TestAgentRBAC(t *testing.T) {
	ctx := context.Background()
	c := adminClient(t)
	if _, err := deployrbac.ServiceAccountToken(ctx, sharedEnv.Config(t), systemNS, "flotilla-agent"); err != nil {
		t.Fatal(err)
	}
	if err := deployrbac.Install(ctx, c, deployrbac.Agent); err != nil {
		t.Fatal(err)
	}
	checkAccess(t, c, "flotilla-agent", []access{
		// Leader election: its own Lease only.
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: systemNS, name: "flotilla-agent.flotilla.dev", want: true},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: systemNS, want: true},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: "kube-node-lease", name: "node-1", want: false},
		{verb: "create", group: "coordination.k8s.io", resource: "leases", namespace: "kube-node-lease", want: false},
		{verb: "list", group: "coordination.k8s.io", resource: "leases", want: false},
		// Secrets, ConfigMaps and ServiceAccounts: every verb in every
		// namespace, since a MyApp's dependencies are copied into its
		// target namespace, and the applier must read what is there
		// before it writes (RBAC cannot limit a verb to labelled objects).
		// The agent's cache holds only the flotilla.dev/dependency ones;
		// its namespace policy, not RBAC, keeps it out of kube-system.
		{verb: "get", resource: "secrets", namespace: systemNS, name: "flotilla-agent-credentials", want: true},
		{verb: "update", resource: "secrets", namespace: systemNS, name: "flotilla-agent-credentials", want: true},
		{verb: "delete", resource: "secrets", namespace: systemNS, name: "flotilla-agent-bootstrap", want: true},
		{verb: "create", resource: "secrets", namespace: systemNS, want: true},
		{verb: "create", resource: "secrets", namespace: "tenant-a", want: true},
		{verb: "get", resource: "secrets", namespace: "tenant-a", name: "db-password", want: true},
		{verb: "list", resource: "secrets", want: true},
		{verb: "watch", resource: "secrets", want: true},
		{verb: "create", resource: "configmaps", namespace: systemNS, want: true},
		{verb: "list", resource: "configmaps", namespace: systemNS, want: true},
		{verb: "delete", resource: "configmaps", namespace: systemNS, name: "flotilla-applied-x", want: true},
		{verb: "patch", resource: "configmaps", namespace: "tenant-a", name: "app-config", want: true},
		{verb: "list", resource: "configmaps", want: true},
		{verb: "patch", resource: "serviceaccounts", namespace: "tenant-a", name: "web", want: true},
		{verb: "delete", resource: "serviceaccounts", namespace: "tenant-a", name: "web", want: true},
		// Not pods: the Deployment controller makes them.
		{verb: "create", resource: "pods", namespace: "tenant-a", want: false},
		// Events: only where its Lease is.
		{verb: "create", resource: "events", namespace: systemNS, want: true},
		{verb: "create", resource: "events", namespace: "default", want: false},
		{verb: "create", group: "events.k8s.io", resource: "events", namespace: "tenant-a", want: false},
		// The workload: Deployments anywhere.
		{verb: "patch", group: "apps", resource: "deployments", namespace: "tenant-a", name: "web", want: true},
		{verb: "create", group: "apps", resource: "deployments", namespace: "tenant-b", want: true},
		{verb: "watch", group: "apps", resource: "deployments", want: true},
		// Nothing else of apps, nor RBAC.
		{verb: "create", group: "apps", resource: "daemonsets", namespace: "tenant-a", want: false},
		{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings", want: false},
		// Secure metrics: the reviews that guard /metrics.
		{verb: "create", group: "authentication.k8s.io", resource: "tokenreviews", want: true},
		{verb: "create", group: "authorization.k8s.io", resource: "subjectaccessreviews", want: true},
	})
}

// TestAgentCannotTouchNodeLeases makes real requests with the agent's
// own token: updating a node's heartbeat Lease in kube-node-lease is
// forbidden and leaves it as it was, while the agent's own Lease in its
// namespace is created and updated, so the refusal is the RBAC's and not a
// broken client.
func TestAgentCannotTouchNodeLeases(t *testing.T) {
	ctx := context.Background()
	admin := adminClient(t)
	if err := deployrbac.Install(ctx, admin, deployrbac.Agent); err != nil {
		t.Fatal(err)
	}
	cfg, err := deployrbac.ServiceAccountConfig(ctx, sharedEnv.Config(t), systemNS, "flotilla-agent")
	if err != nil {
		t.Fatal(err)
	}
	agent, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"kube-node-lease"} {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	nodeLease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: "node-1"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-1"), LeaseDurationSeconds: ptr.To[int32](40)},
	}
	if err := admin.Create(ctx, nodeLease); err != nil {
		t.Fatal(err)
	}

	stolen := nodeLease.DeepCopy()
	stolen.Spec.HolderIdentity = ptr.To("flotilla-agent")
	if err := agent.Update(ctx, stolen); !apierrors.IsForbidden(err) {
		t.Fatalf("the agent updating kube-node-lease/node-1: err = %v, want Forbidden", err)
	}
	if err := agent.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-node-lease", Name: "flotilla-agent"}}); !apierrors.IsForbidden(err) {
		t.Fatalf("the agent creating a Lease in kube-node-lease: err = %v, want Forbidden", err)
	}
	got := &coordinationv1.Lease{}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(nodeLease), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.HolderIdentity == nil || *got.Spec.HolderIdentity != "node-1" || got.ResourceVersion != nodeLease.ResourceVersion {
		t.Errorf("kube-node-lease/node-1 changed after the refused update: holder %v, resourceVersion %s (was %s)", got.Spec.HolderIdentity, got.ResourceVersion, nodeLease.ResourceVersion)
	}
	var claims corev1.PersistentVolumeClaimList
	if err := agent.List(ctx, &claims, client.InNamespace("default")); !apierrors.IsForbidden(err) {
		t.Errorf("the agent listing PersistentVolumeClaims in default: err = %v, want Forbidden", err)
	}

	// The positive control: its own Lease, at home.
	own := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: systemNS, Name: "flotilla-agent.flotilla.dev"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("agent-0"), LeaseDurationSeconds: ptr.To[int32](5)},
	}
	if err := agent.Create(ctx, own); err != nil {
		t.Fatalf("the agent creating its own Lease: %v", err)
	}
	own.Spec.HolderIdentity = ptr.To("agent-1")
	if err := agent.Update(ctx, own); err != nil {
		t.Fatalf("the agent updating its own Lease: %v", err)
	}
}

// TestHubRBAC installs deploy/hub's RBAC and checks the hub's service
// account: its two webhook configurations by name (get, update, patch),
// no create of any and no write to another's; its Lease and ConfigMaps at
// home only; Secrets at home only, by name (revision key, hub CA,
// bootstrap tokens), never listed; of CSR signers only its own.
func TestHubRBAC(t *testing.T) {
	ctx := context.Background()
	c := adminClient(t)
	if _, err := deployrbac.ServiceAccountToken(ctx, sharedEnv.Config(t), systemNS, "flotilla-hub"); err != nil {
		t.Fatal(err)
	}
	if err := deployrbac.Install(ctx, c, deployrbac.Hub); err != nil {
		t.Fatal(err)
	}
	const adm = "admissionregistration.k8s.io"
	checkAccess(t, c, "flotilla-hub", []access{
		{verb: "create", group: adm, resource: "validatingwebhookconfigurations", want: false},
		{verb: "create", group: adm, resource: "mutatingwebhookconfigurations", want: false},
		{verb: "create", group: adm, resource: "validatingwebhookconfigurations", name: "flotilla-hub", want: false},
		{verb: "update", group: adm, resource: "validatingwebhookconfigurations", name: "another-operator", want: false},
		{verb: "patch", group: adm, resource: "mutatingwebhookconfigurations", name: "another-operator", want: false},
		{verb: "delete", group: adm, resource: "validatingwebhookconfigurations", name: "flotilla-hub", want: false},
		{verb: "list", group: adm, resource: "validatingwebhookconfigurations", want: false},
		{verb: "update", group: adm, resource: "validatingwebhookconfigurations", name: "flotilla-hub", want: true},
		{verb: "patch", group: adm, resource: "mutatingwebhookconfigurations", name: "flotilla-hub", want: true},
		{verb: "get", group: adm, resource: "mutatingwebhookconfigurations", name: "flotilla-hub", want: true},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: systemNS, name: "flotilla-hub.flotilla.dev", want: true},
		{verb: "update", group: "coordination.k8s.io", resource: "leases", namespace: "kube-node-lease", name: "node-1", want: false},
		{verb: "create", resource: "configmaps", namespace: systemNS, want: true},
		{verb: "create", resource: "configmaps", namespace: "tenant-a", want: false},
		// Joining (hub/internal/bootstrap) reads and updates the bootstrap
		// token Secrets, flotilla-token-<id>, whose names it cannot know
		// in advance, and the hub CA Secret: update by name at home.
		// MyApps' dependencies are read (get, and a metadata-only
		// list/watch) in every namespace, never written.
		{verb: "get", resource: "secrets", namespace: systemNS, name: "flotilla-token-abcdef", want: true},
		{verb: "update", resource: "secrets", namespace: systemNS, name: "flotilla-token-abcdef", want: true},
		{verb: "get", resource: "secrets", namespace: "tenant-a", name: "db-password", want: true},
		{verb: "list", resource: "secrets", want: true},
		{verb: "get", resource: "serviceaccounts", namespace: "tenant-a", name: "web", want: true},
		{verb: "update", resource: "secrets", namespace: "tenant-a", name: "anything", want: false},
		{verb: "patch", resource: "configmaps", namespace: "tenant-a", name: "app-config", want: false},
		{verb: "delete", resource: "secrets", namespace: systemNS, name: "flotilla-token-abcdef", want: false},
		{verb: "create", resource: "serviceaccounts", namespace: "tenant-a", want: false},
		// The agent certificate signer: its own signer name only.
		{verb: "sign", group: "certificates.k8s.io", resource: "signers", name: "flotilla.dev/agent", want: true},
		{verb: "approve", group: "certificates.k8s.io", resource: "signers", name: "flotilla.dev/agent", want: true},
		{verb: "sign", group: "certificates.k8s.io", resource: "signers", name: "kubernetes.io/kube-apiserver-client", want: false},
		{verb: "approve", group: "certificates.k8s.io", resource: "signers", name: "kubernetes.io/kube-apiserver-client", want: false},
		// The revision key (hub/setup: EnsureRevisionKey): that one
		// Secret, at home only.
		{verb: "get", resource: "secrets", namespace: systemNS, name: "flotilla-revision-key", want: true},
		{verb: "create", resource: "secrets", namespace: systemNS, want: true},
		{verb: "create", resource: "secrets", namespace: "tenant-a", want: false},
		// What the hub's controllers need cluster-wide stays granted.
		{verb: "create", group: "flotilla.dev", resource: "works", namespace: "flotilla-member-1", want: true},
		{verb: "create", resource: "events", namespace: "tenant-a", want: true},
		{verb: "create", group: "authentication.k8s.io", resource: "tokenreviews", want: true},
		{verb: "create", group: "authorization.k8s.io", resource: "subjectaccessreviews", want: true},
	})
}

// TestHubCannotWriteOtherWebhooks makes real requests with the hub's own
// token: creating a ValidatingWebhookConfiguration and updating another
// operator's are forbidden and leave nothing behind, while its own (as
// deploy/hub/webhook.yaml ships it) may be patched.
func TestHubCannotWriteOtherWebhooks(t *testing.T) {
	ctx := context.Background()
	admin := adminClient(t)
	if err := deployrbac.Install(ctx, admin, deployrbac.Hub); err != nil {
		t.Fatal(err)
	}
	cfg, err := deployrbac.ServiceAccountConfig(ctx, sharedEnv.Config(t), systemNS, "flotilla-hub")
	if err != nil {
		t.Fatal(err)
	}
	hub, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	other := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "another-operator", Labels: map[string]string{"owner": "another-operator"}},
	}
	if err := admin.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	own := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-hub"}}
	if err := admin.Create(ctx, own); err != nil {
		t.Fatal(err)
	}

	evil := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-hub-evil"}}
	if err := hub.Create(ctx, evil); !apierrors.IsForbidden(err) {
		t.Fatalf("the hub creating a ValidatingWebhookConfiguration: err = %v, want Forbidden", err)
	}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(evil), evil); !apierrors.IsNotFound(err) {
		t.Errorf("after the refused create, %s: err = %v, want NotFound", evil.Name, err)
	}
	changed := other.DeepCopy()
	changed.Labels["owner"] = "flotilla"
	if err := hub.Update(ctx, changed); !apierrors.IsForbidden(err) {
		t.Fatalf("the hub updating another's ValidatingWebhookConfiguration: err = %v, want Forbidden", err)
	}
	got := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(other), got); err != nil {
		t.Fatal(err)
	}
	if got.Labels["owner"] != "another-operator" || got.ResourceVersion != other.ResourceVersion {
		t.Errorf("another-operator's configuration changed after the refused update: labels %v", got.Labels)
	}

	// The positive control: its own, by name.
	patch := client.MergeFrom(own.DeepCopy())
	own.Labels = map[string]string{"patched-by": "flotilla-hub"}
	if err := hub.Patch(ctx, own, patch); err != nil {
		t.Fatalf("the hub patching its own ValidatingWebhookConfiguration: %v", err)
	}
}
