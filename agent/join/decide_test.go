package join

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	key, err := newKey()
	if err != nil {
		t.Fatal(err)
	}
	valid := &x509.Certificate{NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
	expired := &x509.Certificate{NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(-time.Hour)}
	boot := &Bootstrap{ClusterName: "east", HubAddress: "hub:9443", Version: "uid-1/5"}
	creds := func(cert *x509.Certificate, request, version string) *Credentials {
		return &Credentials{Key: key, Cert: cert, ClusterName: "east", HubAddress: "hub:9443", Request: request, BootstrapVersion: version}
	}
	broken := errors.New("credentials Secret x/y: tls.crt: no CERTIFICATE PEM block")
	for _, tt := range []struct {
		name     string
		creds    *Credentials
		credsErr error
		boot     *Bootstrap
		bootErr  error
		want     Plan
		wantErr  string
	}{
		{name: "nothing: files", want: Plan{Mode: UseFiles}},
		{name: "a bootstrap Secret alone: register", boot: boot, want: Plan{Mode: Register, ClusterName: "east", HubAddress: "hub:9443"}},
		{name: "a valid certificate", creds: creds(valid, "", ""), want: Plan{Mode: UseCredentials, ClusterName: "east", HubAddress: "hub:9443"}},
		{name: "a valid certificate and the bootstrap Secret it came from: delete that", creds: creds(valid, "", "uid-1/5"), boot: boot,
			want: Plan{Mode: UseCredentials, ClusterName: "east", HubAddress: "hub:9443", DeleteBootstrap: true}},
		{name: "a valid certificate and a newer bootstrap Secret: join again", creds: creds(valid, "", "uid-1/4"), boot: boot,
			want: Plan{Mode: Register, ClusterName: "east", HubAddress: "hub:9443"}},
		{name: "a pending request: resume", creds: creds(nil, "req-1", "uid-1/5"), boot: boot,
			want: Plan{Mode: Resume, ClusterName: "east", HubAddress: "hub:9443"}},
		{name: "a pending request without the bootstrap Secret: resume", creds: creds(nil, "req-1", "uid-1/5"),
			want: Plan{Mode: Resume, ClusterName: "east", HubAddress: "hub:9443"}},
		{name: "a key stored before a register that did not finish: register with it", creds: creds(nil, "", "uid-1/5"), boot: boot,
			want: Plan{Mode: Register, ClusterName: "east", HubAddress: "hub:9443", ReuseKey: true}},
		{name: "an expired certificate and its bootstrap Secret: register with a new key", creds: creds(expired, "", "uid-1/5"), boot: boot,
			want: Plan{Mode: Register, ClusterName: "east", HubAddress: "hub:9443"}},
		{name: "an expired certificate alone: files", creds: creds(expired, "", ""), want: Plan{Mode: UseFiles}},
		{name: "a key alone: files", creds: creds(nil, "", ""), want: Plan{Mode: UseFiles}},
		{name: "broken credentials and a bootstrap Secret: register", credsErr: broken, boot: boot, want: Plan{Mode: Register, ClusterName: "east", HubAddress: "hub:9443"}},
		{name: "broken credentials alone: error", credsErr: broken, wantErr: "tls.crt"},
		{name: "a broken bootstrap Secret: error", creds: creds(valid, "", ""), bootErr: errors.New("bootstrap Secret x/y: token: malformed"), wantErr: "token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decide(tt.creds, tt.credsErr, tt.boot, tt.bootErr, now)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %+v, %v; want an error naming %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Why == "" {
				t.Errorf("plan %+v says not why", got)
			}
			got.Why = ""
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRenewAt(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name                       string
		notBefore, notAfter, recvd time.Time
		want                       time.Time
	}{
		{"30 days, read from the Secret: at day 24", t0, t0.Add(30 * 24 * time.Hour), time.Time{}, t0.Add(24 * 24 * time.Hour)},
		{"4 seconds: at 3.2 s", t0, t0.Add(4 * time.Second), time.Time{}, t0.Add(3200 * time.Millisecond)},
		{"backdated an hour, 2 minutes left when received: 96 s after receipt", t0.Add(-time.Hour), t0.Add(2 * time.Minute), t0, t0.Add(96 * time.Second)},
		{"received before NotBefore: NotBefore counts", t0, t0.Add(10 * time.Second), t0.Add(-time.Second), t0.Add(8 * time.Second)},
		{"received after NotAfter: NotBefore counts", t0, t0.Add(10 * time.Second), t0.Add(time.Minute), t0.Add(8 * time.Second)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := RenewAt(tt.notBefore, tt.notAfter, tt.recvd); !got.Equal(tt.want) {
				t.Errorf("RenewAt = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestBackoffDelay(t *testing.T) {
	for _, tt := range []struct {
		attempt int
		want    time.Duration
	}{{0, time.Second}, {1, 2 * time.Second}, {3, 8 * time.Second}, {4, 10 * time.Second}, {100, 10 * time.Second}} {
		if got := backoffDelay(tt.attempt, time.Second, 10*time.Second); got != tt.want {
			t.Errorf("backoffDelay(%d) = %s, want %s", tt.attempt, got, tt.want)
		}
	}
}

func TestRetryable(t *testing.T) {
	for code, want := range map[codes.Code]bool{
		codes.Unavailable: true, codes.DeadlineExceeded: true, codes.ResourceExhausted: true, codes.Internal: true,
		codes.Unauthenticated: false, codes.InvalidArgument: false, codes.AlreadyExists: false, codes.PermissionDenied: false, codes.Unimplemented: false,
	} {
		if got := retryable(status.Error(code, "x")); got != want {
			t.Errorf("retryable(%s) = %v, want %v", code, got, want)
		}
	}
}

func TestReadBootstrap(t *testing.T) {
	tok, err := bootstrap.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	good := map[string]string{
		BootstrapKeyHubAddress: "hub.example:9443", BootstrapKeyToken: tok.String(),
		BootstrapKeyCAHash: "sha256:" + strings.Repeat("ab", 32), BootstrapKeyClusterName: "east",
		BootstrapKeyLabels: "tier=gold,team=a", BootstrapKeyRegion: "eu",
	}
	secret := func(change map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "flotilla-system", Name: "flotilla-agent-bootstrap", UID: "u", ResourceVersion: "7"}, Data: map[string][]byte{}}
		for k, v := range good {
			s.Data[k] = []byte(v)
		}
		for k, v := range change {
			s.Data[k] = []byte(v)
		}
		return s
	}
	b, err := ReadBootstrap(secret(nil))
	if err != nil {
		t.Fatal(err)
	}
	if b.Token != tok || b.ClusterName != "east" || b.Labels["tier"] != "gold" || b.Region != "eu" || b.Version != "u/7" {
		t.Errorf("read %+v", b)
	}
	for key, bad := range map[string]string{
		BootstrapKeyHubAddress:  "",
		BootstrapKeyToken:       "not-a-token",
		BootstrapKeyCAHash:      "md5:abc",
		BootstrapKeyClusterName: "East_1",
		BootstrapKeyLabels:      "novalue",
	} {
		if _, err := ReadBootstrap(secret(map[string]string{key: bad})); err == nil || !strings.Contains(err.Error(), ": "+key) {
			t.Errorf("%s=%q: error %v does not name the key", key, bad, err)
		}
	}
}

func TestCheckIssued(t *testing.T) {
	ca, err := pki.NewCA("test", 0)
	if err != nil {
		t.Fatal(err)
	}
	east, err := ca.IssueAgent("east", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	hub, err := ca.IssueHub(nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := newKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, tt := range []struct {
		name    string
		kp      *pki.KeyPair
		key     any
		cluster string
		now     time.Time
		wantErr string
	}{
		{name: "good", kp: east, cluster: "east", now: now},
		{name: "another key", kp: east, key: other, cluster: "east", now: now, wantErr: "not for this agent's key"},
		{name: "another cluster", kp: east, cluster: "west", now: now, wantErr: `names cluster "east", not "west"`},
		{name: "a serving certificate", kp: hub, cluster: "east", now: now, wantErr: "URI SAN"},
		{name: "expired", kp: east, cluster: "east", now: now.Add(2 * time.Hour), wantErr: "not valid now"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			key := tt.kp.Key
			if tt.key != nil {
				key = other
			}
			_, err := checkIssued(tt.kp.CertPEM(), key, tt.cluster, tt.now)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("checkIssued: %v, want %q", err, tt.wantErr)
			}
		})
	}
	if _, err := checkIssued(nil, east.Key, "east", now); !errors.Is(err, errNoCertificate) {
		t.Errorf("no certificate: %v", err)
	}
}

func TestNewCSR(t *testing.T) {
	key, err := newKey()
	if err != nil {
		t.Fatal(err)
	}
	data, err := NewCSR(key, "east")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pemDecode(data)
	csr, err := x509.ParseCertificateRequest(block)
	if err != nil {
		t.Fatal(err)
	}
	if err := csr.CheckSignature(); err != nil {
		t.Fatal(err)
	}
	if len(csr.URIs) != 1 || csr.URIs[0].String() != "flotilla://cluster/east" || len(csr.DNSNames)+len(csr.IPAddresses)+len(csr.EmailAddresses) != 0 {
		t.Errorf("CSR SANs: URIs %v, DNS %v, IPs %v, emails %v; want only flotilla://cluster/east", csr.URIs, csr.DNSNames, csr.IPAddresses, csr.EmailAddresses)
	}
	if !key.PublicKey.Equal(csr.PublicKey) {
		t.Error("the CSR is not for the key")
	}
	if _, err := NewCSR(key, "Not_Valid"); err == nil {
		t.Error("a CSR for an invalid cluster name was made")
	}
}

func pemDecode(data []byte) ([]byte, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM")
	}
	return block.Bytes, nil
}
