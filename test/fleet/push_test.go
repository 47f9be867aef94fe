package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/test/fleet"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// TestPushMembersMustBeJoined: Config.PushMembers naming a member the
// fleet does not join (unknown, or bare) is refused before anything
// starts, naming the field and the member.
func TestPushMembersMustBeJoined(t *testing.T) {
	for _, tc := range []struct {
		name string
		push string
		bare int
	}{
		{"unknown", "member-9", 0},
		{"bare", "member-2", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fleet.Start(context.Background(), fleet.Config{
				Dir: t.TempDir(), FlotillaBinDir: t.TempDir(), Members: testbed.DefaultMembers(2),
				BareMembers: tc.bare, PushMembers: []string{tc.push},
			})
			if err == nil || !strings.Contains(err.Error(), "Config.PushMembers") || !strings.Contains(err.Error(), tc.push) {
				t.Fatalf("Start with PushMembers %q (bare %d): %v, want an error naming Config.PushMembers and %s", tc.push, tc.bare, err, tc.push)
			}
		})
	}
}

// TestFleetPushMember starts a fleet of two members, member-2 in Push
// mode: the fleet creates its MemberCluster (syncMode Push, spec.push
// naming the kubeconfig Secret, the labels and placement fields of a
// joined member) and runs no agent for it, and the hub makes it Ready.
// Switched to Pull, its agent (credentials issued by the fleet, since it
// never joined) connects and keeps it Ready; switched back to Push, the
// agent stops and the hub keeps it Ready.
func TestFleetPushMember(t *testing.T) {
	bin := t.TempDir()
	if err := fleet.BuildBinaries("../..", bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	f, err := fleet.Start(ctx, fleet.Config{
		Dir: t.TempDir(), FlotillaBinDir: bin, CRDDir: "../../deploy/hub/crds",
		Members: testbed.DefaultMembers(2), HeartbeatGrace: 3 * time.Second, PushMembers: []string{"member-2"},
	})
	if err != nil {
		t.Fatalf("starting the fleet: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Stop(); err != nil {
			t.Errorf("stopping the fleet: %v", err)
		}
	})
	if got := f.MemberNames(); !slices.Equal(got, []string{"member-1", "member-2"}) {
		t.Errorf("MemberNames %v, want both members (a Push member takes replicas too)", got)
	}
	if got := f.BareMemberNames(); len(got) != 0 {
		t.Errorf("BareMemberNames %v, want none", got)
	}
	if got := f.AgentReplicas("member-2"); len(got) != 0 {
		t.Errorf("member-2 runs agents %v in Push mode", got)
	}
	spec := testbed.DefaultMembers(2)[1]
	mc := &flotillav1.MemberCluster{}
	if err := f.Hub.Get(ctx, client.ObjectKey{Name: "member-2"}, mc); err != nil {
		t.Fatal(err)
	}
	ref := mc.Spec.Push
	if mc.Spec.SyncMode != flotillav1.SyncModePush || ref == nil || ref.KubeconfigSecretRef.Name != fleet.PushSecretName("member-2") || ref.KubeconfigSecretRef.Key != flotillav1.DefaultKubeconfigKey {
		t.Errorf("member-2 spec.syncMode %q, spec.push %+v; want Push naming %s/%s", mc.Spec.SyncMode, ref, fleet.PushSecretName("member-2"), flotillav1.DefaultKubeconfigKey)
	}
	if mc.Spec.Region != spec.Region || mc.Spec.Zone != spec.Zone || mc.Spec.Provider != spec.Provider ||
		mc.Labels["region"] != spec.Region || mc.Labels["provider"] != spec.Provider {
		t.Errorf("member-2 region/zone/provider %s/%s/%s, labels %v; want those of its testbed spec %+v", mc.Spec.Region, mc.Spec.Zone, mc.Spec.Provider, mc.Labels, spec)
	}
	secret := &corev1.Secret{}
	if err := f.Hub.Get(ctx, client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: fleet.PushSecretName("member-2")}, secret); err != nil {
		t.Fatalf("reading the push Secret: %v", err)
	}
	if !strings.Contains(string(secret.Data[flotillav1.DefaultKubeconfigKey]), "certificate-authority-data") {
		t.Errorf("the push Secret's %s is not a kubeconfig with embedded certificates", flotillav1.DefaultKubeconfigKey)
	}

	t.Log("switching member-2 to Pull")
	if err := f.SetSyncMode(ctx, "member-2", flotillav1.SyncModePull); err != nil {
		t.Fatal(err)
	}
	if m := f.SyncMode("member-2"); m != flotillav1.SyncModePull {
		t.Errorf("SyncMode(member-2) %s after switching to Pull", m)
	}
	testutil.Eventually(t, "member-2 Ready through its agent agent-member-2-0", 2*time.Minute, func() error {
		return readyThrough(ctx, f, "member-2", "agent-member-2-0")
	}, testutil.Every(200*time.Millisecond))

	t.Log("switching member-2 back to Push")
	if err := f.SetSyncMode(ctx, "member-2", flotillav1.SyncModePush); err != nil {
		t.Fatal(err)
	}
	if got := f.AgentReplicas("member-2"); len(got) != 0 {
		t.Errorf("member-2 runs agents %v after switching to Push", got)
	}
	if got := f.MemberNames(); !slices.Equal(got, []string{"member-1", "member-2"}) {
		t.Errorf("MemberNames %v after switching to Push, want both", got)
	}
	// Past the 3s grace: the hub keeps it Ready without an agent.
	testutil.EventuallyStable(t, "member-2 Ready in Push mode", 2*time.Minute, 6*time.Second, func() error {
		return readyThrough(ctx, f, "member-2", "")
	}, testutil.Every(200*time.Millisecond))
}

// readyThrough checks that member is Ready and, with an instance, that
// the agent replica called so holds its stream.
func readyThrough(ctx context.Context, f *fleet.Fleet, member, instance string) error {
	mc := &flotillav1.MemberCluster{}
	if err := f.Hub.Get(ctx, client.ObjectKey{Name: member}, mc); err != nil {
		return err
	}
	c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionReady)
	if c == nil || c.Status != metav1.ConditionTrue {
		return fmt.Errorf("MemberCluster %s (syncMode %s) Ready %+v", member, mc.Spec.SyncMode, c)
	}
	if instance != "" && (mc.Status.Agent == nil || mc.Status.Agent.Instance != instance) {
		return fmt.Errorf("MemberCluster %s status.agent %+v, want instance %s", member, mc.Status.Agent, instance)
	}
	for _, taint := range mc.Spec.Taints {
		if taint.Key == flotillav1.TaintClusterUnreachable {
			return errors.New("tainted " + taint.ToString())
		}
	}
	return nil
}
