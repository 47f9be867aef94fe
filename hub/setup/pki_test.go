package setup

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/hubca"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/test/envtestenv"
)

// TestSelfManagedPKI runs the hub without --cert-dir, as its service
// account with only the RBAC deploy/hub ships, against a real apiserver:
//   - the first start creates the hub CA Secret; the sync server and the
//     webhook server present a serving certificate from it (with the
//     lifetime and extra host asked for) followed by the CA, which a
//     client that knows only the CA's hash verifies, while a client pinned
//     to another CA is refused naming both hashes;
//   - the webhook configurations' caBundle becomes the hub CA;
//   - the expiry metric reports the served leaf and the CA;
//   - a second start reuses the Secret untouched (same CA hash) and
//     serves a new leaf from it;
//   - a CA Secret that does not parse stops a third start with an error
//     naming it, is left as it is, and the running hub keeps serving.
func TestSelfManagedPKI(t *testing.T) {
	ctx := context.Background()
	admin, hubCfg, webhooks := shippedHub(t)
	const ns = flotillav1.SystemNamespace
	caKey := client.ObjectKey{Namespace: ns, Name: flotillav1.HubCASecretName}
	deleteCA := func() {
		err := admin.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: caKey.Namespace, Name: caKey.Name}})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting the hub CA Secret: %v", err)
		}
	}
	// Start from no CA; leave neither it nor failing webhooks behind.
	deleteCA()
	t.Cleanup(func() {
		for _, o := range webhooks {
			_ = admin.Delete(context.Background(), o)
		}
		deleteCA()
	})

	const extraHost = "hub.example.test"
	logs := &testutil.LogBuffer{}
	reg := prometheus.NewRegistry()
	first := startSelfManagedHub(t, hubCfg, logs, reg, extraHost)

	secret := &corev1.Secret{}
	if err := admin.Get(ctx, caKey, secret); err != nil {
		t.Fatalf("the hub CA Secret after the first start: %v", err)
	}
	if secret.Type != corev1.SecretTypeTLS {
		t.Errorf("the hub CA Secret has type %q, want %q", secret.Type, corev1.SecretTypeTLS)
	}
	ca, err := hubca.FromSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	pin := bootstrap.CAHash(ca.Cert)

	syncLeaf, err := dialPinned(first.syncAddr, pin, "127.0.0.1")
	if err != nil {
		t.Fatalf("a client pinned to the hub CA, on the sync server: %v", err)
	}
	if !slices.Contains(syncLeaf.DNSNames, extraHost) || !slices.Contains(syncLeaf.DNSNames, "flotilla-hub.flotilla-system.svc") {
		t.Errorf("the serving certificate names %v, want --serving-hosts' %s and the Services' names", syncLeaf.DNSNames, extraHost)
	}
	if life := syncLeaf.NotAfter.Sub(syncLeaf.NotBefore); life < 2*time.Hour || life > 2*time.Hour+15*time.Minute {
		t.Errorf("the serving certificate is valid for %s, want the 2h asked for (plus its backdating)", life)
	}
	other, err := hubca.IssueServing(ca, nil, time.Now(), time.Hour) // Any certificate that is not the CA.
	if err != nil {
		t.Fatal(err)
	}
	wrongPin := bootstrap.CAHash(other.Leaf)
	if _, err := dialPinned(first.syncAddr, wrongPin, "127.0.0.1"); err == nil || !strings.Contains(err.Error(), wrongPin) || !strings.Contains(err.Error(), pin) {
		t.Errorf("a client pinned to another key: %v, want a refusal naming both hashes", err)
	}
	if _, err := dialPinned(first.syncAddr, pin, "127.0.0.1"); err != nil {
		t.Errorf("a pinned client after the refusal: %v", err)
	}

	// The webhook server: the apiserver's way, trusting the CA by name.
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	var webhookChain []*x509.Certificate
	testutil.Eventually(t, "the webhook server completing a handshake for flotilla-hub-webhook.flotilla-system.svc", 30*time.Second, func() error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", first.webhookAddr, &tls.Config{
			RootCAs: roots, ServerName: "flotilla-hub-webhook.flotilla-system.svc", MinVersion: tls.VersionTLS13,
		})
		if err != nil {
			return err
		}
		defer conn.Close()
		webhookChain = conn.ConnectionState().PeerCertificates
		return nil
	})
	if len(webhookChain) != 2 || !webhookChain[0].Equal(syncLeaf) || !webhookChain[1].Equal(ca.Cert) {
		t.Errorf("the webhook server sent %d certificates, want [the sync server's leaf, the hub CA]", len(webhookChain))
	}

	testutil.Eventually(t, "the hub writing the hub CA into both webhook configurations' caBundle", 30*time.Second, func() error {
		return caBundleIs(ctx, admin, secret.Data[corev1.TLSCertKey])
	})

	for _, want := range []struct {
		certificate string
		at          time.Time
	}{{"serving", syncLeaf.NotAfter}, {"ca", ca.Cert.NotAfter}} {
		got, err := expiryMetric(reg, want.certificate)
		if err != nil {
			t.Error(err)
		} else if got != float64(want.at.Unix()) {
			t.Errorf("flotilla_hub_certificate_expiry_timestamp_seconds{certificate=%q} = %v, want %d", want.certificate, got, want.at.Unix())
		}
	}
	first.stop()

	// A second start: the same CA, a new leaf.
	second := startSelfManagedHub(t, hubCfg, logs, prometheus.NewRegistry(), extraHost)
	again := &corev1.Secret{}
	if err := admin.Get(ctx, caKey, again); err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != secret.ResourceVersion || !bytes.Equal(again.Data[corev1.TLSCertKey], secret.Data[corev1.TLSCertKey]) {
		t.Errorf("the second start changed the hub CA Secret (resourceVersion %s -> %s)", secret.ResourceVersion, again.ResourceVersion)
	}
	secondLeaf, err := dialPinned(second.syncAddr, pin, "127.0.0.1")
	if err != nil {
		t.Fatalf("a client pinned to the first start's CA hash, on the second start: %v", err)
	}
	if secondLeaf.SerialNumber.Cmp(syncLeaf.SerialNumber) == 0 {
		t.Error("the second start serves the first start's leaf; serving certificates are issued per start, in memory")
	}

	// A broken CA Secret stops a new start, names the Secret, and is
	// neither replaced nor felt by the running hub.
	again.Data[corev1.TLSCertKey] = []byte("not a certificate")
	if err := admin.Update(ctx, again); err != nil {
		t.Fatal(err)
	}
	_, err = New(ctx, selfManagedOptions(hubCfg, logs, prometheus.NewRegistry(), extraHost, func(string) {}))
	if err == nil || !strings.Contains(err.Error(), flotillav1.HubCASecretName) {
		t.Errorf("New with a CA Secret that does not parse: %v, want an error naming %s", err, flotillav1.HubCASecretName)
	}
	broken := &corev1.Secret{}
	if err := admin.Get(ctx, caKey, broken); err != nil {
		t.Fatal(err)
	}
	if broken.ResourceVersion != again.ResourceVersion {
		t.Error("the failed start rewrote the hub CA Secret; agents pinned the CA inside, it must be restored, not replaced")
	}
	if _, err := dialPinned(second.syncAddr, pin, "127.0.0.1"); err != nil {
		t.Errorf("the running hub after another's failed start: %v", err)
	}
	second.stop()

	out := logs.String()
	if !strings.Contains(out, pin) {
		t.Errorf("the hub did not log its CA hash (%s), which `kubectl flotilla join` needs", pin)
	}
	for _, secret := range []string{"-----BEGIN", "PRIVATE KEY"} {
		if strings.Contains(out, secret) {
			t.Errorf("the hub's log holds key material (%q)", secret)
		}
	}
	if strings.Contains(out, "forbidden") {
		t.Errorf("the hub, run with deploy/hub's RBAC, was refused something:\n%s", grepLines(out, "forbidden"))
	}
}

