package setup

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient/crclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
	"github.com/flotilla-dev/flotilla/pkg/leader"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	syncclient "github.com/flotilla-dev/flotilla/pkg/sync/client"
	"github.com/flotilla-dev/flotilla/pkg/works"
)

func TestHoldsLease(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	lease := func(holder string, renewed time.Time, seconds int32) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "flotilla-system", Name: "agent"}}
		if holder != "" {
			l.Spec.HolderIdentity = &holder
		}
		if !renewed.IsZero() {
			l.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
			l.Spec.LeaseDurationSeconds = &seconds
		}
		return l
	}
	tests := []struct {
		name    string
		lease   *coordinationv1.Lease
		wantErr string
	}{
		{name: "held and fresh", lease: lease("me", now.Add(-2*time.Second), 8)},
		{name: "held by another replica", lease: lease("other", now.Add(-2*time.Second), 8), wantErr: `held by "other"`},
		{name: "held by nobody", lease: lease("", time.Time{}, 0), wantErr: `held by ""`},
		{name: "held but expired (a paused old leader)", lease: lease("me", now.Add(-9*time.Second), 8), wantErr: "expired"},
		{name: "expiring right now", lease: lease("me", now.Add(-8*time.Second), 8), wantErr: "expired"},
		{name: "no renew time", lease: lease("me", time.Time{}, 0), wantErr: "no renew time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := leader.Holds(tt.lease, "me", now)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("leader.Holds = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// identityApplier records SetIdentity calls.
type identityApplier struct{ fleet, cluster string }

func (a *identityApplier) SetIdentity(fleetID, cluster string) { a.fleet, a.cluster = fleetID, cluster }

// TestFleetIdentityRecord runs the agent's identity record against a real
// apiserver: the first hub is recorded, another fleet or cluster name is
// refused without touching the record, and the flag or the annotation
// re-points the agent on purpose.
func TestFleetIdentityRecord(t *testing.T) {
	cfg := startEnv(t)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "identity-test"
	applier := &identityApplier{}
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := direct.New(cfg, scheme)
	if err != nil {
		t.Fatal(err)
	}
	id := &works.FleetIdentity{Reader: kc, Writer: kc, Namespace: ns, Applier: applier, Log: testr.New(t)}
	record := func() map[string]string {
		t.Helper()
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: flotillav1.AgentIdentityConfigMapName}, cm); err != nil {
			t.Fatal(err)
		}
		return cm.Data
	}
	wantRecord := func(fleet, cluster string) {
		t.Helper()
		if r := record(); r[works.IdentityKeyFleetID] != fleet || r[works.IdentityKeyCluster] != cluster {
			t.Fatalf("record = %v, want fleet %s, cluster %s", r, fleet, cluster)
		}
	}
	refused := func(err error) {
		t.Helper()
		var m *syncclient.FleetMismatchError
		if !errors.As(err, &m) {
			t.Fatalf("Admit = %v, want a FleetMismatchError", err)
		}
	}

	// The first hub is recorded (the namespace is created when missing).
	if err := id.Admit(ctx, "fleet-a", "east"); err != nil {
		t.Fatal(err)
	}
	wantRecord("fleet-a", "east")
	if applier.fleet != "fleet-a" || applier.cluster != "east" {
		t.Errorf("applier identity = %+v, want fleet-a/east", applier)
	}
	if err := id.Admit(ctx, "fleet-a", "east"); err != nil {
		t.Fatalf("the recorded hub: %v", err)
	}

	// Another fleet, or another name: refused, record untouched, the
	// applier keeps its identity.
	refused(id.Admit(ctx, "fleet-b", "east"))
	refused(id.Admit(ctx, "fleet-a", "west"))
	wantRecord("fleet-a", "east")
	if applier.fleet != "fleet-a" {
		t.Errorf("a refused hub changed the applier's identity to %+v", applier)
	}

	// The annotation re-points once, and is removed when used.
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: flotillav1.AgentIdentityConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Annotations = map[string]string{flotillav1.AnnotationAcceptFleetID: "fleet-b"}
	if err := c.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := id.Admit(ctx, "fleet-b", "east"); err != nil {
		t.Fatalf("accepted by annotation: %v", err)
	}
	wantRecord("fleet-b", "east")
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: flotillav1.AgentIdentityConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	if _, ok := cm.Annotations[flotillav1.AnnotationAcceptFleetID]; ok {
		t.Error("the used accept annotation is still there")
	}
	if applier.fleet != "fleet-b" {
		t.Errorf("applier identity = %+v, want fleet-b", applier)
	}
	refused(id.Admit(ctx, "fleet-a", "east"))

	// The flag re-points too.
	id.Accept = "fleet-c"
	if err := id.Admit(ctx, "fleet-c", "east"); err != nil {
		t.Fatalf("accepted by flag: %v", err)
	}
	wantRecord("fleet-c", "east")
}

