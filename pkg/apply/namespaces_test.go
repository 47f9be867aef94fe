package apply

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestNamespacePolicyRefusal(t *testing.T) {
	deploy := func(ns string) v1alpha1.ResourceIdentifier { return deploymentID(ns, "web") }
	namespace := func(name string) v1alpha1.ResourceIdentifier {
		return v1alpha1.ResourceIdentifier{Version: "v1", Kind: "Namespace", Name: name}
	}
	crb := v1alpha1.ResourceIdentifier{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRoleBinding", Name: "admin"}
	teams := NamespacePolicy{Denied: []string{"kube-*", "team-secret"}, Allowed: []string{"team-*", "shared"}}
	withClusterScoped := DefaultNamespacePolicy()
	withClusterScoped.ClusterScoped = true
	for _, tc := range []struct {
		name   string
		policy NamespacePolicy
		id     v1alpha1.ResourceIdentifier
		// want is "" for allowed, else words the refusal must contain.
		want []string
	}{
		{"default: an ordinary namespace", DefaultNamespacePolicy(), deploy("shop"), nil},
		{"default: kube-system", DefaultNamespacePolicy(), deploy("kube-system"), []string{"kube-system", FlagDeniedNamespaces, `"kube-system"`}},
		{"default: kube-public", DefaultNamespacePolicy(), deploy("kube-public"), []string{"kube-public", FlagDeniedNamespaces}},
		{"default: kube-node-lease", DefaultNamespacePolicy(), deploy("kube-node-lease"), []string{"kube-node-lease", FlagDeniedNamespaces}},
		{"default: kube-other is not in the list", DefaultNamespacePolicy(), deploy("kube-other"), nil},
		{"default: a cluster-scoped object", DefaultNamespacePolicy(), crb, []string{"ClusterRoleBinding admin", "cluster-scoped"}},
		{"default: a Namespace object", DefaultNamespacePolicy(), namespace("shop"), []string{"Namespace shop", "cluster-scoped"}},
		{"cluster-scoped allowed: a ClusterRoleBinding", withClusterScoped, crb, nil},
		{"cluster-scoped allowed: a Namespace is checked by name", withClusterScoped, namespace("kube-system"), []string{"kube-system", FlagDeniedNamespaces}},
		{"cluster-scoped allowed: an ordinary Namespace", withClusterScoped, namespace("shop"), nil},
		{"allow list: matching glob", teams, deploy("team-a"), nil},
		{"allow list: matching name", teams, deploy("shared"), nil},
		{"allow list: not matching", teams, deploy("other"), []string{"other", FlagAllowedNamespaces, "team-*,shared"}},
		{"allow list: denial wins", teams, deploy("team-secret"), []string{"team-secret", FlagDeniedNamespaces, `"team-secret"`}},
		{"allow list: denied by glob", teams, deploy("kube-system"), []string{FlagDeniedNamespaces, `"kube-*"`}},
		{"zero policy: allows namespaced objects", NamespacePolicy{}, deploy("kube-system"), nil},
		{"zero policy: refuses cluster-scoped ones", NamespacePolicy{}, crb, []string{"cluster-scoped"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.policy.Refusal(tc.id)
			if tc.want == nil {
				if got != "" {
					t.Fatalf("Refusal(%s) = %q, want it allowed", describe(tc.id), got)
				}
				return
			}
			if got == "" {
				t.Fatalf("Refusal(%s) allows it, want a refusal", describe(tc.id))
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("Refusal(%s) = %q, want it to contain %q", describe(tc.id), got, w)
				}
			}
		})
	}
}

func TestParsePodSecurity(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  v1alpha1.PodSecurityLevel
	}{
		{"", v1alpha1.PodSecurityBaseline},
		{"privileged", v1alpha1.PodSecurityPrivileged},
		{"baseline", v1alpha1.PodSecurityBaseline},
		{"restricted", v1alpha1.PodSecurityRestricted},
	} {
		if got, err := ParsePodSecurity("--default-pod-security", tc.value); err != nil || got != tc.want {
			t.Errorf("ParsePodSecurity(%q) = %q, %v; want %q", tc.value, got, err, tc.want)
		}
	}
	for _, bad := range []string{"Restricted", "strict", " baseline"} {
		_, err := ParsePodSecurity("--default-pod-security", bad)
		if err == nil || !strings.Contains(err.Error(), "--default-pod-security") || !strings.Contains(err.Error(), `"`+bad+`"`) {
			t.Errorf("ParsePodSecurity(%q) error = %v; want one naming the flag and the value", bad, err)
		}
	}
}