// runningHub is a hub started by startSelfManagedHub.
type runningHub struct {
	syncAddr, webhookAddr string
	stop                  func()
}

func selfManagedOptions(cfg *rest.Config, logs *testutil.LogBuffer, reg *prometheus.Registry, extraHost string, onListening func(string)) Options {
	return Options{
		Config:                  cfg,
		Namespace:               flotillav1.SystemNamespace,
		MetricsAddr:             "0",
		ProbeAddr:               "0",
		SyncAddr:                "127.0.0.1:0",
		WebhookAddr:             "127.0.0.1:0",
		KeepWebhookCABundle:     true,
		WebhookCABundleInterval: 300 * time.Millisecond,
		Certificates:            CertificateOptions{ServingLifetime: 2 * time.Hour, ServingHosts: []string{extraHost}},
		Logger:                  logs.Logger(),
		Registerer:              reg,
		SkipNameValidation:      true,
		OnSyncListening:         onListening,
	}
}

// startSelfManagedHub starts a self-managed hub (no leader election) and
// waits for its sync server to listen.
func startSelfManagedHub(t *testing.T, cfg *rest.Config, logs *testutil.LogBuffer, reg *prometheus.Registry, extraHost string) *runningHub {
	t.Helper()
	listening := make(chan string, 1)
	opts := selfManagedOptions(cfg, logs, reg, extraHost, func(a string) { listening <- a })
	opts.WebhookAddr = freeLocalAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	hub, err := New(ctx, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- hub.Manager.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("the hub stopped with %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("the hub did not stop within 30s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	select {
	case addr := <-listening:
		return &runningHub{syncAddr: addr, webhookAddr: opts.WebhookAddr, stop: stop}
	case <-time.After(60 * time.Second):
		t.Fatalf("the self-managed hub did not serve agents within 60s; its log:\n%s", logs)
	}
	return nil
}

// dialPinned makes a TLS handshake the way a joining agent does, knowing
// only the CA's hash, and returns the leaf the server presented.
func dialPinned(addr, pin, serverName string) (*x509.Certificate, error) {
	var leaf *x509.Certificate
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{
		MinVersion: tls.VersionTLS13,
		// VerifyPeerCertificate is the verification: the pinned CA only.
		InsecureSkipVerify: true,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if _, err := bootstrap.VerifyPinned(raw, pin, serverName); err != nil {
				return err
			}
			var err error
			leaf, err = x509.ParseCertificate(raw[0])
			return err
		},
	})
	if err != nil {
		return nil, err
	}
	conn.Close()
	return leaf, nil
}

