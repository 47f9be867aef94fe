package join

import (
	"crypto/tls"
	"crypto/x509"
	"sync"
	"sync/atomic"

	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// Source holds the agent's current certificate and hub CA in memory. The
// sync client's TLS configuration asks it at every handshake
// (pki.DynamicClientTLSConfig with GetClientCertificate and Roots), and
// the Keeper swaps in a renewed certificate with one atomic store, so a
// handshake sees either the old pair or the new one, never a mix.
type Source struct {
	cur   atomic.Pointer[identity]
	once  sync.Once
	ready chan struct{}
}

type identity struct {
	kp    *pki.KeyPair
	tls   tls.Certificate
	ca    *x509.Certificate
	roots *x509.CertPool
}

// NewSource returns an empty Source: it presents no certificate and
// trusts no hub until Set.
func NewSource() *Source { return &Source{ready: make(chan struct{})} }

// Set makes kp the certificate presented and ca the only hub CA trusted
// from the next handshake on, and marks the Source ready.
func (s *Source) Set(kp *pki.KeyPair, ca *x509.Certificate) {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	s.cur.Store(&identity{kp: kp, tls: kp.TLSCertificate(), ca: ca, roots: roots})
	s.once.Do(func() { close(s.ready) })
}

// Ready is closed once the Source holds a certificate.
func (s *Source) Ready() <-chan struct{} { return s.ready }

// Current is the certificate and CA in use; nil before the first Set.
func (s *Source) Current() (*pki.KeyPair, *x509.Certificate) {
	id := s.cur.Load()
	if id == nil {
		return nil, nil
	}
	return id.kp, id.ca
}

// GetClientCertificate is tls.Config.GetClientCertificate: the current
// certificate, or none before the first Set (the hub then refuses the
// stream, and the client retries).
func (s *Source) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	id := s.cur.Load()
	if id == nil {
		return &tls.Certificate{}, nil
	}
	c := id.tls
	return &c, nil
}

// Roots is the pool of the current hub CA; nil before the first Set,
// which pki.VerifyServer refuses.
func (s *Source) Roots() *x509.CertPool {
	id := s.cur.Load()
	if id == nil {
		return nil
	}
	return id.roots
}

// TLSConfig is the agent's TLS configuration over this Source, for the
// hub's serverName (empty: the host dialled).
func (s *Source) TLSConfig(serverName string) *tls.Config {
	return pki.DynamicClientTLSConfig(s.GetClientCertificate, s.Roots, serverName)
}