func TestCreatedNamespaceLabels(t *testing.T) {
	withLevel := func(l v1alpha1.PodSecurityLevel) *v1alpha1.Work {
		return &v1alpha1.Work{Spec: v1alpha1.WorkSpec{PodSecurity: l}}
	}
	for _, tc := range []struct {
		name    string
		work    *v1alpha1.Work
		def     v1alpha1.PodSecurityLevel
		fleet   string
		cluster string
		want    map[string]string
		wantErr string
	}{
		{"Work level wins", withLevel(v1alpha1.PodSecurityRestricted), v1alpha1.PodSecurityPrivileged, "f", "c", map[string]string{
			v1alpha1.LabelNamespaceCreated: "true", v1alpha1.LabelFleet: "f", v1alpha1.LabelCluster: "c",
			LabelPodSecurityEnforce: "restricted", LabelPodSecurityEnforceVersion: "latest",
		}, ""},
		{"applier default", withLevel(""), v1alpha1.PodSecurityPrivileged, "f", "c", map[string]string{
			v1alpha1.LabelNamespaceCreated: "true", v1alpha1.LabelFleet: "f", v1alpha1.LabelCluster: "c",
			LabelPodSecurityEnforce: "privileged", LabelPodSecurityEnforceVersion: "latest",
		}, ""},
		{"package default, no identity yet", withLevel(""), "", "", "", map[string]string{
			v1alpha1.LabelNamespaceCreated: "true",
			LabelPodSecurityEnforce:        "baseline", LabelPodSecurityEnforceVersion: "latest",
		}, ""},
		{"invalid Work level", withLevel("root"), "", "f", "c", nil, "spec.podSecurity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := createdNamespaceLabels(tc.work, tc.def, tc.fleet, tc.cluster)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(got, tc.want) {
				t.Fatalf("createdNamespaceLabels = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// conditionOf returns condition typ of st, failing the test without it.
func conditionOf(t *testing.T, st v1alpha1.WorkStatus, typ string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(st.Conditions, typ)
	if c == nil {
		t.Fatalf("status has no %s condition: %+v", typ, st.Conditions)
	}
	return *c
}

// assertDenied checks that results and err are a Work refused by the
// namespace policy, that its status says so with reason NamespaceDenied and
// a message containing want, and that every manifest was refused.
func assertDenied(t *testing.T, work *v1alpha1.Work, results []Result, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, ErrNamespaceDenied) {
		t.Fatalf("Apply error = %v, want one wrapping ErrNamespaceDenied", err)
	}
	if len(results) != len(work.Spec.Manifests) {
		t.Fatalf("%d results for %d manifests", len(results), len(work.Spec.Manifests))
	}
	for i, r := range results {
		if r.Reason != v1alpha1.ReasonNamespaceDenied || r.Object != nil {
			t.Errorf("result %d = %+v, want reason NamespaceDenied and no object", i, r)
		}
	}
	st := WorkStatus(work, results, Live{}, time.Now())
	applied, degraded := conditionOf(t, st, v1alpha1.ConditionApplied), conditionOf(t, st, v1alpha1.ConditionDegraded)
	if applied.Status != metav1.ConditionFalse || applied.Reason != v1alpha1.ReasonNamespaceDenied {
		t.Errorf("Applied = %s/%s, want False/NamespaceDenied", applied.Status, applied.Reason)
	}
	if degraded.Status != metav1.ConditionTrue || degraded.Reason != v1alpha1.ReasonNamespaceDenied {
		t.Errorf("Degraded = %s/%s, want True/NamespaceDenied", degraded.Status, degraded.Reason)
	}
	for _, w := range want {
		if !strings.Contains(applied.Message, w) {
			t.Errorf("Applied message %q does not name %q", applied.Message, w)
		}
	}
}

// namespaceExists says namespace name exists and is not being deleted.
func (f *fixture) namespaceExists(name string) (*corev1.Namespace, bool) {
	f.t.Helper()
	ns := &corev1.Namespace{}
	err := f.c.Get(f.ctx, client.ObjectKey{Name: name}, ns)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		f.t.Fatalf("getting namespace %s: %v", name, err)
	}
	return ns, ns.DeletionTimestamp == nil
}

// TestWorkIntoDeniedNamespaceIsRefusedWhole shows that a Work with one
// Deployment in kube-system and one in an allowed namespace applies
// neither (no partial apply) and is reported NamespaceDenied naming the
// namespace and the flag; that nothing was recorded for it; and that the
// refusal disturbs no one else: another Work on the same Applier applies.
func TestWorkIntoDeniedNamespaceIsRefusedWhole(t *testing.T) {
	f := newFixture(t)
	a := f.recordingApplier(Options{CreateNamespace: true})
	bad := newWork(t, f.work("bad"), 1,
		deployment(f.ns, "innocent", "web:1", 1),
		deployment("kube-system", f.ns+"-evil", "evil:1", 1))
	results, err := a.Apply(f.ctx, bad)
	assertDenied(t, bad, results, err, "kube-system", FlagDeniedNamespaces)
	if !strings.Contains(results[0].Message, "applied whole or not at all") {
		t.Errorf("the allowed manifest's message %q does not say why it was not applied", results[0].Message)
	}
	if f.exists("kube-system", f.ns+"-evil") {
		t.Errorf("a Deployment was created in kube-system")
	}
	if f.exists(f.ns, "innocent") {
		t.Errorf("the allowed half of a refused Work was applied")
	}
	if cm := f.recordOf(bad.Name); cm != nil {
		t.Errorf("a refused Work was recorded: %v", cm.Data)
	}
	if !a.NeedsApply(bad, nil) {
		t.Errorf("NeedsApply = false for a refused Work")
	}

	good := newWork(t, f.work("good"), 1, deployment(f.ns, "good", "web:1", 1))
	f.apply(a, good)
	if !f.exists(f.ns, "good") {
		t.Errorf("another Work on the same applier was not applied after a refusal")
	}

	// A cluster-scoped object refuses the Work the same way, before its
	// kind is even looked at.
	crb := &rbacv1.ClusterRoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: f.ns}},
	}
	escalate := newWork(t, f.work("escalate"), 1, deployment(f.ns, "escalate", "web:1", 1), crb)
	results, err = a.Apply(f.ctx, escalate)
	assertDenied(t, escalate, results, err, "ClusterRoleBinding "+f.ns+"-admin", "cluster-scoped")
	if err := f.c.Get(f.ctx, client.ObjectKey{Name: crb.Name}, &rbacv1.ClusterRoleBinding{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRoleBinding %s: get error %v, want NotFound", crb.Name, err)
	}
	if f.exists(f.ns, "escalate") {
		t.Errorf("the namespaced half of a Work with a cluster-scoped object was applied")
	}
	if !f.exists(f.ns, "good") {
		t.Errorf("the other Work's Deployment is gone")
	}
}