// caBundleIs checks both shipped webhook configurations' caBundle.
func caBundleIs(ctx context.Context, c client.Client, want []byte) error {
	m := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: "flotilla-hub"}, m); err != nil {
		return err
	}
	v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: "flotilla-hub"}, v); err != nil {
		return err
	}
	if len(m.Webhooks) != 1 || len(v.Webhooks) != 1 {
		return fmt.Errorf("want one webhook in each configuration, got %d and %d", len(m.Webhooks), len(v.Webhooks))
	}
	if !bytes.Equal(m.Webhooks[0].ClientConfig.CABundle, want) || !bytes.Equal(v.Webhooks[0].ClientConfig.CABundle, want) {
		return errors.New("caBundle is not the hub CA yet")
	}
	return nil
}

// expiryMetric reads flotilla_hub_certificate_expiry_timestamp_seconds
// for certificate from reg.
func expiryMetric(reg *prometheus.Registry, certificate string) (float64, error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range families {
		if f.GetName() != "flotilla_hub_certificate_expiry_timestamp_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "certificate" && l.GetValue() == certificate {
					return m.GetGauge().GetValue(), nil
				}
			}
		}
	}
	return 0, fmt.Errorf("flotilla_hub_certificate_expiry_timestamp_seconds{certificate=%q} is not registered", certificate)
}

