package testbed

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
)

// TestClusterPKI checks what the control plane is given without starting
// it: every pair loads as crypto/tls loads it, chains to its CA for its
// use, and a second generate keeps the identity a kubeconfig trusts.
func TestClusterPKI(t *testing.T) {
	p := clusterPKI{dir: t.TempDir()}
	if err := p.generate(); err != nil {
		t.Fatal(err)
	}
	pool := func(name string) *x509.CertPool {
		b, err := os.ReadFile(p.path(name + ".crt"))
		if err != nil {
			t.Fatal(err)
		}
		cp := x509.NewCertPool()
		if !cp.AppendCertsFromPEM(b) {
			t.Fatalf("%s.crt holds no certificate", name)
		}
		return cp
	}
	for _, tc := range []struct {
		pair, ca string
		usage    x509.ExtKeyUsage
		host     string
	}{
		{pair: "apiserver", ca: "ca", usage: x509.ExtKeyUsageServerAuth, host: "127.0.0.1"},
		{pair: "apiserver", ca: "ca", usage: x509.ExtKeyUsageServerAuth, host: "kubernetes.default.svc"},
		{pair: "admin", ca: "ca", usage: x509.ExtKeyUsageClientAuth},
		{pair: "front-proxy-client", ca: "front-proxy-ca", usage: x509.ExtKeyUsageClientAuth},
	} {
		kp, err := tls.LoadX509KeyPair(p.path(tc.pair+".crt"), p.path(tc.pair+".key"))
		if err != nil {
			t.Fatalf("loading %s: %v", tc.pair, err)
		}
		_, err = kp.Leaf.Verify(x509.VerifyOptions{Roots: pool(tc.ca), DNSName: tc.host, KeyUsages: []x509.ExtKeyUsage{tc.usage}})
		if err != nil {
			t.Errorf("%s for %v (%q) does not verify against %s: %v", tc.pair, tc.usage, tc.host, tc.ca, err)
		}
	}
	admin, err := tls.LoadX509KeyPair(p.path("admin.crt"), p.path("admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	if s := admin.Leaf.Subject; s.CommonName != "admin" || len(s.Organization) != 1 || s.Organization[0] != "system:masters" {
		t.Errorf("admin subject = %v: the apiserver would not see user admin in group system:masters", s)
	}
	if _, err := os.Stat(p.path("sa.pub")); err != nil {
		t.Error(err)
	}

	before, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.generate(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("a second generate replaced the CA")
	}
}
