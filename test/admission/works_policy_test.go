package admission

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

// The identities the test plays.
const (
	hubUser   = "system:serviceaccount:flotilla-system:flotilla-hub"
	alice     = "alice"
	nsCleanup = "system:serviceaccount:kube-system:namespace-controller"
)

// policyFile is deploy/hub/works_admission_policy.yaml, found beside the
// CRDs envtestenv installs.
func policyFile() string {
	return filepath.Join(envtestenv.CRDDir(), "..", "works_admission_policy.yaml")
}

// readPolicy decodes the policy and its binding from the shipped file.
func readPolicy(t *testing.T) (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding) {
	t.Helper()
	raw, err := os.ReadFile(policyFile())
	if err != nil {
		t.Fatal(err)
	}
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	var binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		switch meta.Kind {
		case "ValidatingAdmissionPolicy":
			policy = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			err = yaml.UnmarshalStrict(doc, policy)
		case "ValidatingAdmissionPolicyBinding":
			binding = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			err = yaml.UnmarshalStrict(doc, binding)
		case "":
			continue
		default:
			t.Fatalf("%s holds an unexpected %s", policyFile(), meta.Kind)
		}
		if err != nil {
			t.Fatalf("decoding %s from %s: %v", meta.Kind, policyFile(), err)
		}
	}
	if policy == nil || binding == nil {
		t.Fatalf("%s must hold a ValidatingAdmissionPolicy and its binding", policyFile())
	}
	return policy, binding
}

// clients are the test's clients, one per identity.
type clients struct {
	admin, hub, alice, nsCleanup client.Client
}

