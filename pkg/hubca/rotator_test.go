package hubca

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/flotilla-dev/flotilla/internal/testutil"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

func TestRenewAt(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name                string
		notBefore, notAfter time.Time
		want                time.Time
	}{
		{"30 days", t0, t0.Add(30 * 24 * time.Hour), t0.Add(24 * 24 * time.Hour)},
		{"10 seconds", t0, t0.Add(10 * time.Second), t0.Add(8 * time.Second)},
		{"backdated an hour, 30 days", t0.Add(-time.Hour), t0.Add(720 * time.Hour), t0.Add(-time.Hour + 576*time.Hour + 48*time.Minute)},
		{"empty validity", t0, t0, t0},
		{"NotAfter before NotBefore", t0, t0.Add(-time.Minute), t0},
	} {
		if got := RenewAt(tt.notBefore, tt.notAfter); !got.Equal(tt.want) {
			t.Errorf("%s: RenewAt = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestLeafValidity(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	far := now.Add(10 * 365 * 24 * time.Hour)
	for _, tt := range []struct {
		name           string
		lifetime       time.Duration
		caNotAfter     time.Time
		wantNB, wantNA time.Time
	}{
		{"30 days: backdated the full hour", 720 * time.Hour, far, now.Add(-time.Hour), now.Add(720 * time.Hour)},
		{"2 minutes: backdated a tenth", 2 * time.Minute, far, now.Add(-12 * time.Second), now.Add(2 * time.Minute)},
		{"3 seconds", 3 * time.Second, far, now.Add(-300 * time.Millisecond), now.Add(3 * time.Second)},
		{"capped by the CA", 720 * time.Hour, now.Add(48 * time.Hour), now.Add(-time.Hour), now.Add(48 * time.Hour)},
	} {
		nb, na := LeafValidity(now, tt.lifetime, tt.caNotAfter)
		if !nb.Equal(tt.wantNB) || !na.Equal(tt.wantNA) {
			t.Errorf("%s: LeafValidity = %s .. %s, want %s .. %s", tt.name, nb, na, tt.wantNB, tt.wantNA)
			continue
		}
		// Renewal comes after the issue, whatever the lifetime: the
		// backdate never eats the renewal time up.
		if r := RenewAt(nb, na); tt.caNotAfter.Equal(far) && !r.After(now) {
			t.Errorf("%s: renewal at %s is not after the issue at %s", tt.name, r, now)
		}
	}
}

// newCA makes a CA valid for validity from now (real time).
func newCA(t *testing.T, validity time.Duration) *pki.KeyPair {
	t.Helper()
	ca, err := pki.NewCA("test-hub-ca", validity)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// checkServing checks that cert is a serving certificate from ca valid
// at now for host, with the chain [leaf, CA] and a key that matches the
// leaf.
func checkServing(cert *tls.Certificate, ca *pki.KeyPair, host string, now time.Time) error {
	if cert == nil || cert.Leaf == nil {
		return errors.New("no certificate, or no Leaf")
	}
	if len(cert.Certificate) != 2 {
		return fmt.Errorf("chain of %d certificates, want [leaf, CA]", len(cert.Certificate))
	}
	if !cert.Leaf.Equal(mustParse(cert.Certificate[0])) {
		return errors.New("Leaf is not the first certificate of the chain")
	}
	if got := mustParse(cert.Certificate[1]); !got.Equal(ca.Cert) {
		return fmt.Errorf("second certificate %q is not the CA", got.Subject.CommonName)
	}
	key, ok := cert.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !key.PublicKey.Equal(cert.Leaf.PublicKey) {
		return errors.New("the private key does not belong to the leaf")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	_, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

func mustParse(der []byte) *x509.Certificate {
	c, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	return c
}

// startRotator runs r.Start until the test ends and waits a bounded time
// for it to return.
func startRotator(t *testing.T, r *Rotator) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the rotator did not stop within 10s of its context ending")
		}
	})
}

// TestRotatorRenewsAtEightyPercent drives a Rotator with a fake clock: the
// first certificate is there before Start, valid for the hosts and
// loopback with the chain [leaf, CA]; nothing changes just before 80 % of
// its lifetime; at 80 % a new one (new key, new serial) is served, valid
// from then for the lifetime; and the Rotator waits for the next renewal.
func TestRotatorRenewsAtEightyPercent(t *testing.T) {
	ca := newCA(t, 0)
	t0 := time.Now()
	fc := clocktesting.NewFakeClock(t0)
	const lifetime = 10 * time.Hour
	r, err := NewRotator(ca, RotatorOptions{Hosts: []string{"hub.example", "10.0.0.7"}, Lifetime: lifetime, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := r.GetCertificate(nil)
	for _, host := range []string{"hub.example", "10.0.0.7", "localhost", "127.0.0.1"} {
		if err := checkServing(first, ca, host, t0); err != nil {
			t.Fatalf("first certificate for %s: %v", host, err)
		}
	}
	if want := t0.Add(lifetime); !first.Leaf.NotAfter.Equal(want.Truncate(time.Second)) {
		t.Errorf("first NotAfter = %s, want %s", first.Leaf.NotAfter, want)
	}
	if !r.NotAfter().Equal(first.Leaf.NotAfter) {
		t.Errorf("NotAfter() = %s, want the leaf's %s", r.NotAfter(), first.Leaf.NotAfter)
	}

	startRotator(t, r)
	waiting := func() error {
		if !fc.HasWaiters() {
			return errors.New("no timer set on the fake clock")
		}
		return nil
	}
	testutil.Eventually(t, "the rotator waiting for the first renewal", 10*time.Second, waiting, testutil.Every(5*time.Millisecond))

	renewAt := RenewAt(first.Leaf.NotBefore, first.Leaf.NotAfter)
	if got, want := renewAt.Sub(t0), 8*time.Hour-12*time.Minute; got < want-2*time.Second || got > want+2*time.Second {
		t.Fatalf("renewal %s after the issue, want about %s (80 %% of 10h backdated 1h)", got, want)
	}
	fc.SetTime(renewAt.Add(-time.Second))
	if cur, _ := r.GetCertificate(nil); cur != first || !fc.HasWaiters() {
		t.Fatal("the certificate changed, or the rotator stopped waiting, a second before 80 % of its lifetime")
	}

	fc.SetTime(renewAt)
	var second *tls.Certificate
	testutil.Eventually(t, "a new serving certificate at 80 % of the first one's lifetime", 10*time.Second, func() error {
		second, _ = r.GetCertificate(nil)
		if second == first {
			return errors.New("still the first certificate")
		}
		return nil
	}, testutil.Every(5*time.Millisecond))
	if err := checkServing(second, ca, "hub.example", renewAt); err != nil {
		t.Fatalf("renewed certificate: %v", err)
	}
	if second.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
		t.Error("the renewed certificate has the first one's serial number")
	}
	if second.PrivateKey.(*ecdsa.PrivateKey).Equal(first.PrivateKey) {
		t.Error("the renewed certificate reuses the first one's key")
	}
	if want := renewAt.Add(lifetime).Truncate(time.Second); !second.Leaf.NotAfter.Equal(want) {
		t.Errorf("renewed NotAfter = %s, want %s (the renewal time plus the lifetime)", second.Leaf.NotAfter, want)
	}
	testutil.Eventually(t, "the rotator waiting for the second renewal", 10*time.Second, waiting, testutil.Every(5*time.Millisecond))
	if !r.NotAfter().Equal(second.Leaf.NotAfter) {
		t.Errorf("NotAfter() = %s after the renewal, want %s", r.NotAfter(), second.Leaf.NotAfter)
	}
}

// TestRotatorConcurrentHandshakes has many goroutines take certificates
// while the fake clock moves through several renewals (run it with -race):
// each certificate taken is whole, chained to the CA and valid when taken.
func TestRotatorConcurrentHandshakes(t *testing.T) {
	ca := newCA(t, 0)
	fc := clocktesting.NewFakeClock(time.Now())
	r, err := NewRotator(ca, RotatorOptions{Lifetime: time.Hour, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	startRotator(t, r)

	stop := make(chan struct{})
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				cert, _ := r.GetCertificate(&tls.ClientHelloInfo{ServerName: "localhost"})
				// The fake clock only moves forward, and the certificate
				// taken was issued before the clock read below.
				if err := checkServing(cert, ca, "localhost", cert.Leaf.NotBefore.Add(time.Second)); err != nil {
					errs <- err
					return
				}
				_ = r.NotAfter()
			}
		}()
	}
	seen := map[string]bool{}
	for range 5 {
		cur, _ := r.GetCertificate(nil)
		seen[cur.Leaf.SerialNumber.String()] = true
		testutil.Eventually(t, "the rotator waiting for a renewal", 10*time.Second, func() error {
			if !fc.HasWaiters() {
				return errors.New("no timer set")
			}
			return nil
		}, testutil.Every(5*time.Millisecond))
		fc.SetTime(RenewAt(cur.Leaf.NotBefore, cur.Leaf.NotAfter))
		testutil.Eventually(t, "a renewal", 10*time.Second, func() error {
			if next, _ := r.GetCertificate(nil); next == cur {
				return errors.New("still the same certificate")
			}
			return nil
		}, testutil.Every(5*time.Millisecond))
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a certificate taken during the renewals: %v", err)
	}
	if len(seen) != 5 {
		t.Errorf("saw %d distinct certificates over 5 renewals, want 5", len(seen))
	}
}

// TestRotatorKeepsCertificateWhenCAExpired lets the fake clock pass the
// CA's expiry: the renewal fails, the last certificate stays served, the
// failure is logged naming the expired CA, and the rotator keeps waiting
// (to retry) rather than spinning or stopping.
func TestRotatorKeepsCertificateWhenCAExpired(t *testing.T) {
	ca := newCA(t, time.Hour)
	fc := clocktesting.NewFakeClock(time.Now())
	logs := &testutil.LogBuffer{}
	r, err := NewRotator(ca, RotatorOptions{Lifetime: 10 * time.Hour, Clock: fc, Logger: logs.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := r.GetCertificate(nil)
	if !first.Leaf.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Fatalf("NotAfter %s, want the CA's %s (a leaf never outlives its CA)", first.Leaf.NotAfter, ca.Cert.NotAfter)
	}
	startRotator(t, r)
	waiting := func() error {
		if !fc.HasWaiters() {
			return errors.New("no timer set on the fake clock")
		}
		return nil
	}
	testutil.Eventually(t, "the rotator waiting for the renewal", 10*time.Second, waiting, testutil.Every(5*time.Millisecond))
	fc.SetTime(ca.Cert.NotAfter.Add(time.Second))
	testutil.Eventually(t, "the failed renewal logged", 10*time.Second, func() error {
		if !strings.Contains(logs.String(), "expired") {
			return errors.New("nothing logged about the expired CA yet")
		}
		return nil
	}, testutil.Every(5*time.Millisecond))
	testutil.Eventually(t, "the rotator waiting to retry", 10*time.Second, waiting, testutil.Every(5*time.Millisecond))
	if cur, _ := r.GetCertificate(nil); cur != first {
		t.Error("the certificate changed although the CA had expired")
	}
	if _, err := IssueServing(ca, nil, fc.Now(), time.Hour); err == nil || !strings.Contains(err.Error(), "test-hub-ca") {
		t.Errorf("IssueServing with an expired CA: %v, want an error naming the CA", err)
	}
}

func TestNewRotatorRefusesBadInput(t *testing.T) {
	ca := newCA(t, 0)
	for _, tt := range []struct {
		name string
		ca   *pki.KeyPair
		opts RotatorOptions
		want string
	}{
		{"no CA", nil, RotatorOptions{}, "CA"},
		{"CA without key", &pki.KeyPair{Cert: ca.Cert}, RotatorOptions{}, "key"},
		{"negative lifetime", ca, RotatorOptions{Lifetime: -time.Second}, "lifetime"},
	} {
		if _, err := NewRotator(tt.ca, tt.opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want one naming %s", tt.name, err, tt.want)
		}
	}
}
