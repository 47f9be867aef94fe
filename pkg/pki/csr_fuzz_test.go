package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"
	"time"
)

// FuzzParseAgentCSR feeds the hub's parser of certificate requests, which
// a joining agent sends before it has any certificate, arbitrary bytes.
// Whatever parses must be a request the hub may sign: its one SAN is the
// URI of the cluster it asked for, and signing it gives a certificate for
// that cluster.
func FuzzParseAgentCSR(f *testing.F) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	good, err := NewAgentCSR(key, "member-1")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, "member-1")
	f.Add(good, "member-2")
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"), "m")
	f.Add([]byte{}, "")
	ca, err := NewCA("fuzz-ca", time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte, cluster string) {
		csr, err := ParseAgentCSR(data, cluster)
		if err != nil {
			return
		}
		if err := CheckAgentCSR(csr, cluster); err != nil {
			t.Fatalf("ParseAgentCSR accepted a request CheckAgentCSR refuses: %v", err)
		}
		if len(csr.URIs) != 1 || csr.URIs[0].String() != ClusterURI(cluster).String() {
			t.Fatalf("accepted a request for %v as cluster %q", csr.URIs, cluster)
		}
		cert, err := ca.SignAgentCSR(csr, cluster, "uid-1", time.Minute, time.Now())
		if err != nil {
			t.Fatalf("signing an accepted request: %v", err)
		}
		if got, err := ClusterFromCertificate(cert); err != nil || got != cluster {
			t.Fatalf("signed certificate names %q (%v), want %q", got, err, cluster)
		}
	})
}