// TestLeaseFence reads a real Lease: the fence passes while this replica
// holds it and fails once another replica does.
func TestLeaseFence(t *testing.T) {
	cfg := startEnv(t)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fence-test"}}); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: "fence-test", Name: "flotilla-agent"}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("agent-0_1"), LeaseDurationSeconds: ptr.To[int32](8),
			RenewTime: &metav1.MicroTime{Time: time.Now()},
		},
	}
	if err := c.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	fence := leader.Fence(crclient.Reader(c), key, "agent-0_1", time.Now)
	if err := fence(ctx); err != nil {
		t.Fatalf("the holder was fenced: %v", err)
	}
	lease.Spec.HolderIdentity = ptr.To("agent-1_2")
	if err := c.Update(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if err := fence(ctx); err == nil || !strings.Contains(err.Error(), `held by "agent-1_2"`) {
		t.Errorf("the old leader passed the fence: %v", err)
	}
	if err := leader.Fence(crclient.Reader(c), client.ObjectKey{Namespace: "fence-test", Name: "missing"}, "agent-0_1", time.Now)(ctx); err == nil {
		t.Error("a missing Lease passed the fence")
	}
}

// TestLeaderLockIdentityIsTheFences starts a leader-elected agent against
// envtest and checks that the Lease it takes names the identity its fence
// checks (Agent.LeaderIdentity), so the fence passes for the leader, and
// fails once another replica holds the Lease.
func TestLeaderLockIdentityIsTheFences(t *testing.T) {
	cfg := startEnv(t)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "leader-test"}}); err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	ca, err := pki.EnsureCA(certDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureAgent(certDir, ca, "east"); err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{
		// No hub listens there: this test is about the Lease.
		Config: cfg, HubAddress: "127.0.0.1:1",
		CertFile: filepath.Join(certDir, pki.AgentCertFile("east")), KeyFile: filepath.Join(certDir, pki.AgentKeyFile("east")),
		CAFile:         filepath.Join(certDir, pki.CACertFile),
		LeaderElection: true, LeaderElectionID: "flotilla-agent", LeaderElectionNamespace: "leader-test",
		MetricsAddr: "0", ProbeAddr: "0", Instance: "agent-0", Logger: testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.LeaderIdentity, "agent-0_") {
		t.Errorf("leader identity %q does not start with the instance", a.LeaderIdentity)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Start(mctx) }()
	defer func() {
		cancel()
		<-done
	}()
	key := client.ObjectKey{Namespace: "leader-test", Name: "flotilla-agent"}
	fence := leader.Fence(crclient.Reader(c), key, a.LeaderIdentity, time.Now)
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := fence(ctx)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not take the Lease its fence checks within 30s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := leader.Fence(crclient.Reader(c), key, "agent-1_other", time.Now)(ctx); err == nil {
		t.Error("another replica passed the fence")
	}
}
