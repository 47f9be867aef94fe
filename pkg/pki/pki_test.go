package pki

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestIssueAndVerifyAgent(t *testing.T) {
	ca, err := NewCA("test-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := ca.IssueAgent("east-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	cluster, err := VerifyAgent([]*x509.Certificate{agent.Cert}, roots, time.Now())
	if err != nil || cluster != "east-1" {
		t.Fatalf("VerifyAgent = %q, %v; want east-1", cluster, err)
	}
	if got := agent.Cert.URIs[0].String(); got != "flotilla://cluster/east-1" {
		t.Errorf("URI SAN = %s", got)
	}

	other, err := NewCA("other-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(other.Cert)
	if _, err := VerifyAgent([]*x509.Certificate{agent.Cert}, otherRoots, time.Now()); err == nil {
		t.Error("an agent certificate verified against a CA that did not issue it")
	}

	// A hub certificate is for serving; it must not pass as an agent.
	hub, err := ca.IssueHub(nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyAgent([]*x509.Certificate{hub.Cert}, roots, time.Now()); err == nil {
		t.Error("a hub certificate was accepted as an agent certificate")
	}
	if _, err := VerifyAgent(nil, roots, time.Now()); err == nil {
		t.Error("an empty chain was accepted")
	}
}

func TestIssue(t *testing.T) {
	ca, err := NewCA("test-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		DNSNames:    []string{"kubernetes.default"},
		IPAddresses: []net.IP{net.ParseIP("10.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	// Longer than the CA: the leaf must end with it.
	kp, err := ca.Issue(tmpl, 2*DefaultCAValidity)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.SerialNumber != nil || !tmpl.NotAfter.IsZero() {
		t.Error("Issue changed the template it was given")
	}
	c := kp.Cert
	if c.Subject.CommonName != "admin" || len(c.Subject.Organization) != 1 || c.Subject.Organization[0] != "system:masters" {
		t.Errorf("subject = %v, want CN=admin, O=system:masters", c.Subject)
	}
	if c.NotAfter.After(ca.Cert.NotAfter) {
		t.Errorf("the leaf ends %s, after its CA (%s)", c.NotAfter, ca.Cert.NotAfter)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, usage := range tmpl.ExtKeyUsage {
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "kubernetes.default", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("verifying for usage %v: %v", usage, err)
		}
	}
	if err := c.VerifyHostname("10.0.0.1"); err != nil {
		t.Error(err)
	}
	if _, err := ca.Issue(&x509.Certificate{Subject: pkix.Name{CommonName: "sub-ca"}, IsCA: true}, 0); err == nil {
		t.Error("Issue made a CA certificate")
	}
}

func TestIssueHubNames(t *testing.T) {
	ca, err := NewCA("test-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	hub, err := ca.IssueHub([]string{"hub.example", "10.1.2.3", "localhost", " "}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"127.0.0.1", "::1", "localhost", "hub.example", "10.1.2.3"} {
		if err := hub.Cert.VerifyHostname(name); err != nil {
			t.Errorf("hub certificate not valid for %s: %v", name, err)
		}
	}
	if len(hub.Cert.DNSNames) != 2 {
		t.Errorf("DNS names = %v, want localhost and hub.example once each", hub.Cert.DNSNames)
	}
	if hub.Cert.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("key algorithm = %v, want ECDSA", hub.Cert.PublicKeyAlgorithm)
	}
}

func TestParseClusterURI(t *testing.T) {
	tests := []struct {
		uri     string
		cluster string
		ours    bool
		wantErr bool
	}{
		{uri: "flotilla://cluster/east-1", cluster: "east-1", ours: true},
		{uri: "spiffe://cluster/east-1"},
		{uri: "flotilla://node/east-1"},
		{uri: "flotilla://cluster/", ours: true, wantErr: true},
		{uri: "flotilla://cluster/East", ours: true, wantErr: true},
		{uri: "flotilla://cluster/a/b", ours: true, wantErr: true},
		{uri: "flotilla://cluster/a?x=1", ours: true, wantErr: true},
		{uri: "flotilla://cluster/" + strings.Repeat("a", 47), ours: true, wantErr: true},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.uri)
		if err != nil {
			t.Fatal(err)
		}
		cluster, ours, err := ParseClusterURI(u)
		if cluster != tt.cluster || ours != tt.ours || (err != nil) != tt.wantErr {
			t.Errorf("ParseClusterURI(%s) = %q, %v, %v; want %q, %v, error %v", tt.uri, cluster, ours, err, tt.cluster, tt.ours, tt.wantErr)
		}
	}
}

func TestClusterFromCertificateRefusesAmbiguity(t *testing.T) {
	a, b := ClusterURI("a"), ClusterURI("b")
	cert := &x509.Certificate{URIs: []*url.URL{a, b}}
	if _, err := ClusterFromCertificate(cert); err == nil {
		t.Error("a certificate naming two clusters was accepted")
	}
	if _, err := ClusterFromCertificate(&x509.Certificate{}); err == nil {
		t.Error("a certificate naming no cluster was accepted")
	}
}

func TestEnsureIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	ca, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if issued, err := EnsureHub(dir, ca, []string{"hub.local"}); err != nil || !issued {
		t.Fatalf("first EnsureHub = %v, %v; want a new certificate", issued, err)
	}
	if issued, err := EnsureAgent(dir, ca, "east"); err != nil || !issued {
		t.Fatalf("first EnsureAgent = %v, %v; want a new certificate", issued, err)
	}
	before := readAll(t, dir)

	ca2, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !ca2.Cert.Equal(ca.Cert) {
		t.Fatal("EnsureCA replaced an existing CA")
	}
	if issued, err := EnsureHub(dir, ca2, []string{"hub.local"}); err != nil || issued {
		t.Errorf("second EnsureHub = %v, %v; want the existing certificate kept", issued, err)
	}
	if issued, err := EnsureAgent(dir, ca2, "east"); err != nil || issued {
		t.Errorf("second EnsureAgent = %v, %v; want the existing certificate kept", issued, err)
	}
	if after := readAll(t, dir); after != before {
		t.Error("files changed on a no-op run")
	}
	if fi, err := os.Stat(filepath.Join(dir, AgentKeyFile("east"))); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("agent key mode = %v, %v; want 0600", fi.Mode().Perm(), err)
	}

	// A new name for the hub needs a new certificate.
	if issued, err := EnsureHub(dir, ca2, []string{"hub.local", "hub2.local"}); err != nil || !issued {
		t.Errorf("EnsureHub with a new host = %v, %v; want a new certificate", issued, err)
	}
	// A certificate from another CA is replaced.
	other, err := NewCA("other", 0)
	if err != nil {
		t.Fatal(err)
	}
	if issued, err := EnsureAgent(dir, other, "east"); err != nil || !issued {
		t.Errorf("EnsureAgent under another CA = %v, %v; want a new certificate", issued, err)
	}
}

func readAll(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		sb.WriteString(e.Name())
		sb.Write(data)
	}
	return sb.String()
}

// TestTLSConfigsHandshake connects the two configurations over loopback and
// checks that the server sees the agent's cluster.
func TestTLSConfigsHandshake(t *testing.T) {
	dir := t.TempDir()
	ca, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureHub(dir, ca, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureAgent(dir, ca, "west"); err != nil {
		t.Fatal(err)
	}
	p := func(name string) string { return filepath.Join(dir, name) }
	serverCfg, err := ServerTLSConfig(p(HubCertFile), p(HubKeyFile), p(CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	clientCfg, err := ClientTLSConfig(p(AgentCertFile("west")), p(AgentKeyFile("west")), p(CACertFile), "localhost")
	if err != nil {
		t.Fatal(err)
	}
	lis, err := tls.Listen("tcp", "127.0.0.1:0", serverCfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	got := make(chan string, 1)
	go func() {
		c, err := lis.Accept()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			got <- err.Error()
			return
		}
		cluster, err := VerifyAgent(tc.ConnectionState().PeerCertificates, serverCfg.ClientCAs, time.Now())
		if err != nil {
			got <- err.Error()
			return
		}
		got <- cluster
	}()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", lis.Addr().String(), clientCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	select {
	case cluster := <-got:
		if cluster != "west" {
			t.Errorf("server saw %q, want west", cluster)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("server did not finish the handshake within 30s")
	}
}

// FuzzParseClusterURI feeds arbitrary URI SANs, which come from a peer's
// certificate, to the parser: it must never panic, and whatever it accepts
// must be a valid cluster name that round-trips.
func FuzzParseClusterURI(f *testing.F) {
	for _, s := range []string{"flotilla://cluster/a", "flotilla://cluster/a/b", "flotilla://cluster/%2e%2e", "flotilla://user@cluster/x", "x:y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		cluster, ok, err := ParseClusterURI(u)
		if err != nil || !ok {
			return
		}
		if err := ValidateClusterName(cluster); err != nil {
			t.Fatalf("accepted invalid cluster %q from %q: %v", cluster, s, err)
		}
		if got, _, err := ParseClusterURI(ClusterURI(cluster)); err != nil || got != cluster {
			t.Fatalf("ClusterURI(%q) does not round-trip: %q, %v", cluster, got, err)
		}
	})
}

// TestVerifyAgentChainExpiry checks that VerifyAgentChain says until when
// the chain holds (the leaf's NotAfter here, since a leaf never outlives
// its CA), and refuses the chain after that.
func TestVerifyAgentChainExpiry(t *testing.T) {
	ca, err := NewCA("test-ca", 0)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := ca.IssueAgent("east-1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	cluster, notAfter, err := VerifyAgentChain([]*x509.Certificate{agent.Cert}, roots, time.Now())
	if err != nil || cluster != "east-1" || !notAfter.Equal(agent.Cert.NotAfter) {
		t.Fatalf("VerifyAgentChain = %q, %s, %v; want east-1, %s", cluster, notAfter, err, agent.Cert.NotAfter)
	}
	if _, _, err := VerifyAgentChain([]*x509.Certificate{agent.Cert}, roots, agent.Cert.NotAfter.Add(time.Second)); err == nil {
		t.Error("an expired agent certificate was accepted")
	}
}

// TestClientTLSConfigReloads checks that an agent's TLS configuration
// presents the certificate in its files as they are at each handshake,
// and keeps the last good one when the files hold garbage or another
// cluster's certificate.
func TestClientTLSConfigReloads(t *testing.T) {
	dir := t.TempDir()
	ca, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, AgentCertFile("east")), filepath.Join(dir, AgentKeyFile("east"))
	write := func(cluster string) *KeyPair {
		kp, err := ca.IssueAgent(cluster, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := kp.WriteFiles(certFile, keyFile); err != nil {
			t.Fatal(err)
		}
		return kp
	}
	first := write("east")
	cfg, err := ClientTLSConfig(certFile, keyFile, filepath.Join(dir, CACertFile), "")
	if err != nil {
		t.Fatal(err)
	}
	presented := func() *x509.Certificate {
		c, err := cfg.GetClientCertificate(&tls.CertificateRequestInfo{})
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf
	}
	if !presented().Equal(first.Cert) {
		t.Fatal("the first certificate is not the one presented")
	}
	renewed := write("east")
	if !presented().Equal(renewed.Cert) {
		t.Error("the renewed certificate in the files is not presented")
	}
	write("west")
	if !presented().Equal(renewed.Cert) {
		t.Error("another cluster's certificate replaced the agent's")
	}
	if err := os.WriteFile(certFile, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !presented().Equal(renewed.Cert) {
		t.Error("unreadable files replaced the last good certificate")
	}
}