// TestAllowedNamespaces shows that with an allow list of team-* a Work
// into another namespace is refused naming --allowed-namespaces, and its
// namespace is not created although namespace creation is on, while a
// Work into a team namespace is applied and its namespace created.
func TestAllowedNamespaces(t *testing.T) {
	f := newFixture(t)
	a := f.recordingApplier(Options{CreateNamespace: true, Namespaces: &NamespacePolicy{Denied: DefaultDeniedNamespaces, Allowed: []string{"team-*"}}})
	other := "other-" + uniqueNamespace()
	refused := newWork(t, f.work("other"), 1, deployment(other, "web", "web:1", 1))
	results, err := a.Apply(f.ctx, refused)
	assertDenied(t, refused, results, err, "namespace "+other, FlagAllowedNamespaces, "team-*")
	if _, ok := f.namespaceExists(other); ok {
		t.Errorf("namespace %s was created for a refused Work", other)
	}

	team := "team-" + uniqueNamespace()
	f.apply(a, newWork(t, f.work("team"), 1, deployment(team, "web", "web:1", 1)))
	if !f.exists(team, "web") {
		t.Errorf("the Work into %s was not applied", team)
	}
}

// TestDeniedUpdateLeavesTheEarlierGenerationAlone shows what happens to a
// Work applied into an allowed namespace and then changed to reach into
// kube-system: the new generation is refused whole, so the member keeps
// the earlier generation exactly as it was (same object, same image, not
// deleted, still recorded), and deleting the Work still deletes it.
func TestDeniedUpdateLeavesTheEarlierGenerationAlone(t *testing.T) {
	f := newFixture(t)
	a := f.recordingApplier(Options{})
	name := f.work("web")
	f.apply(a, newWork(t, name, 1, deployment(f.ns, "web", "web:1", 1)))
	before := f.getDeployment(f.ns, "web")

	for _, tc := range []struct {
		name string
		work *v1alpha1.Work
	}{
		{"moved into kube-system", newWork(t, name, 2, deployment("kube-system", f.ns+"-web", "web:2", 1))},
		{"changed and extended into kube-system", newWork(t, name, 3,
			deployment(f.ns, "web", "web:3", 1), deployment("kube-system", f.ns+"-web", "web:3", 1))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := f.with(t)
			results, err := a.Apply(f.ctx, tc.work)
			assertDenied(t, tc.work, results, err, "kube-system")
			after := f.getDeployment(f.ns, "web")
			if after.UID != before.UID || after.DeletionTimestamp != nil || after.Generation != before.Generation {
				t.Errorf("the earlier generation's Deployment changed: uid %s -> %s, generation %d -> %d, deleting %v",
					before.UID, after.UID, before.Generation, after.Generation, after.DeletionTimestamp != nil)
			}
			if img := after.Spec.Template.Spec.Containers[0].Image; img != "web:1" {
				t.Errorf("image = %s, want web:1: a refused generation was partly applied", img)
			}
			if f.exists("kube-system", f.ns+"-web") {
				t.Errorf("a Deployment was created in kube-system")
			}
			if got := f.recordedObjects(name); len(got) != 1 || got[0].ResourceIdentifier != deploymentID(f.ns, "web") || got[0].UID != before.UID {
				t.Errorf("record = %+v, want only the earlier generation's Deployment with its UID", got)
			}
		})
	}

	deleted, err := a.Delete(f.ctx, name)
	if err != nil {
		t.Fatalf("deleting the Work: %v", err)
	}
	if len(deleted) != 1 || deleted[0] != deploymentID(f.ns, "web") {
		t.Errorf("deleted %+v, want the earlier generation's Deployment", deleted)
	}
	f.gone(f.ns, "web")
}

