package hubca

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// DefaultServingLifetime is the lifetime of the serving certificates a
// Rotator issues when none is given: 30 days, renewed after 24.
const DefaultServingLifetime = 30 * 24 * time.Hour

// RenewShare is the share of a certificate's lifetime after which it is
// renewed, the same for the hub's serving certificates and agents'
// client certificates.
const RenewShare = 0.8

// maxBackdate is the most a certificate's NotBefore is set before its
// issue, so that a peer whose clock runs a little behind still accepts
// it (pkg/pki backdates by the same hour).
const maxBackdate = time.Hour

// Bounds on how often a Rotator issues. minRenewWait keeps a certificate
// capped by a CA about to expire (whose renewal time comes ever sooner)
// from making the Rotator spin; retryWait is the pause after a failed
// issue.
const (
	minRenewWait = time.Second
	retryWait    = 10 * time.Second
)

// RenewAt is when a certificate valid from notBefore to notAfter is
// renewed: after RenewShare of its lifetime. A certificate whose NotAfter
// is not after its NotBefore is renewed at once (at notBefore).
func RenewAt(notBefore, notAfter time.Time) time.Time {
	life := notAfter.Sub(notBefore)
	if life <= 0 {
		return notBefore
	}
	return notBefore.Add(time.Duration(float64(life) * RenewShare))
}

// LeafValidity is the validity of a leaf certificate issued at now for
// lifetime by a CA valid until caNotAfter. NotBefore is backdated by a
// tenth of the lifetime, at most an hour, so that peers with a clock a
// little behind accept it, while a short-lived certificate (minutes, in
// tests seconds) is not backdated by more than its own lifetime, which
// would put its renewal time (RenewAt) in the past. NotAfter is never past
// the CA's: a leaf outliving its CA fails verification anyway.
func LeafValidity(now time.Time, lifetime time.Duration, caNotAfter time.Time) (notBefore, notAfter time.Time) {
	notBefore = now.Add(-min(maxBackdate, lifetime/10))
	notAfter = now.Add(lifetime)
	if notAfter.After(caNotAfter) {
		notAfter = caNotAfter
	}
	return notBefore, notAfter
}

// RotatorOptions configure a Rotator.
type RotatorOptions struct {
	// Hosts are the DNS names and IP addresses the serving certificate is
	// valid for, besides loopback (pki.HubNames).
	Hosts []string
	// Lifetime of each serving certificate; zero means
	// DefaultServingLifetime.
	Lifetime time.Duration
	// Clock tells the time the certificates are issued at and waited on;
	// nil means the real clock. Tests pass a fake one.
	Clock clock.Clock
	// Logger logs each rotation and failure; the zero value discards.
	Logger logr.Logger
}

// Rotator issues the hub's serving certificate from the hub CA in memory,
// and issues a new one (with a new key) at RenewAt of the current one's
// validity. It is a manager.Runnable that runs on every replica (each
// serves the webhook); Start renews until its context ends.
type Rotator struct {
	ca       *pki.KeyPair
	hosts    []string
	lifetime time.Duration
	clock    clock.Clock
	log      logr.Logger
	current  atomic.Pointer[tls.Certificate]
}

// NewRotator returns a Rotator holding a first certificate, so it can
// serve handshakes before Start.
func NewRotator(ca *pki.KeyPair, opts RotatorOptions) (*Rotator, error) {
	if ca == nil || ca.Cert == nil || ca.Key == nil {
		return nil, errors.New("hubca: a rotator needs the CA's certificate and key")
	}
	if opts.Lifetime < 0 {
		return nil, fmt.Errorf("hubca: serving certificate lifetime %s is negative", opts.Lifetime)
	}
	r := &Rotator{ca: ca, hosts: opts.Hosts, lifetime: opts.Lifetime, clock: opts.Clock, log: opts.Logger}
	if r.lifetime == 0 {
		r.lifetime = DefaultServingLifetime
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	if err := r.rotate(); err != nil {
		return nil, err
	}
	return r, nil
}

// GetCertificate returns the current serving certificate with its chain
// [leaf, CA]; it is tls.Config.GetCertificate and safe for concurrent use.
func (r *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.current.Load(), nil
}

// NotAfter is when the current serving certificate expires.
func (r *Rotator) NotAfter() time.Time { return r.current.Load().Leaf.NotAfter }

// NeedLeaderElection is false: every replica serves the webhook, and
// each needs a valid certificate of its own.
func (r *Rotator) NeedLeaderElection() bool { return false }

// Start renews the serving certificate at RenewAt of each one's validity
// until ctx ends. A failed issue keeps the current certificate, is logged,
// and is tried again after a pause.
func (r *Rotator) Start(ctx context.Context) error {
	wait := r.untilRenewal()
	for {
		t := r.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		if err := r.rotate(); err != nil {
			r.log.Error(err, "renewing the hub's serving certificate; the current one is kept", "notAfter", r.NotAfter(), "retryIn", retryWait.String())
			wait = retryWait
			continue
		}
		wait = r.untilRenewal()
	}
}

// untilRenewal is how long until the current certificate is renewed, at
// least minRenewWait.
func (r *Rotator) untilRenewal() time.Duration {
	leaf := r.current.Load().Leaf
	return max(RenewAt(leaf.NotBefore, leaf.NotAfter).Sub(r.clock.Now()), minRenewWait)
}

// rotate issues a new serving certificate and makes it the current one.
func (r *Rotator) rotate() error {
	cert, err := IssueServing(r.ca, r.hosts, r.clock.Now(), r.lifetime)
	if err != nil {
		return err
	}
	r.current.Store(cert)
	r.log.Info("issued the hub's serving certificate", "serial", cert.Leaf.SerialNumber.Text(16), "notAfter", cert.Leaf.NotAfter, "renewAt", RenewAt(cert.Leaf.NotBefore, cert.Leaf.NotAfter))
	return nil
}

// IssueServing issues a hub serving certificate with a new key from ca, at
// now, for lifetime (LeafValidity), valid for loopback and hosts
// (pki.HubNames). The result is ready for tls.Config: its chain is
// [leaf, CA] and Leaf is set. A CA that has expired at now is an error.
func IssueServing(ca *pki.KeyPair, hosts []string, now time.Time, lifetime time.Duration) (*tls.Certificate, error) {
	if !now.Before(ca.Cert.NotAfter) {
		return nil, fmt.Errorf("the hub CA %q expired at %s: it can issue no serving certificate (a new CA means every agent must join again)", ca.Cert.Subject.CommonName, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the serving key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	notBefore, notAfter := LeafValidity(now, lifetime, ca.Cert.NotAfter)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "flotilla-hub", Organization: []string{"flotilla"}},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	tmpl.IPAddresses, tmpl.DNSNames = pki.HubNames(hosts)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("signing the serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}
