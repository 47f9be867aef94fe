package setup

import (
	"crypto/x509"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/pkg/pki"
)

func TestJoinOptionsValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want string // "" means valid
	}{
		{name: "defaults", opts: Options{}},
		{name: "a minute", opts: Options{AgentCertificateLifetime: time.Minute}},
		{name: "below a minute", opts: Options{AgentCertificateLifetime: 59 * time.Second}, want: "--agent-certificate-lifetime"},
		{name: "negative lifetime", opts: Options{AgentCertificateLifetime: -time.Hour}, want: "--agent-certificate-lifetime"},
		{name: "no join rate limit", opts: Options{BootstrapRate: -1}},
		{name: "NaN rate", opts: Options{BootstrapRate: math.NaN()}, want: "--bootstrap-rate"},
		{name: "negative burst", opts: Options{BootstrapBurst: -1}, want: "--bootstrap-burst"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validateOptions(tc.opts)
			if tc.want == "" && err != nil {
				t.Fatalf("validateOptions: %v, want no error", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("validateOptions error = %v, want one naming %s", err, tc.want)
			}
		})
	}
	if got := agentLifetime(Options{}); got != 30*24*time.Hour {
		t.Errorf("default agent lifetime %s, want 30 days", got)
	}
}

// TestProvidedPKISigningCA: provided files sign agents only when the CA
// key is among them and agents are trusted by that CA (no
// --agent-ca-file naming others); the certificates it signs verify.
func TestProvidedPKISigningCA(t *testing.T) {
	withKey := t.TempDir()
	ca, err := pki.EnsureCA(withKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pki.EnsureHub(withKey, ca, nil); err != nil {
		t.Fatal(err)
	}
	copyFile := func(dir, name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(withKey, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	withoutKey, broken := t.TempDir(), t.TempDir()
	for _, dir := range []string{withoutKey, broken} {
		for _, f := range []string{pki.CACertFile, pki.HubCertFile, pki.HubKeyFile} {
			copyFile(dir, f, read(f))
		}
	}
	copyFile(broken, pki.CAKeyFile, []byte("not a key"))
	otherDir := t.TempDir()
	if _, err := pki.EnsureCA(otherDir); err != nil {
		t.Fatal(err)
	}
	agent, err := ca.IssueAgent("m1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		opts    Options
		wantCA  bool
		wantErr string
	}{
		{name: "ca.key present", opts: Options{CertDir: withKey}, wantCA: true},
		{name: "ca.key absent", opts: Options{CertDir: withoutKey}},
		{name: "ca.key and a separate agent CA", opts: Options{CertDir: withKey, AgentCAFile: filepath.Join(otherDir, pki.CACertFile)}},
		{name: "an unreadable ca.key", opts: Options{CertDir: broken}, wantErr: pki.CAKeyFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := providedPKI(tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("providedPKI error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (got.CA != nil) != tc.wantCA || (got.CA != nil && !got.CA.Cert.Equal(ca.Cert)) {
				t.Fatalf("providedPKI CA = %v, want the CA: %v", got.CA, tc.wantCA)
			}
			if tc.wantCA {
				if _, err := agent.Cert.Verify(x509.VerifyOptions{Roots: got.ClientCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
					t.Errorf("a certificate the signing CA issued does not verify against the agent CAs: %v", err)
				}
			}
		})
	}
}