// TestCreatedNamespaceIsLabelled shows that a namespace Apply creates
// carries Flotilla's labels and Pod Security's, at the Work's
// spec.podSecurity or else the Applier's default, and that a namespace
// that already exists is not relabelled.
func TestCreatedNamespaceIsLabelled(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name     string
		level    v1alpha1.PodSecurityLevel
		defLevel v1alpha1.PodSecurityLevel
		want     string
	}{
		{"from the Work", v1alpha1.PodSecurityRestricted, "", "restricted"},
		{"the package default", "", "", "baseline"},
		{"the applier's default", "", v1alpha1.PodSecurityPrivileged, "privileged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := f.with(t)
			a := f.recordingApplier(Options{CreateNamespace: true, DefaultPodSecurity: tc.defLevel})
			ns := uniqueNamespace()
			work := newWork(t, f.work("web-"+ns), 1, deployment(ns, "web", "web:1", 1))
			work.Spec.PodSecurity = tc.level
			f.apply(a, work)
			created, ok := f.namespaceExists(ns)
			if !ok {
				t.Fatalf("namespace %s was not created", ns)
			}
			want := map[string]string{
				v1alpha1.LabelNamespaceCreated: "true", v1alpha1.LabelFleet: testFleet, v1alpha1.LabelCluster: testCluster,
				LabelPodSecurityEnforce: tc.want, LabelPodSecurityEnforceVersion: "latest",
			}
			got := maps.Clone(created.Labels)
			// The apiserver adds this one to every namespace.
			delete(got, corev1.LabelMetadataName)
			if !maps.Equal(got, want) {
				t.Errorf("labels of the created namespace = %v, want %v", got, want)
			}
		})
	}

	t.Run("an existing namespace is not relabelled", func(t *testing.T) {
		f := f.with(t)
		ns := uniqueNamespace()
		if err := f.c.Create(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{LabelPodSecurityEnforce: "privileged", "owner": "them"}}}); err != nil {
			t.Fatal(err)
		}
		before, _ := f.namespaceExists(ns)
		a := f.recordingApplier(Options{CreateNamespace: true})
		work := newWork(t, f.work("existing"), 1, deployment(ns, "web", "web:1", 1))
		work.Spec.PodSecurity = v1alpha1.PodSecurityRestricted
		f.apply(a, work)
		after, _ := f.namespaceExists(ns)
		if !maps.Equal(after.Labels, before.Labels) || after.ResourceVersion != before.ResourceVersion {
			t.Errorf("the existing namespace changed: labels %v -> %v, resourceVersion %s -> %s",
				before.Labels, after.Labels, before.ResourceVersion, after.ResourceVersion)
		}
	})
}

