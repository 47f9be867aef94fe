package fleet

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/agent/join"
	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

// Push members run no agent: the hub leader applies their Works through
// the member's admin kubeconfig, which the fleet keeps in a Secret of the
// hub's flotilla-system (PushSecretName). The fleet creates their
// MemberClusters itself, as an admin would, with the region, zone,
// provider and plain labels a joined member of the same testbed spec gets.

// PushSecretName is the Secret in the hub's flotilla-system that holds
// member's kubeconfig (key flotillav1.DefaultKubeconfigKey) when it is
// pushed to.
func PushSecretName(member string) string { return "flotilla-push-" + member }

// pushCredentialsLifetime is the lifetime of agent credentials the fleet
// issues for a member that starts in Push mode and is switched to Pull
// (the hub's default agent certificate lifetime; agents renew at 80 %).
const pushCredentialsLifetime = 30 * 24 * time.Hour

// checkPushMembers says which of cfg.PushMembers is not a member the
// fleet joins itself (bare members are left to the test).
func checkPushMembers(cfg Config) error {
	joined := cfg.Members[:len(cfg.Members)-cfg.BareMembers]
	for _, name := range cfg.PushMembers {
		if !slices.ContainsFunc(joined, func(s testbed.ClusterSpec) bool { return s.Name == name }) {
			var names []string
			for _, s := range joined {
				names = append(names, s.Name)
			}
			return fmt.Errorf("Config.PushMembers: %q is not one of the members the fleet joins (%v; bare members are the test's to join)", name, names)
		}
	}
	return nil
}

// memberLabels are the plain labels a joined member of spec m gets (its
// bootstrap Secret asks for them; see WriteBootstrapSecret).
func memberLabels(m testbed.ClusterSpec) map[string]string {
	return map[string]string{"region": m.Region, "provider": m.Provider}
}

// writePushSecret writes (or overwrites) the Secret holding member's
// admin kubeconfig, certificates embedded, in the hub's flotilla-system.
func (f *Fleet) writePushSecret(ctx context.Context, member string) error {
	m := f.Testbed.Member(member)
	if m == nil {
		return fmt.Errorf("no member %q", member)
	}
	kubeconfig, err := os.ReadFile(m.Kubeconfig)
	if err != nil {
		return fmt.Errorf("reading %s's kubeconfig: %w", member, err)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: flotillav1.SystemNamespace, Name: PushSecretName(member)}}
	data := map[string][]byte{flotillav1.DefaultKubeconfigKey: kubeconfig}
	err = f.Hub.Get(ctx, client.ObjectKeyFromObject(s), s)
	switch {
	case apierrors.IsNotFound(err):
		s.Data = data
		err = f.Hub.Create(ctx, s)
	case err == nil:
		s.Data = data
		err = f.Hub.Update(ctx, s)
	}
	if err != nil {
		return fmt.Errorf("writing Secret %s/%s with %s's kubeconfig: %w", flotillav1.SystemNamespace, s.Name, member, err)
	}
	return nil
}

// pushSpec is the spec.push naming member's kubeconfig Secret.
func pushSpec(member string) *flotillav1.PushSpec {
	return &flotillav1.PushSpec{KubeconfigSecretRef: flotillav1.SecretKeyRef{Name: PushSecretName(member), Key: flotillav1.DefaultKubeconfigKey}}
}

// createPushMember writes member's kubeconfig Secret and creates its
// MemberCluster in Push mode, Accepted.
func (f *Fleet) createPushMember(ctx context.Context, spec testbed.ClusterSpec) error {
	if err := f.writePushSecret(ctx, spec.Name); err != nil {
		return err
	}
	mc := &flotillav1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: memberLabels(spec)},
		Spec: flotillav1.MemberClusterSpec{
			Region: spec.Region, Zone: spec.Zone, Provider: spec.Provider,
			SyncMode:   flotillav1.SyncModePush,
			Push:       pushSpec(spec.Name),
			Acceptance: flotillav1.AcceptanceAccepted,
		},
	}
	if err := f.Hub.Create(ctx, mc); err != nil {
		return fmt.Errorf("creating MemberCluster %s in Push mode: %w", spec.Name, err)
	}
	return nil
}

// SyncMode is how member receives its Works in this fleet: Push for the
// members it pushes to (Config.PushMembers and SetSyncMode), else Pull.
func (f *Fleet) SyncMode(member string) flotillav1.SyncMode {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.push[member] {
		return flotillav1.SyncModePush
	}
	return flotillav1.SyncModePull
}

