//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// Joiner is a provider with member clusters that have not joined yet and
// the kubectl-flotilla binary, so a spec can join one the way a user
// would. The testbed provider is one; specs that need it skip otherwise.
type Joiner interface {
	// BareMembers are member clusters without an agent or MemberCluster.
	BareMembers() []string
	// HubKubeconfig and MemberKubeconfig are admin kubeconfig files.
	HubKubeconfig() string
	MemberKubeconfig(name string) string
	// SyncAddress is the hub's sync endpoint as agents dial it.
	SyncAddress() string
	// CLI is the path of kubectl-flotilla.
	CLI() string
	// StartAgents runs member's agent replicas (in a real cluster the
	// Deployment join installed does); StopAgents stops them.
	StartAgents(ctx context.Context, member string) error
	StopAgents(ctx context.Context, member string) error
}

var (
	caHashRE = regexp.MustCompile(`sha256:[0-9a-f]{64}`)
	tokenRE  = regexp.MustCompile(`\b[a-z0-9]{6}\.[a-z0-9]{16}\b`)
)

// cli runs kubectl-flotilla and returns what it printed.
func cli(ctx context.Context, j Joiner, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, j.CLI(), args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// mustCLI runs kubectl-flotilla and fails the spec when it fails.
func mustCLI(t *testing.T, j Joiner, args ...string) string {
	t.Helper()
	out, err := cli(context.Background(), j, args...)
	if err != nil {
		t.Fatalf("kubectl-flotilla %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// JoinSpec joins a bare member as a user would — `kubectl flotilla init`,
// then `join` with a single-use token that does not auto-accept, then
// `accept` — and shows it Ready and running a MyApp; `status` and `why`
// name it; the refusals of a wrong CA hash, an expired token and a used
// single-use token create nothing on the hub or in the member; `unjoin`
// leaves no trace of the member on the hub and no agent in the member.
func JoinSpec(t *testing.T, in SpecInput) {
	j, ok := in.Provider.(Joiner)
	if !ok || len(j.BareMembers()) == 0 {
		t.Skipf("the %s provider has no bare member to join", in.Provider.Name())
	}
	ctx := context.Background()
	m := j.BareMembers()[0]
	hubKC, memberKC, addr := j.HubKubeconfig(), j.MemberKubeconfig(m), j.SyncAddress()
	hub, member := in.Provider.Hub(), in.Provider.Member(m)

	// init on a hub that runs already changes nothing and prints the
	// join command with the CA pin.
	out := mustCLI(t, j, "init", "--kubeconfig", hubKC, "--hub-address", addr, "--hub-outside-cluster")
	caHash := caHashRE.FindString(out)
	if caHash == "" || !strings.Contains(out, "kubectl flotilla join") {
		t.Fatalf("init printed no join command with a CA hash:\n%s", out)
	}

	nothingCreated := func(what, cluster string) {
		t.Helper()
		err := hub.Get(ctx, client.ObjectKey{Name: cluster}, &flotillav1.MemberCluster{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s: MemberCluster %s on the hub (err %v), want none", what, cluster, err)
		}
		var csrs certificatesv1.CertificateSigningRequestList
		if err := hub.List(ctx, &csrs, client.MatchingLabels{flotillav1.LabelCluster: cluster}); err != nil || len(csrs.Items) > 0 {
			t.Errorf("%s: %d certificate requests for %s on the hub (err %v), want none", what, len(csrs.Items), cluster, err)
		}
	}
	bootstrapSecret := func() (*corev1.Secret, error) {
		s := &corev1.Secret{}
		return s, member.Get(ctx, client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: flotillav1.AgentBootstrapSecretName}, s)
	}
	noBootstrapSecret := func(what string) {
		t.Helper()
		if _, err := bootstrapSecret(); !apierrors.IsNotFound(err) {
			t.Errorf("%s: the member has a bootstrap Secret (err %v), want none", what, err)
		}
	}
	join := func(token, hash, name string) (string, error) {
		return cli(ctx, j, "join", "--kubeconfig", memberKC, "--hub", addr, "--token", token, "--ca-hash", hash,
			"--cluster-name", name, "--region", "eu-north", "--provider", "onprem", "--wait=false")
	}

	// A token that expires a second from now, for the expiry check below.
	short := tokenRE.FindString(mustCLI(t, j, "token", "create", "--kubeconfig", hubKC, "--ttl", "1s"))
	shortCreated := time.Now()
	if short == "" {
		t.Fatal("token create printed no token")
	}

	// A wrong CA hash: refused before the token leaves the machine.
	tok := tokenRE.FindString(mustCLI(t, j, "token", "create", "--kubeconfig", hubKC, "--single-use", "--ttl", "10m", "--description", "e2e join"))
	if tok == "" {
		t.Fatal("token create printed no token")
	}
	wrongHash := "sha256:" + strings.Repeat("0", 64)
	if out, err := join(tok, wrongHash, m); err == nil || !strings.Contains(out, "pinned") {
		t.Fatalf("join with a wrong CA hash: err %v, want a refusal naming the pin:\n%s", err, out)
	}
	nothingCreated("wrong CA hash", m)
	noBootstrapSecret("wrong CA hash")

	// An expired token: refused by the hub. The wait is the token's
	// lifetime itself (1s, made before the wrong-hash join above), not a
	// wait for the fleet to converge; one attempt after it must fail.
	if d := time.Until(shortCreated.Add(2 * time.Second)); d > 0 {
		time.Sleep(d)
	}
	if out, err := join(short, caHash, m); err == nil || !strings.Contains(out, "expired") {
		t.Fatalf("join with a token that expired: err %v, want a refusal naming the expiry:\n%s", err, out)
	}
	nothingCreated("expired token", m)
	noBootstrapSecret("expired token")

	// The real join: the agent makes its key, registers and waits,
	// Pending, for the admin.
	if out, err := join(tok, caHash, m); err != nil {
		t.Fatalf("join: %v\n%s", err, out)
	}
	if err := j.StartAgents(ctx, m); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = j.StopAgents(ctx, m) })
	eventually(t, m+" registered and Pending", convergeTimeout, func() error {
		mc := &flotillav1.MemberCluster{}
		if err := hub.Get(ctx, client.ObjectKey{Name: m}, mc); err != nil {
			return err
		}
		if mc.Spec.Acceptance != flotillav1.AcceptancePending {
			return fmt.Errorf("acceptance %q", mc.Spec.Acceptance)
		}
		return nil
	})

	// The used single-use token: refused for another name, nothing made.
	if out, err := join(tok, caHash, m+"-again"); err == nil || !strings.Contains(out, "used") {
		t.Fatalf("join with a used single-use token: err %v, want a refusal saying it was used:\n%s", err, out)
	}
	nothingCreated("used single-use token", m+"-again")
	if s, err := bootstrapSecret(); err == nil && string(s.Data["cluster-name"]) == m+"-again" {
		t.Errorf("the refused join rewrote the member's bootstrap Secret")
	}

	mustCLI(t, j, "accept", m, "--kubeconfig", hubKC)
	eventually(t, m+" Ready after accept", convergeTimeout, func() error { return memberReady(ctx, in, m) })
	eventually(t, "the agent holds a certificate and the bootstrap Secret is gone", convergeTimeout, func() error {
		if _, err := bootstrapSecret(); !apierrors.IsNotFound(err) {
			return fmt.Errorf("bootstrap Secret still there (err %v)", err)
		}
		creds := &corev1.Secret{}
		if err := member.Get(ctx, client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: flotillav1.AgentCredentialsSecretName}, creds); err != nil {
			return err
		}
		cert, err := pki.ParseCertificatePEM(creds.Data[corev1.TLSCertKey])
		if err != nil {
			return err
		}
		if got, err := pki.ClusterFromCertificate(cert); err != nil || got != m {
			return fmt.Errorf("certificate names %q (%v)", got, err)
		}
		return nil
	})

	// The new member runs a MyApp.
	app := newMyApp(in, "joined", 2, flotillav1.Placement{ClusterAffinity: &flotillav1.ClusterAffinity{ClusterNames: []string{m}}})
	createMyApp(t, in, app)
	eventually(t, "the MyApp's Deployment ready in "+m, convergeTimeout, deploymentsIn(in, []string{m}, app.Name, want(map[string]int32{m: 2})))

	out = mustCLI(t, j, "status", "--kubeconfig", hubKC, "-n", in.Namespace)
	if !strings.Contains(out, m) || !strings.Contains(out, app.Name) {
		t.Errorf("status does not show %s and %s:\n%s", m, app.Name, out)
	}
	out = mustCLI(t, j, "why", app.Name, "--kubeconfig", hubKC, "-n", in.Namespace)
	for _, name := range append([]string{m}, in.Members...) {
		if !strings.Contains(out, name) {
			t.Errorf("why does not name %s:\n%s", name, out)
		}
	}

	// unjoin: the app goes first (its Deployment deleted in the member),
	// then the member.
	if err := hub.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the MyApp's Deployment gone from "+m, convergeTimeout, func() error {
		err := member.Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: app.Name}, &appsv1.Deployment{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("Deployment %s/%s still there (err %v)", in.Namespace, app.Name, err)
		}
		return nil
	})
	mustCLI(t, j, "unjoin", m, "--kubeconfig", hubKC, "--member-kubeconfig", memberKC, "--timeout", "3m")
	if err := j.StopAgents(ctx, m); err != nil {
		t.Error(err)
	}
	nothingCreated("after unjoin", m)
	workNS := &corev1.Namespace{}
	if err := hub.Get(ctx, client.ObjectKey{Name: flotillav1.ClusterNamespacePrefix + m}, workNS); err == nil && workNS.DeletionTimestamp == nil {
		t.Errorf("after unjoin: the hub still has namespace %s", workNS.Name)
	}
	for _, name := range []string{flotillav1.AgentCredentialsSecretName, flotillav1.AgentBootstrapSecretName} {
		if err := member.Get(ctx, client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: name}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("after unjoin: Secret %s in the member (err %v), want none", name, err)
		}
	}
	var deps appsv1.DeploymentList
	if err := member.List(ctx, &deps, client.InNamespace(flotillav1.SystemNamespace)); err != nil || len(deps.Items) > 0 {
		t.Errorf("after unjoin: %d Deployments in the member's %s (err %v), want no agent", len(deps.Items), flotillav1.SystemNamespace, err)
	}
	_ = member.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: in.Namespace}})
}