// TestNamespacesAreNeverDeleted shows that deleting a Work leaves the
// namespace Apply created for it; and that an Applier allowed to apply
// Namespace objects (cluster-scoped objects on, Namespace among its kinds)
// neither takes over nor deletes a namespace that existed before, and
// does not delete even a namespace its own Work's manifest created.
func TestNamespacesAreNeverDeleted(t *testing.T) {
	f := newFixture(t)

	t.Run("a namespace created for a Work", func(t *testing.T) {
		f := f.with(t)
		a := f.recordingApplier(Options{CreateNamespace: true})
		ns := uniqueNamespace()
		name := f.work("created-" + ns)
		f.apply(a, newWork(t, name, 1, deployment(ns, "web", "web:1", 1)))
		if _, err := a.Delete(f.ctx, name); err != nil {
			t.Fatalf("deleting the Work: %v", err)
		}
		f.gone(ns, "web")
		if _, ok := f.namespaceExists(ns); !ok {
			t.Errorf("namespace %s, created for the Work, was deleted with it", ns)
		}
	})

	namespaceKind := schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	nsManifest := func(name string) *corev1.Namespace {
		return &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: name}}
	}

	t.Run("a Namespace manifest is refused by default", func(t *testing.T) {
		f := f.with(t)
		a := f.recordingApplier(Options{Kinds: []schema.GroupVersionKind{DeploymentKind, namespaceKind}})
		ns := uniqueNamespace()
		work := newWork(t, f.work("nsdefault-"+ns), 1, nsManifest(ns))
		results, err := a.Apply(f.ctx, work)
		assertDenied(t, work, results, err, "Namespace "+ns, "cluster-scoped")
		if _, ok := f.namespaceExists(ns); ok {
			t.Errorf("namespace %s was created by a refused Work", ns)
		}
	})

	t.Run("Namespace manifests with cluster-scoped objects on", func(t *testing.T) {
		f := f.with(t)
		a := f.recordingApplier(Options{
			Kinds:      []schema.GroupVersionKind{DeploymentKind, namespaceKind},
			Namespaces: &NamespacePolicy{Denied: DefaultDeniedNamespaces, ClusterScoped: true},
		})
		existing := uniqueNamespace()
		f.createNamespace(existing)
		made := uniqueNamespace()
		name := f.work("nsmanifest-" + made)
		results, err := a.Apply(f.ctx, newWork(t, name, 1, nsManifest(existing), nsManifest(made)))
		if !errors.Is(err, ErrNotOwned) || results[0].Reason != v1alpha1.ReasonNotOwned {
			t.Fatalf("applying a Namespace manifest for an existing namespace: %v, %+v; want NotOwned", err, results)
		}
		if !results[1].Applied() {
			t.Fatalf("the Namespace manifest for a new namespace: %+v, want applied", results[1])
		}
		// kube-system stays refused as a Namespace object, too.
		sys := newWork(t, f.work("nssystem-"+made), 1, nsManifest("kube-system"))
		results, err = a.Apply(f.ctx, sys)
		assertDenied(t, sys, results, err, "kube-system", FlagDeniedNamespaces)

		if _, err := a.Delete(f.ctx, name); err != nil {
			t.Fatalf("deleting the Work: %v", err)
		}
		for _, ns := range []string{existing, made} {
			if _, ok := f.namespaceExists(ns); !ok {
				t.Errorf("namespace %s was deleted with the Work", ns)
			}
		}
		if cm := f.recordOf(name); cm != nil {
			t.Errorf("the deleted Work's record is still there: %v", cm.Data)
		}
	})
}
