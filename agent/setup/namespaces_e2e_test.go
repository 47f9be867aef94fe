package setup

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/apply"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// workInto is Work name for cluster east with one Deployment, deploy, in
// member namespace ns.
func workInto(name, ns, deploy string) *flotillav1.Work {
	raw := fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q,"namespace":%q},`+
		`"spec":{"replicas":1,"selector":{"matchLabels":{"app":%q}},"template":{"metadata":{"labels":{"app":%q}},`+
		`"spec":{"containers":[{"name":"app","image":"registry.example/app:1.0"}]}}}}`, deploy, ns, deploy, deploy)
	return &flotillav1.Work{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: flotillav1.ClusterNamespace("east"), UID: types.UID("uid-" + name), Generation: 1},
		Spec: flotillav1.WorkSpec{
			PodSecurity: flotillav1.PodSecurityRestricted,
			Manifests:   []flotillav1.Manifest{{RawExtension: k8sruntime.RawExtension{Raw: []byte(raw)}}},
		},
	}
}

// TestAgentReportsNamespaceDenied runs the real agent (setup.New: sync
// client over mTLS on loopback, Store, pkg/apply) against an envtest
// member. The hub serves, as if they had been written straight into it
// past any webhook, a Work into kube-system and one into the agent's own
// namespace, beside an ordinary Work. The agent reports the first two
// NamespaceDenied on their status, naming the namespace and the flag, and
// creates nothing there; the ordinary Work is applied, in a namespace the
// agent creates with Flotilla's and Pod Security's labels.
func TestAgentReportsNamespaceDenied(t *testing.T) {
	cfg := startEnv(t)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	certDir := t.TempDir()
	ca, err := pki.EnsureCA(certDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureHub(certDir, ca, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureAgent(certDir, ca, "east"); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()

	const agentNS = "agent-nsdeny"
	hub := startTestHub(t, certDir, addr, "fleet-ns", nil)
	t.Cleanup(hub.stop)
	works := []*flotillav1.Work{
		workInto("system", "kube-system", "nsdeny-evil"),
		workInto("agent-ns", agentNS, "nsdeny-evil"),
		workInto("ordinary", "nsdeny-team", "web"),
	}
	hub.mu.Lock()
	for _, w := range works {
		hub.works[w.Name] = w
	}
	hub.mu.Unlock()

	a, err := New(Options{
		Config: cfg, HubAddress: addr, Namespace: agentNS,
		CertFile: filepath.Join(certDir, pki.AgentCertFile("east")), KeyFile: filepath.Join(certDir, pki.AgentKeyFile("east")),
		CAFile: filepath.Join(certDir, pki.CACertFile), MetricsAddr: "0", ProbeAddr: "0",
		HeartbeatInterval: time.Second, ResourceInterval: time.Second, CreateNamespaces: true,
		Logger: testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	for _, tc := range []struct{ work, ns, flag string }{
		{"system", "kube-system", apply.FlagDeniedNamespaces},
		{"agent-ns", agentNS, apply.FlagDeniedNamespaces},
	} {
		testutil.Eventually(t, "the NamespaceDenied status of Work "+tc.work+" on the hub", 60*time.Second, func() error {
			st := hub.status(tc.work)
			if st == nil {
				return fmt.Errorf("no status reported yet")
			}
			applied := meta.FindStatusCondition(st.Conditions, flotillav1.ConditionApplied)
			degraded := meta.FindStatusCondition(st.Conditions, flotillav1.ConditionDegraded)
			if applied == nil || degraded == nil {
				return fmt.Errorf("conditions %+v", st.Conditions)
			}
			if applied.Status != metav1.ConditionFalse || applied.Reason != flotillav1.ReasonNamespaceDenied ||
				degraded.Status != metav1.ConditionTrue || degraded.Reason != flotillav1.ReasonNamespaceDenied {
				return fmt.Errorf("Applied %s/%s, Degraded %s/%s", applied.Status, applied.Reason, degraded.Status, degraded.Reason)
			}
			if !strings.Contains(applied.Message, "namespace "+tc.ns) || !strings.Contains(applied.Message, tc.flag) {
				return fmt.Errorf("message %q names neither namespace %s nor %s", applied.Message, tc.ns, tc.flag)
			}
			return nil
		})
	}
	testutil.Eventually(t, "the ordinary Work applied and reported Applied", 60*time.Second, func() error {
		st := hub.status("ordinary")
		if st == nil {
			return fmt.Errorf("no status reported yet")
		}
		if !meta.IsStatusConditionTrue(st.Conditions, flotillav1.ConditionApplied) {
			return fmt.Errorf("conditions %+v", st.Conditions)
		}
		return c.Get(ctx, client.ObjectKey{Namespace: "nsdeny-team", Name: "web"}, &appsv1.Deployment{})
	})

	for _, ns := range []string{"kube-system", agentNS} {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "nsdeny-evil"}, &appsv1.Deployment{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("Deployment %s/nsdeny-evil: get error %v, want NotFound", ns, err)
		}
	}
	var team corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: "nsdeny-team"}, &team); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		flotillav1.LabelNamespaceCreated: "true", flotillav1.LabelFleet: "fleet-ns", flotillav1.LabelCluster: "east",
		apply.LabelPodSecurityEnforce: "restricted", apply.LabelPodSecurityEnforceVersion: "latest",
	} {
		if team.Labels[k] != v {
			t.Errorf("label %s of the namespace the agent created = %q, want %q (labels %v)", k, team.Labels[k], v, team.Labels)
		}
	}
}