// TestCertificateFlagsValidated checks that New refuses a serving
// certificate lifetime under a minute and a serving host that is neither
// a DNS name nor an IP address, naming the flag, before it touches the
// apiserver, and accepts the zero values (the defaults).
func TestCertificateFlagsValidated(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts CertificateOptions
		want string // "" means valid
	}{
		{"defaults", CertificateOptions{}, ""},
		{"a minute", CertificateOptions{ServingLifetime: time.Minute}, ""},
		{"names and addresses", CertificateOptions{ServingHosts: []string{"hub.example.com", "10.1.2.3", "::1"}}, ""},
		{"59 seconds", CertificateOptions{ServingLifetime: 59 * time.Second}, "--serving-certificate-lifetime"},
		{"negative lifetime", CertificateOptions{ServingLifetime: -time.Hour}, "--serving-certificate-lifetime"},
		{"a URL", CertificateOptions{ServingHosts: []string{"https://hub.example.com"}}, "--serving-hosts"},
		{"a host and port", CertificateOptions{ServingHosts: []string{"hub.example.com:9443"}}, "--serving-hosts"},
		{"empty", CertificateOptions{ServingHosts: []string{""}}, "--serving-hosts"},
	} {
		opts := Options{Certificates: tt.opts}
		err := validateOptions(opts)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want no error", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: err = %v, want one naming %s", tt.name, err, tt.want)
		}
		if tt.want == "" {
			continue
		}
		opts.Config = &rest.Config{Host: "https://127.0.0.1:1"}
		if _, err := New(context.Background(), opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New with %s: err = %v, want one naming %s", tt.name, err, tt.want)
		}
	}
}

// TestDefaultServingHosts checks the names a self-managed serving
// certificate always carries: deploy/hub's three Services in the hub's
// namespace, in the forms clients resolve.
func TestDefaultServingHosts(t *testing.T) {
	got := DefaultServingHosts("hub-ns")
	for _, want := range []string{
		"flotilla-hub.hub-ns.svc", "flotilla-hub-headless.hub-ns.svc", "flotilla-hub-webhook.hub-ns.svc",
		"flotilla-hub.hub-ns", "flotilla-hub-webhook.hub-ns.svc.cluster.local",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("DefaultServingHosts(hub-ns) = %v, missing %s", got, want)
		}
	}
	if len(got) != 9 {
		t.Errorf("DefaultServingHosts(hub-ns) has %d names, want 9 (3 Services, 3 forms)", len(got))
	}
}

// TestSelfManagedWebhookTrustedByTheApiserver runs a self-managed hub that
// registers its webhook with a real apiserver (--register-webhook-url),
// and has the apiserver call it: a MyApp with an invalid image is refused
// by the webhook's own message, so the apiserver verified the in-memory
// serving certificate against the caBundle the hub gave it, the hub CA.
func TestSelfManagedWebhookTrustedByTheApiserver(t *testing.T) {
	ctx := context.Background()
	cfg := sharedEnv.Config(t)
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{envtestenv.CRDDir()}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "webhook-ca-test"
	addr := freeLocalAddr(t)
	logs := &testutil.LogBuffer{}
	hub, err := New(ctx, Options{
		Config: cfg, Namespace: ns, MetricsAddr: "0", ProbeAddr: "0",
		WebhookAddr: addr, RegisterWebhookURL: "https://" + addr,
		Logger: logs.Logger(), Registerer: prometheus.NewRegistry(), SkipNameValidation: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The registered configurations call this hub only; leave none
	// behind for the package's other tests.
	t.Cleanup(func() {
		_ = admin.Delete(context.Background(), &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-hub"}})
		_ = admin.Delete(context.Background(), &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-hub"}})
	})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- hub.Manager.Start(runCtx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the hub did not stop within 30s of its context ending")
		}
	})

	secret := &corev1.Secret{}
	if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: flotillav1.HubCASecretName}, secret); err != nil {
		t.Fatalf("the hub CA Secret in %s: %v", ns, err)
	}
	if err := caBundleIs(ctx, admin, secret.Data[corev1.TLSCertKey]); err != nil {
		t.Errorf("the registered webhook configurations: %v", err)
	}
	app := &flotillav1.MyApp{
		ObjectMeta: metav1.ObjectMeta{Name: "bad-image", Namespace: "default"},
		Spec:       flotillav1.MyAppSpec{Image: "nginx:1.0:2.0", Replicas: ptr.To[int32](1)},
	}
	testutil.Eventually(t, "the apiserver calling the webhook over TLS and getting its refusal", 30*time.Second, func() error {
		err := admin.Create(ctx, app.DeepCopy())
		if err == nil {
			_ = admin.Delete(ctx, app.DeepCopy())
			return errors.New("a MyApp with an invalid image was admitted")
		}
		if !strings.Contains(err.Error(), "must be an image reference") {
			return err
		}
		return nil
	})
}

