package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

func csrPEM(t *testing.T, key any, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func TestParseAgentCSR(t *testing.T) {
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	rsa2048, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsa1024, _ := rsa.GenerateKey(rand.Reader, 1024)
	uri := func(s string) []*url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return []*url.URL{u}
	}
	good, err := NewAgentCSR(p256, "east")
	if err != nil {
		t.Fatal(err)
	}
	// A valid request whose signature no longer matches its contents:
	// the requester does not hold the key it names.
	block, _ := pem.Decode(good)
	tampered := append([]byte(nil), block.Bytes...)
	tampered[len(tampered)-3] ^= 0xff
	badSig := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: tampered})

	for _, tc := range []struct {
		name    string
		pem     []byte
		cluster string
		wantErr string // "" for accepted
	}{
		{"P-256 with the cluster's URI SAN", good, "east", ""},
		{"RSA 2048", csrPEM(t, rsa2048, &x509.CertificateRequest{URIs: uri("flotilla://cluster/east")}), "east", ""},
		{"another cluster's name", good, "west", `names cluster "east" in its URI SAN, not "west"`},
		{"invalid cluster name", good, "East!", "not valid"},
		{"empty", nil, "east", "empty"},
		{"not PEM", []byte("hello"), "east", "not a PEM CERTIFICATE REQUEST"},
		{"a certificate instead", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes}), "east", "not a PEM CERTIFICATE REQUEST"},
		{"two blocks", append(append([]byte(nil), good...), good...), "east", "more than one PEM block"},
		{"too large", append(append([]byte(nil), good...), make([]byte, MaxCSRBytes)...), "east", "more than the"},
		{"bad signature", badSig, "east", "signature"},
		{"P-384", csrPEM(t, p384, &x509.CertificateRequest{URIs: uri("flotilla://cluster/east")}), "east", "use P-256"},
		{"RSA 1024", csrPEM(t, rsa1024, &x509.CertificateRequest{URIs: uri("flotilla://cluster/east")}), "east", "RSA of 1024 bits"},
		{"no SAN", csrPEM(t, p256, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "east"}}), "east", "0 URI SANs"},
		{"two URI SANs", csrPEM(t, p256, &x509.CertificateRequest{URIs: append(uri("flotilla://cluster/east"), uri("flotilla://cluster/west")...)}), "east", "2 URI SANs"},
		{"a DNS SAN beside", csrPEM(t, p256, &x509.CertificateRequest{URIs: uri("flotilla://cluster/east"), DNSNames: []string{"hub.example.com"}}), "east", "DNS, IP or e-mail"},
		{"an IP SAN beside", csrPEM(t, p256, &x509.CertificateRequest{URIs: uri("flotilla://cluster/east"), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}), "east", "DNS, IP or e-mail"},
		{"a foreign URI", csrPEM(t, p256, &x509.CertificateRequest{URIs: uri("spiffe://example.org/east")}), "east", "not of the form"},
		{"a malformed cluster URI", csrPEM(t, p256, &x509.CertificateRequest{URIs: uri("flotilla://cluster/east/x")}), "east", "must be exactly"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			csr, err := ParseAgentCSR(tc.pem, tc.cluster)
			if tc.wantErr == "" {
				if err != nil || csr == nil {
					t.Fatalf("ParseAgentCSR = %v, %v; want the request", csr, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ParseAgentCSR error = %v; want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestSignAgentCSR(t *testing.T) {
	ca, err := NewCA("test-ca", 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csrData, _ := NewAgentCSR(key, "east")
	csr, err := ParseAgentCSR(csrData, "east")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tc := range []struct {
		name         string
		cluster, uid string
		validity     time.Duration
		wantNotAfter time.Time
		wantErr      string
	}{
		{name: "join-issued: carries the member UID", cluster: "east", uid: "0b8f2a3c-1111-2222-3333-444455556666", validity: time.Hour, wantNotAfter: now.Add(time.Hour)},
		{name: "without a UID", cluster: "east", validity: 30 * time.Minute, wantNotAfter: now.Add(30 * time.Minute)},
		{name: "never outlives the CA", cluster: "east", validity: 30 * 24 * time.Hour, wantNotAfter: ca.Cert.NotAfter},
		{name: "the label's cluster must be the request's", cluster: "west", validity: time.Hour, wantErr: `not "west"`},
		{name: "zero validity", cluster: "east", validity: 0, wantErr: "not positive"},
		{name: "UID too long", cluster: "east", uid: strings.Repeat("u", 65), validity: time.Hour, wantErr: "longer than 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert, err := ca.SignAgentCSR(csr, tc.cluster, tc.uid, tc.validity, now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("SignAgentCSR error = %v; want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !cert.NotAfter.Equal(tc.wantNotAfter.Truncate(time.Second)) {
				t.Errorf("NotAfter = %s, want %s", cert.NotAfter, tc.wantNotAfter.Truncate(time.Second))
			}
			if want := now.Add(-time.Minute).Truncate(time.Second); !cert.NotBefore.Equal(want) {
				t.Errorf("NotBefore = %s, want %s", cert.NotBefore, want)
			}
			if got := AgentCertificateUID(cert); got != tc.uid {
				t.Errorf("UID = %q, want %q", got, tc.uid)
			}
			if cert.Subject.CommonName != "flotilla-agent:east" || !cert.PublicKey.(*ecdsa.PublicKey).Equal(&key.PublicKey) {
				t.Errorf("subject %q or key is not the request's", cert.Subject.CommonName)
			}
			if len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth || cert.IsCA {
				t.Errorf("usages %v (CA %v); want client auth only", cert.ExtKeyUsage, cert.IsCA)
			}
			// The hub's own verification accepts it as east's agent.
			cluster, err := VerifyAgent([]*x509.Certificate{cert}, roots, now)
			if err != nil || cluster != "east" {
				t.Errorf("VerifyAgent = %q, %v; want east", cluster, err)
			}
		})
	}
}