func newClient(t *testing.T, cfg *rest.Config, user string, groups ...string) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, flotillav1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	cfg = rest.CopyConfig(cfg)
	if user != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func work(namespace, name string) *flotillav1.Work {
	return &flotillav1.Work{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: flotillav1.WorkSpec{Manifests: []flotillav1.Manifest{{RawExtension: runtime.RawExtension{
			Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"kube-system"}}`),
		}}}},
	}
}

// TestOnlyTheHubWritesWorks installs deploy/hub's Work admission policy
// and checks, with real RBAC that lets alice do everything to Works, that
// alice (and a cluster admin) can neither create, update, update the
// status of, nor delete a Work, that the refusal says who may, and that
// the hub's service account, refused nothing, still can; the namespace
// controller may delete a Work but not create one.
func TestOnlyTheHubWritesWorks(t *testing.T) {
	cfg := sharedEnv.Config(t)
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{envtestenv.CRDDir()}, ErrorIfPathMissing: true}); err != nil {
		t.Fatalf("installing the CRDs: %v", err)
	}
	ctx := context.Background()
	cs := clients{
		admin:     newClient(t, cfg, ""),
		hub:       newClient(t, cfg, hubUser, "system:serviceaccounts", "system:serviceaccounts:flotilla-system"),
		alice:     newClient(t, cfg, alice),
		nsCleanup: newClient(t, cfg, nsCleanup, "system:serviceaccounts", "system:serviceaccounts:kube-system"),
	}
	const ns = "flotilla-cluster-member-1"
	mustCreate(t, cs.admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	// alice, the hub and the namespace controller may do everything to
	// Works as far as RBAC goes, so every refusal below is the policy's.
	mustCreate(t, cs.admin, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "works-everything"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"flotilla.dev"}, Resources: []string{"works", "works/status"}, Verbs: []string{"*"}}},
	})
	mustCreate(t, cs.admin, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "works-everything"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "works-everything"},
		Subjects: []rbacv1.Subject{
			{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: alice},
			{Kind: "ServiceAccount", Namespace: "flotilla-system", Name: "flotilla-hub"},
			{Kind: "ServiceAccount", Namespace: "kube-system", Name: "namespace-controller"},
		},
	})
	// A Work the hub wrote before the policy, for the updates below.
	mustCreate(t, cs.admin, work(ns, "team-a.web"))

	policy, binding := readPolicy(t)
	mustCreate(t, cs.admin, policy)
	mustCreate(t, cs.admin, binding)
	t.Cleanup(func() {
		// Other tests of the package share the apiserver.
		_ = cs.admin.Delete(ctx, binding)
		_ = cs.admin.Delete(ctx, policy)
	})

	// The apiserver enforces a new policy once its policy informer has
	// seen it and the binding: until then alice's probe is admitted (and
	// left behind, harmlessly).
	probe := 0
	testutil.Eventually(t, "the Work admission policy refusing alice", 30*time.Second, func() error {
		probe++
		err := cs.alice.Create(ctx, work(ns, fmt.Sprintf("probe-%d", probe)))
		if err == nil {
			return errors.New("alice's Work was admitted")
		}
		if !strings.Contains(err.Error(), "only the Flotilla hub") {
			return fmt.Errorf("alice refused, but not by the policy: %w", err)
		}
		return nil
	}, testutil.Every(200*time.Millisecond))

	wantRefused := func(t *testing.T, what, operation string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s was admitted", what)
		}
		if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("%s: error %v is neither Forbidden nor Invalid", what, err)
		}
		for _, s := range []string{"only the Flotilla hub (" + hubUser + ") may create, update or delete Works", "may not " + operation} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q does not contain %q", what, err, s)
			}
		}
	}

	t.Run("alice is refused every write", func(t *testing.T) {
		err := cs.alice.Create(ctx, work(ns, "alice.web"))
		wantRefused(t, "alice creating a Work", "CREATE", err)
		if !strings.Contains(err.Error(), "alice may not CREATE") {
			t.Errorf("the refusal does not name alice: %v", err)
		}

		w := &flotillav1.Work{}
		if err := cs.alice.Get(ctx, client.ObjectKey{Namespace: ns, Name: "team-a.web"}, w); err != nil {
			t.Fatalf("alice may still read Works: %v", err)
		}
		w.Spec.Manifests[0].Raw = []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"y","namespace":"kube-system"}}`)
		wantRefused(t, "alice updating a Work", "UPDATE Work "+ns+"/team-a.web", cs.alice.Update(ctx, w))

		w = &flotillav1.Work{}
		_ = cs.alice.Get(ctx, client.ObjectKey{Namespace: ns, Name: "team-a.web"}, w)
		w.Status.Conditions = []metav1.Condition{{Type: flotillav1.ConditionApplied, Status: metav1.ConditionTrue, Reason: flotillav1.ReasonApplied, Message: "forged", LastTransitionTime: metav1.Now()}}
		wantRefused(t, "alice updating a Work's status", "UPDATE the status of Work "+ns+"/team-a.web", cs.alice.Status().Update(ctx, w))

		wantRefused(t, "alice deleting a Work", "DELETE", cs.alice.Delete(ctx, work(ns, "team-a.web")))
	})

	t.Run("a cluster admin is refused too", func(t *testing.T) {
		wantRefused(t, "the admin creating a Work", "CREATE", cs.admin.Create(ctx, work(ns, "admin.web")))
	})

	t.Run("the namespace controller may delete but not create", func(t *testing.T) {
		wantRefused(t, "the namespace controller creating a Work", "CREATE", cs.nsCleanup.Create(ctx, work(ns, "nsc.web")))
		if err := cs.nsCleanup.Delete(ctx, work(ns, "probe-1")); err != nil {
			t.Fatalf("the namespace controller deleting a Work: %v", err)
		}
	})

	t.Run("the hub, after all those refusals, still writes Works", func(t *testing.T) {
		w := work(ns, "team-b.api")
		if err := cs.hub.Create(ctx, w); err != nil {
			t.Fatalf("the hub creating a Work: %v", err)
		}
		w.Spec.DeletionPolicy = flotillav1.DeletionPolicyOrphan
		if err := cs.hub.Update(ctx, w); err != nil {
			t.Fatalf("the hub updating a Work: %v", err)
		}
		w.Status.Conditions = []metav1.Condition{{Type: flotillav1.ConditionApplied, Status: metav1.ConditionTrue, Reason: flotillav1.ReasonApplied, Message: "applied", LastTransitionTime: metav1.Now()}}
		if err := cs.hub.Status().Update(ctx, w); err != nil {
			t.Fatalf("the hub updating a Work's status: %v", err)
		}
		got := &flotillav1.Work{}
		if err := cs.admin.Get(ctx, client.ObjectKeyFromObject(w), got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.DeletionPolicy != flotillav1.DeletionPolicyOrphan || len(got.Status.Conditions) != 1 {
			t.Errorf("the hub's writes did not land: %+v", got)
		}
		if err := cs.hub.Delete(ctx, w); err != nil {
			t.Fatalf("the hub deleting a Work: %v", err)
		}
		orig := &flotillav1.Work{}
		if err := cs.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "team-a.web"}, orig); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(orig.Spec.Manifests[0].Raw), `"name":"x"`) {
			t.Errorf("alice's refused update changed the Work: %s", orig.Spec.Manifests[0].Raw)
		}
	})
}

func mustCreate(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}