// CertificateRotationSpec watches the fleet for six minutes with
// two-minute certificates (the testbed provider starts the hub with
// --agent-certificate-lifetime and --serving-certificate-lifetime 2m):
// every agent's certificate and the hub's serving certificate are renewed
// at least twice, and nothing notices — a MyApp's Deployments keep their
// UID and generation, its Works stay Applied, every member stays Ready and
// `kubectl flotilla status` answers throughout.
func CertificateRotationSpec(t *testing.T, in SpecInput, lifetime time.Duration) {
	j, ok := in.Provider.(Joiner)
	if !ok || lifetime == 0 {
		t.Skipf("the %s provider does not run short-lived certificates", in.Provider.Name())
	}
	ctx := context.Background()
	window := 3 * lifetime
	assigned := map[string]int32{}
	for _, m := range in.Members {
		assigned[m] = 1
	}
	app := newMyApp(in, "rotation", 1, flotillav1.Placement{
		ClusterAffinity:   &flotillav1.ClusterAffinity{ClusterNames: in.Members},
		ReplicaScheduling: &flotillav1.ReplicaSchedulingStrategy{ReplicaSchedulingType: flotillav1.ReplicaSchedulingDuplicated},
	})
	createMyApp(t, in, app)
	eventually(t, "the MyApp Ready", convergeTimeout, appReady(in, app.Name, assigned))
	before, err := deploymentIDs(ctx, in, app.Name, in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	caHash := caHashRE.FindString(mustCLI(t, j, "init", "--kubeconfig", j.HubKubeconfig(), "--hub-address", j.SyncAddress(), "--hub-outside-cluster"))

	agentSerials := map[string]map[string]bool{}
	hubSerials := map[string]bool{}
	start := time.Now()
	for time.Since(start) < window {
		for _, m := range in.Members {
			s := &corev1.Secret{}
			if err := in.Provider.Member(m).Get(ctx, client.ObjectKey{Namespace: flotillav1.SystemNamespace, Name: flotillav1.AgentCredentialsSecretName}, s); err != nil {
				t.Fatalf("reading %s's credentials: %v", m, err)
			}
			cert, err := pki.ParseCertificatePEM(s.Data[corev1.TLSCertKey])
			if err != nil {
				t.Fatalf("%s's certificate: %v", m, err)
			}
			if agentSerials[m] == nil {
				agentSerials[m] = map[string]bool{}
			}
			agentSerials[m][cert.SerialNumber.String()] = true
		}
		serial, err := hubServingSerial(j.SyncAddress(), caHash)
		if err != nil {
			t.Fatalf("the hub's serving certificate: %v", err)
		}
		hubSerials[serial] = true
		if err := membersReady(ctx, in); err != nil {
			t.Fatalf("%s into the rotation window: %v", time.Since(start).Round(time.Second), err)
		}
		if out, err := cli(ctx, j, "status", "--kubeconfig", j.HubKubeconfig(), "-n", in.Namespace); err != nil {
			t.Fatalf("kubectl flotilla status failed %s into the rotation window: %v\n%s", time.Since(start).Round(time.Second), err, out)
		}
		time.Sleep(5 * time.Second)
	}
	for _, m := range in.Members {
		t.Logf("the agent of %s had %d certificates in %s", m, len(agentSerials[m]), window)
	}
	t.Logf("the hub served %d certificates in %s", len(hubSerials), window)
	for _, m := range in.Members {
		if n := len(agentSerials[m]); n < 3 {
			t.Errorf("the agent of %s had %d certificates in %s, want at least 3 (two renewals)", m, n, window)
		}
	}
	if n := len(hubSerials); n < 3 {
		t.Errorf("the hub served %d certificates in %s, want at least 3 (two rotations)", n, window)
	}
	if err := appReady(in, app.Name, assigned)(); err != nil {
		t.Errorf("after the rotations: %v", err)
	}
	after, err := deploymentIDs(ctx, in, app.Name, in.Members...)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameUIDs(before, after, true); err != nil {
		t.Errorf("a Deployment was touched by the rotations: %v", err)
	}
	works, err := worksOf(ctx, in, app.Name)
	if err != nil {
		t.Fatal(err)
	}
	for cluster, w := range works {
		if !meta.IsStatusConditionTrue(w.Status.Conditions, flotillav1.ConditionApplied) {
			t.Errorf("Work of %s not Applied after the rotations: %+v", cluster, meta.FindStatusCondition(w.Status.Conditions, flotillav1.ConditionApplied))
		}
	}
}

// hubServingSerial dials the hub's sync port without a client certificate
// and returns the serial of the serving certificate, verified against the
// pinned CA.
func hubServingSerial(addr, caHash string) (string, error) {
	var serial string
	conf := &tls.Config{
		InsecureSkipVerify: true, // verified below against the pinned CA
		NextProtos:         []string{"h2"},
		VerifyConnection: func(cs tls.ConnectionState) error {
			raw := make([][]byte, len(cs.PeerCertificates))
			for i, c := range cs.PeerCertificates {
				raw[i] = c.Raw
			}
			if _, err := bootstrap.VerifyPinned(raw, caHash, "127.0.0.1"); err != nil {
				return err
			}
			serial = cs.PeerCertificates[0].SerialNumber.String()
			return nil
		},
	}
	conn, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		return "", err
	}
	_ = conn.Close()
	if serial == "" {
		return "", errors.New("no certificate seen")
	}
	return serial, nil
}