// PushMemberNames lists the members in Push mode, in order.
func (f *Fleet) PushMemberNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, m := range f.Testbed.Members {
		if f.push[m.Spec.Name] {
			out = append(out, m.Spec.Name)
		}
	}
	return out
}

// SetSyncMode switches member to mode, as an admin would, and returns
// without waiting for the hub:
//
//   - to Push: its agents are stopped, its kubeconfig Secret written and
//     its MemberCluster patched to syncMode Push with spec.push naming it;
//   - to Pull: its MemberCluster is patched to syncMode Pull (spec.push
//     stays; Pull ignores it) and its agents are started again. They use
//     the credentials Secret in the member, still valid since the
//     MemberCluster is the same object; a member that started in Push
//     mode never joined and has none, so the fleet issues them first, as
//     an admin does with flotilla-pki for a member it created.
//
// Switching to the mode member is in does nothing.
func (f *Fleet) SetSyncMode(ctx context.Context, member string, mode flotillav1.SyncMode) error {
	if f.Testbed.Member(member) == nil {
		return fmt.Errorf("no member %q", member)
	}
	if mode == f.SyncMode(member) {
		return nil
	}
	switch mode {
	case flotillav1.SyncModePush:
		f.mu.Lock()
		f.push[member] = true
		f.mu.Unlock()
		if err := f.StopAgents(member); err != nil {
			return fmt.Errorf("stopping %s's agents: %w", member, err)
		}
		if err := f.writePushSecret(ctx, member); err != nil {
			return err
		}
		return f.patchSyncMode(ctx, member, flotillav1.SyncModePush, pushSpec(member))
	case flotillav1.SyncModePull:
		if err := f.ensureAgentCredentials(ctx, member); err != nil {
			return err
		}
		if err := f.patchSyncMode(ctx, member, flotillav1.SyncModePull, nil); err != nil {
			return err
		}
		f.mu.Lock()
		delete(f.push, member)
		f.mu.Unlock()
		return f.StartAgents(member)
	default:
		return fmt.Errorf("sync mode %q: want %s or %s", mode, flotillav1.SyncModePull, flotillav1.SyncModePush)
	}
}

// patchSyncMode sets member's spec.syncMode, and spec.push when push is
// not nil, with a merge patch.
func (f *Fleet) patchSyncMode(ctx context.Context, member string, mode flotillav1.SyncMode, push *flotillav1.PushSpec) error {
	spec := map[string]any{"syncMode": mode}
	if push != nil {
		spec["push"] = push
	}
	body, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return err
	}
	mc := &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: member}}
	if err := f.Hub.Patch(ctx, mc, client.RawPatch(types.MergePatchType, body)); err != nil {
		return fmt.Errorf("patching MemberCluster %s to syncMode %s: %w", member, mode, err)
	}
	return nil
}

// ensureAgentCredentials writes agent credentials into member's
// flotilla-system unless it has some: a key, a certificate for the
// member signed by the hub CA and carrying its MemberCluster's UID (as a
// join-issued one does), the CA and the hub's sync address.
func (f *Fleet) ensureAgentCredentials(ctx context.Context, member string) error {
	c := f.members[member]
	key := client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: flotillav1.AgentCredentialsSecretName}
	err := c.Get(ctx, key, &corev1.Secret{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading %s's agent credentials %s: %w", member, key, err)
	}
	mc := &flotillav1.MemberCluster{}
	if err := f.Hub.Get(ctx, client.ObjectKey{Name: member}, mc); err != nil {
		return fmt.Errorf("reading MemberCluster %s: %w", member, err)
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	csrPEM, err := pki.NewAgentCSR(priv, member)
	if err != nil {
		return err
	}
	csr, err := pki.ParseAgentCSR(csrPEM, member)
	if err != nil {
		return err
	}
	cert, err := f.ca.SignAgentCSR(csr, member, string(mc.UID), pushCredentialsLifetime, time.Now())
	if err != nil {
		return err
	}
	keyPEM, err := (&pki.KeyPair{Cert: cert, Key: priv}).KeyPEM()
	if err != nil {
		return err
	}
	if err := ensureNamespace(ctx, c, flotillav1.SystemNamespace); err != nil {
		return err
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Data: map[string][]byte{
			join.KeyPrivateKey:  keyPEM,
			join.KeyCertificate: pki.CertificatePEM(cert),
			join.KeyCA:          f.ca.CertPEM(),
			join.KeyHubAddress:  []byte(f.syncAddr),
			join.KeyClusterName: []byte(member),
		},
	}
	if err := c.Create(ctx, s); err != nil {
		return fmt.Errorf("writing %s's agent credentials %s: %w", member, key, err)
	}
	return nil
}