// TestProvidedPKI checks what --cert-dir gives the rest of the hub: the
// CA to sign agents with only when ca.key is there (and an error naming
// it when it does not load), agents trusted by ca.crt, or by
// --agent-ca-file instead, and a served chain that ends with ca.crt.
func TestProvidedPKI(t *testing.T) {
	newDir := func(withKey bool) (string, *pki.KeyPair) {
		dir := t.TempDir()
		ca, err := pki.EnsureCA(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pki.EnsureHub(dir, ca, nil); err != nil {
			t.Fatal(err)
		}
		if !withKey {
			if err := os.Remove(filepath.Join(dir, pki.CAKeyFile)); err != nil {
				t.Fatal(err)
			}
		}
		return dir, ca
	}
	agentFrom := func(ca *pki.KeyPair) []*x509.Certificate {
		kp, err := ca.IssueAgent("member-1", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return []*x509.Certificate{kp.Cert}
	}

	dir, ca := newDir(true)
	p, err := providedPKI(Options{CertDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if p.CA == nil || !p.CA.Cert.Equal(ca.Cert) {
		t.Error("with ca.key in --cert-dir, CA is not ca.crt's key pair")
	}
	if _, err := pki.VerifyAgent(agentFrom(ca), p.ClientCAs, time.Now()); err != nil {
		t.Errorf("an agent certificate from ca.crt: %v", err)
	}
	cert, err := p.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(cert.Certificate); n != 2 || !bytes.Equal(cert.Certificate[n-1], ca.Cert.Raw) {
		t.Errorf("the served chain has %d certificates and does not end with ca.crt", n)
	}

	dir, ca = newDir(false)
	if p, err = providedPKI(Options{CertDir: dir}); err != nil {
		t.Fatal(err)
	}
	if p.CA != nil {
		t.Error("without ca.key in --cert-dir, the hub has a CA to sign with")
	}
	other := newCAForTest(t)
	otherFile := filepath.Join(t.TempDir(), "agents.crt")
	if err := os.WriteFile(otherFile, other.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if p, err = providedPKI(Options{CertDir: dir, AgentCAFile: otherFile}); err != nil {
		t.Fatal(err)
	}
	if _, err := pki.VerifyAgent(agentFrom(other), p.ClientCAs, time.Now()); err != nil {
		t.Errorf("an agent certificate from --agent-ca-file: %v", err)
	}
	if _, err := pki.VerifyAgent(agentFrom(ca), p.ClientCAs, time.Now()); err == nil {
		t.Error("with --agent-ca-file, an agent certificate from ca.crt is still trusted")
	}

	if err := os.WriteFile(filepath.Join(dir, pki.CAKeyFile), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := providedPKI(Options{CertDir: dir}); err == nil || !strings.Contains(err.Error(), pki.CAKeyFile) {
		t.Errorf("a ca.key that does not load: %v, want an error naming %s", err, pki.CAKeyFile)
	}
}

func newCAForTest(t *testing.T) *pki.KeyPair {
	t.Helper()
	ca, err := pki.NewCA("other", 0)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
