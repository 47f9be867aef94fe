package join

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/flotilla-dev/flotilla/agent/join/jointest"
	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// member is one test's view of the envtest apiserver: a client and a
// namespace of its own, standing for one member's flotilla-system.
type member struct {
	c client.Client
	// k is the client the keeper gets: the agent's (pkg/kclient/direct).
	k  kclient.Client
	ns string
}

func newMember(t *testing.T) member {
	t.Helper()
	c, err := client.New(sharedEnv.Config(t), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	k, err := direct.New(sharedEnv.Config(t), s)
	if err != nil {
		t.Fatal(err)
	}
	ns := "join-" + rand.String(6)
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return member{c: c, k: k, ns: ns}
}

// writeBootstrap writes the Secret `kubectl flotilla join` would.
func (m member) writeBootstrap(t *testing.T, hubAddr string, tok bootstrap.Token, cluster, caHash string) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.ns, Name: flotillav1.AgentBootstrapSecretName},
		StringData: map[string]string{
			BootstrapKeyHubAddress: hubAddr, BootstrapKeyToken: tok.String(), BootstrapKeyCAHash: caHash,
			BootstrapKeyClusterName: cluster, BootstrapKeyLabels: "tier=gold", BootstrapKeyRegion: "eu-west",
		},
	}
	if err := m.c.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func (m member) keeper(t *testing.T, hubAddr, cluster string) *Keeper {
	t.Helper()
	k, err := NewKeeper(Config{
		Reader: m.k, Writer: m.k, Namespace: m.ns, Cluster: cluster, Target: hubAddr,
		Source: NewSource(), Instance: "test", Logger: testr.New(t),
		PollInitial: 100 * time.Millisecond, PollMax: 500 * time.Millisecond,
		RetryInitial: 100 * time.Millisecond, RetryMax: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// secret returns Secret name, or nil when it does not exist.
func (m member) secret(t *testing.T, name string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	err := m.c.Get(context.Background(), client.ObjectKey{Namespace: m.ns, Name: name}, s)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (m member) credentials(t *testing.T) *Credentials {
	t.Helper()
	s := m.secret(t, flotillav1.AgentCredentialsSecretName)
	if s == nil {
		t.Fatal("there is no credentials Secret")
	}
	c, err := ReadCredentials(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// events returns the messages of the Events with reason in the namespace.
func (m member) events(t *testing.T, reason string) []string {
	t.Helper()
	var list corev1.EventList
	if err := m.c.List(context.Background(), &list, client.InNamespace(m.ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Reason == reason && e.InvolvedObject.Kind == "Secret" && e.InvolvedObject.Name == flotillav1.AgentCredentialsSecretName {
			out = append(out, e.Message)
		}
	}
	return out
}

// waitEvent polls (the recorder writes Events asynchronously) until one
// Event with reason holds want, and fails the test naming what it saw.
func (m member) waitEvent(t *testing.T, reason, want string) {
	t.Helper()
	testutil.Eventually(t, "a "+reason+" Event saying "+want, 30*time.Second, func() error {
		ev := m.events(t, reason)
		for _, e := range ev {
			if strings.Contains(e, want) {
				return nil
			}
		}
		return fmt.Errorf("%s events: %q", reason, ev)
	})
}

func newToken(t *testing.T) bootstrap.Token {
	t.Helper()
	tok, err := bootstrap.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func obtainAsync(ctx context.Context, k *Keeper) <-chan error {
	done := make(chan error, 1)
	go func() { done <- k.Obtain(ctx) }()
	return done
}

func waitErr(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not return within 60s", what)
		return nil
	}
}

// TestJoin joins a hub with a bootstrap Secret: the credentials Secret
// then holds the key the hub got a request for (never the key itself),
// the certificate for that key naming the cluster, the pinned CA, the hub
// address and cluster name, and no pending request; the bootstrap Secret
// is gone and the Source presents the certificate.
func TestJoin(t *testing.T) {
	m := newMember(t)
	tok := newToken(t)
	hub := jointest.Start(t, jointest.Options{Token: tok.String(), AutoApprove: true})
	m.writeBootstrap(t, hub.Addr, tok, "east", hub.CAHash)
	k := m.keeper(t, hub.Addr, "east")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := k.Obtain(ctx); err != nil {
		t.Fatal(err)
	}

	s := m.secret(t, flotillav1.AgentCredentialsSecretName)
	if got, want := slices.Sorted(maps.Keys(s.Data)), []string{KeyBootstrapVersion, KeyCA, KeyClusterName, KeyHubAddress, KeyPrivateKey, KeyCertificate}; !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("credentials Secret keys %v, want %v", got, slices.Sorted(slices.Values(want)))
	}
	creds := m.credentials(t)
	roots := x509.NewCertPool()
	roots.AddCert(hub.CA.Cert)
	if cluster, err := pki.VerifyAgent([]*x509.Certificate{creds.Cert}, roots, time.Now()); err != nil || cluster != "east" {
		t.Errorf("the stored certificate verifies as %q, %v; want cluster east from the hub CA", cluster, err)
	}
	if !creds.CA.Equal(hub.CA.Cert) || creds.HubAddress != hub.Addr || creds.ClusterName != "east" || creds.Request != "" {
		t.Errorf("credentials: CA %s, hub %q, cluster %q, request %q", creds.CA.Subject, creds.HubAddress, creds.ClusterName, creds.Request)
	}
	if keys := hub.RegisteredKeys(); len(keys) != 1 || !creds.Key.PublicKey.Equal(keys[0]) {
		t.Errorf("the hub registered %d requests; want one for the stored key", len(keys))
	}
	if regs, renews := hub.Counts(); regs != 1 || renews != 0 {
		t.Errorf("the hub saw %d registers and %d renewals, want 1 and 0", regs, renews)
	}
	if b := m.secret(t, flotillav1.AgentBootstrapSecretName); b != nil {
		t.Error("the bootstrap Secret is still there after the join")
	}
	kp, ca := k.cfg.Source.Current()
	if kp == nil || !kp.Cert.Equal(creds.Cert) || !ca.Equal(hub.CA.Cert) {
		t.Error("the Source does not hold the stored certificate and CA")
	}
	m.waitEvent(t, ReasonJoined, "")
	if ev := m.events(t, ReasonJoined); len(ev) != 1 {
		t.Errorf("Joined events: %q, want one", ev)
	}
}

// TestJoinRefusesAnUnpinnedHub points a join at a hub whose CA does not
// hash to the pin: the agent refuses it before sending the token (the hub
// never saw a Register), says why, and keeps its bootstrap Secret; another
// member joining the same hub with the right pin is not disturbed.
func TestJoinRefusesAnUnpinnedHub(t *testing.T) {
	tok := newToken(t)
	hub := jointest.Start(t, jointest.Options{Token: tok.String(), AutoApprove: true})
	other, err := pki.NewCA("another-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	wrong := newMember(t)
	wrong.writeBootstrap(t, hub.Addr, tok, "east", bootstrap.CAHash(other.Cert))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = wrong.keeper(t, hub.Addr, "east").Obtain(ctx)
	var pinErr *pinError
	if !errors.As(err, &pinErr) || !strings.Contains(err.Error(), bootstrap.CAHash(other.Cert)) || !strings.Contains(err.Error(), "does not match the pinned hash") {
		t.Fatalf("Obtain: %v; want a refusal naming the pinned hash", err)
	}
	if regs, _ := hub.Counts(); regs != 0 {
		t.Fatalf("the hub saw %d Register calls from an agent that pinned another CA; the token must not be sent", regs)
	}
	if creds := wrong.credentials(t); creds.Cert != nil || creds.Request != "" {
		t.Errorf("the refused join stored a certificate or request: %+v", creds)
	}
	if wrong.secret(t, flotillav1.AgentBootstrapSecretName) == nil {
		t.Error("the refused join deleted its bootstrap Secret")
	}
	wrong.waitEvent(t, ReasonJoinRefused, "pinned hash")

	right := newMember(t)
	right.writeBootstrap(t, hub.Addr, tok, "west", hub.CAHash)
	if err := right.keeper(t, hub.Addr, "west").Obtain(ctx); err != nil {
		t.Fatalf("a correctly pinned join after the refusal: %v", err)
	}
	if regs, _ := hub.Counts(); regs != 1 {
		t.Errorf("the hub saw %d registers, want the one of the correctly pinned member", regs)
	}
}

// TestJoinRefusesAHubWithoutItsName: the pinned CA alone is not enough,
// the hub's certificate must also carry the name the agent dials it by;
// the token is not sent otherwise.
func TestJoinRefusesAHubWithoutItsName(t *testing.T) {
	m := newMember(t)
	tok := newToken(t)
	hub := jointest.Start(t, jointest.Options{Token: tok.String(), AutoApprove: true})
	m.writeBootstrap(t, hub.Addr, tok, "east", hub.CAHash)
	k := m.keeper(t, hub.Addr, "east")
	k.cfg.ServerName = "hub.elsewhere.example"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := k.Obtain(ctx)
	var pinErr *pinError
	if !errors.As(err, &pinErr) || !strings.Contains(err.Error(), "hub.elsewhere.example") {
		t.Fatalf("Obtain: %v; want a refusal naming the server name", err)
	}
	if regs, _ := hub.Counts(); regs != 0 {
		t.Fatalf("the hub saw %d Register calls; the token must not be sent to a hub without the name", regs)
	}
}

// TestJoinWithAnUnknownTokenFails: the hub's refusal ends the join at once
// with the hub's reason; nothing is stored but the key.
func TestJoinWithAnUnknownTokenFails(t *testing.T) {
	m := newMember(t)
	hub := jointest.Start(t, jointest.Options{Token: newToken(t).String(), AutoApprove: true})
	m.writeBootstrap(t, hub.Addr, newToken(t), "east", hub.CAHash)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := m.keeper(t, hub.Addr, "east").Obtain(ctx)
	if err == nil || !strings.Contains(err.Error(), "unknown bootstrap token") {
		t.Fatalf("Obtain: %v; want the hub's refusal of the token", err)
	}
	if regs, _ := hub.Counts(); regs != 1 {
		t.Errorf("the hub saw %d registers; a refused token must not be retried", regs)
	}
	if creds := m.credentials(t); creds.Cert != nil || creds.Request != "" {
		t.Errorf("the refused join stored a certificate or request: %+v", creds)
	}
}

// TestJoinDenied: a request the hub denies ends the join with the hub's
// reason and an Event on the credentials Secret, and forgets the request.
func TestJoinDenied(t *testing.T) {
	m := newMember(t)
	tok := newToken(t)
	hub := jointest.Start(t, jointest.Options{Token: tok.String()})
	m.writeBootstrap(t, hub.Addr, tok, "east", hub.CAHash)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := obtainAsync(ctx, m.keeper(t, hub.Addr, "east"))
	testutil.Eventually(t, "the request stored in the credentials Secret", 30*time.Second, func() error {
		if s := m.secret(t, flotillav1.AgentCredentialsSecretName); s == nil || len(s.Data[KeyRequest]) == 0 {
			return errors.New("no request yet")
		}
		return nil
	})
	req := hub.Requests()[0]
	hub.Deny(req, "cluster east is not welcome here")
	err := waitErr(t, done, "a denied join")
	if err == nil || !strings.Contains(err.Error(), "not welcome") || !strings.Contains(err.Error(), "denied") {
		t.Fatalf("Obtain: %v; want the denial with the hub's reason", err)
	}
	m.waitEvent(t, ReasonCertificateDenied, "not welcome")
	if creds := m.credentials(t); creds.Cert != nil || creds.Request != "" {
		t.Errorf("after the denial the credentials hold certificate %v, request %q; want neither", creds.Cert != nil, creds.Request)
	}
}

// TestRestartWhilePendingResumes stops a join while its request is
// pending; the next Keeper polls the same request with the same key
// instead of registering again, and gets the certificate once approved.
func TestRestartWhilePendingResumes(t *testing.T) {
	m := newMember(t)
	tok := newToken(t)
	hub := jointest.Start(t, jointest.Options{Token: tok.String()})
	m.writeBootstrap(t, hub.Addr, tok, "east", hub.CAHash)
	ctx1, cancel1 := context.WithCancel(context.Background())
	done := obtainAsync(ctx1, m.keeper(t, hub.Addr, "east"))
	testutil.Eventually(t, "the request stored in the credentials Secret", 30*time.Second, func() error {
		if s := m.secret(t, flotillav1.AgentCredentialsSecretName); s == nil || len(s.Data[KeyRequest]) == 0 {
			return errors.New("no request yet")
		}
		return nil
	})
	before := m.credentials(t)
	cancel1()
	if err := waitErr(t, done, "a stopped join"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped join returned %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := m.keeper(t, hub.Addr, "east")
	done = obtainAsync(ctx, k)
	hub.Approve(before.Request)
	if err := waitErr(t, done, "the resumed join"); err != nil {
		t.Fatal(err)
	}
	after := m.credentials(t)
	if regs, _ := hub.Counts(); regs != 1 || len(hub.Requests()) != 1 {
		t.Errorf("the hub saw %d registers and %d requests; the restart must resume, not register again", regs, len(hub.Requests()))
	}
	if !after.Key.Equal(before.Key) || !after.Key.PublicKey.Equal(after.Cert.PublicKey) {
		t.Error("the resumed join changed the key, or the certificate is not for it")
	}
	if m.secret(t, flotillav1.AgentBootstrapSecretName) != nil {
		t.Error("the bootstrap Secret is still there after the resumed join")
	}
}

// TestResumeOfAForgottenRequestRegistersAgain: a hub that no longer knows
// the stored request (its CSR was garbage-collected) makes the agent
// register again with its bootstrap Secret.
func TestResumeOfAForgottenRequestRegistersAgain(t *testing.T) {
	m := newMember(t)
	tok := newToken(t)
	hub := jointest.Start(t, jointest.Options{Token: tok.String()})
	m.writeBootstrap(t, hub.Addr, tok, "east", hub.CAHash)
	ctx1, cancel1 := context.WithCancel(context.Background())
	done := obtainAsync(ctx1, m.keeper(t, hub.Addr, "east"))
	testutil.Eventually(t, "the request stored in the credentials Secret", 30*time.Second, func() error {
		if s := m.secret(t, flotillav1.AgentCredentialsSecretName); s == nil || len(s.Data[KeyRequest]) == 0 {
			return errors.New("no request yet")
		}
		return nil
	})
	cancel1()
	waitErr(t, done, "a stopped join")
	hub.Forget(hub.Requests()[0])

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done = obtainAsync(ctx, m.keeper(t, hub.Addr, "east"))
	testutil.Eventually(t, "a second request", 30*time.Second, func() error {
		if n := len(hub.Requests()); n != 2 {
			return fmt.Errorf("%d requests", n)
		}
		return nil
	})
	hub.Approve(hub.Requests()[1])
	if err := waitErr(t, done, "the join after the forgotten request"); err != nil {
		t.Fatal(err)
	}
	if creds := m.credentials(t); creds.Cert == nil {
		t.Error("no certificate after registering again")
	}
}

// serial is the hexadecimal serial number of the Secret's certificate.
func (m member) serial(t *testing.T) string {
	t.Helper()
	creds := m.credentials(t)
	if creds.Cert == nil {
		return ""
	}
	return creds.Cert.SerialNumber.Text(16)
}

// TestRenewal runs a Keeper with 4-second certificates: it renews at 80 %
// with a new key over mTLS, stores the pair, swaps the Source, and counts
// it; it registers only once.
func TestRenewal(t *testing.T) {
	m := newMember(t)
	tok := newToken(t)
	hub := jointest.Start(t, jointest.Options{Token: tok.String(), AutoApprove: true, Lifetime: 4 * time.Second})
	m.writeBootstrap(t, hub.Addr, tok, "east", hub.CAHash)
	issued := metricValue(t, renewals.WithLabelValues(resultIssued))
	k := m.keeper(t, hub.Addr, "east")
	startKeeper(t, k)
	first := m.credentials(t)
	seen := map[string]bool{first.Cert.SerialNumber.Text(16): true}
	testutil.Eventually(t, "two renewals stored in the Secret and used by the Source", 30*time.Second, func() error {
		creds := m.credentials(t)
		seen[creds.Cert.SerialNumber.Text(16)] = true
		kp, _ := k.cfg.Source.Current()
		if !kp.Cert.Equal(creds.Cert) {
			return errors.New("the Source and the Secret differ")
		}
		if len(seen) < 3 {
			return fmt.Errorf("certificates seen: %d", len(seen))
		}
		return nil
	}, testutil.Every(50*time.Millisecond))
	creds := m.credentials(t)
	if creds.Key.Equal(first.Key) {
		t.Error("the renewal kept the key; it must make a new one")
	}
	regs, renews := hub.Counts()
	if regs != 1 || renews < 2 {
		t.Errorf("the hub saw %d registers and %d renewals; want 1 and at least 2", regs, renews)
	}
	// The count follows the swap (a poll: the test may see the Secret
	// first).
	testutil.Eventually(t, "two issued renewals counted", 10*time.Second, func() error {
		if got := metricValue(t, renewals.WithLabelValues(resultIssued)) - issued; got < 2 {
			return fmt.Errorf("flotilla_agent_certificate_renewals_total{result=issued} rose by %v, want at least 2", got)
		}
		return nil
	})
	if got := metricValue(t, expiry); got < float64(first.Cert.NotAfter.Unix()) {
		t.Errorf("expiry gauge %v is not past the first certificate's end %d", got, first.Cert.NotAfter.Unix())
	}
}

// TestRenewalDeniedKeepsTheCertificate: while the hub refuses renewals the
// Keeper keeps its certificate (in the Source and the Secret) and counts
// the refusals; once the hub renews again, so does the Keeper.
func TestRenewalDeniedKeepsTheCertificate(t *testing.T) {
	m := newMember(t)
	tok := newToken(t)
	hub := jointest.Start(t, jointest.Options{Token: tok.String(), AutoApprove: true, Lifetime: 10 * time.Second})
	m.writeBootstrap(t, hub.Addr, tok, "east", hub.CAHash)
	hub.DenyRenewals("MemberCluster east is not accepted")
	denied := metricValue(t, renewals.WithLabelValues(resultDenied))
	k := m.keeper(t, hub.Addr, "east")
	startKeeper(t, k)
	first := m.serial(t)
	testutil.Eventually(t, "a denied renewal counted", 30*time.Second, func() error {
		if got := metricValue(t, renewals.WithLabelValues(resultDenied)) - denied; got < 1 {
			return errors.New("no denied renewal yet")
		}
		return nil
	}, testutil.Every(20*time.Millisecond))
	kp, _ := k.cfg.Source.Current()
	if got := kp.Cert.SerialNumber.Text(16); got != first || m.serial(t) != first {
		t.Fatalf("after a denied renewal the Source has %s and the Secret %s; want the kept %s", got, m.serial(t), first)
	}
	m.waitEvent(t, ReasonRenewFailed, "not accepted")
	hub.DenyRenewals("")
	testutil.Eventually(t, "a renewal once the hub allows it", 30*time.Second, func() error {
		if s := m.serial(t); s == first {
			return errors.New("not renewed yet")
		}
		return nil
	}, testutil.Every(50*time.Millisecond))
}

// metricValue reads a counter or gauge.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if c := out.GetCounter(); c != nil {
		return c.GetValue()
	}
	return out.GetGauge().GetValue()
}

// startKeeper runs k until the test ends (then stops it and checks that it
// ended cleanly) and waits for its Source to hold a certificate.
func startKeeper(t *testing.T, k *Keeper) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := waitErr(t, done, "the Keeper"); err != nil {
			t.Errorf("the Keeper ended with %v", err)
		}
	})
	select {
	case <-k.cfg.Source.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the Source held no certificate within 30s")
	}
}
