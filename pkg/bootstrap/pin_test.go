package bootstrap

import (
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/pkg/pki"
)

func TestVerifyPinned(t *testing.T) {
	ca, err := pki.NewCA("hub-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := pki.NewCA("other-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.IssueHub([]string{"hub.example"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := otherCA.IssueHub([]string{"hub.example"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pin := CAHash(ca.Cert)
	chain := [][]byte{leaf.Cert.Raw, ca.Cert.Raw}

	got, err := VerifyPinned(chain, strings.ToUpper(pin[:7])+pin[7:], "hub.example")
	if err != nil {
		t.Fatalf("the pinned CA's chain: %v", err)
	}
	if !got.Equal(ca.Cert) {
		t.Fatal("VerifyPinned returned another certificate than the CA")
	}
	for _, tc := range []struct {
		name  string
		chain [][]byte
		pin   string
		host  string
		want  string
	}{
		{"wrong pin", chain, CAHash(otherCA.Cert), "hub.example", "does not match the pinned hash"},
		{"CA not sent", [][]byte{leaf.Cert.Raw}, pin, "hub.example", "does not match the pinned hash"},
		{"leaf of another CA beside the pinned CA", [][]byte{foreign.Cert.Raw, ca.Cert.Raw}, pin, "hub.example", "does not verify"},
		{"wrong host", chain, pin, "evil.example", "does not verify"},
		{"leaf pinned instead of the CA", chain, CAHash(leaf.Cert), "hub.example", "does not match"},
		{"malformed pin", chain, "md5:abc", "hub.example", "sha256:"},
		{"short pin", chain, "sha256:abcd", "hub.example", "64 hex digits"},
		{"nothing sent", nil, pin, "hub.example", "no certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifyPinned(tc.chain, tc.pin, tc.host)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("VerifyPinned error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
