package hubca

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// DefaultReloadInterval is how often Files rereads its directory by
// default. A Secret volume is updated within a minute or so of the Secret;
// a few seconds more do not matter, and three small files are cheap to
// read.
const DefaultReloadInterval = 10 * time.Second

// Files serves the hub certificate provided in a directory in pkg/pki's
// layout (ca.crt, hub.crt, hub.key; see flotilla-pki, or map a
// cert-manager Secret's ca.crt, tls.crt and tls.key to those names). It
// rereads the files every interval and serves what they hold from the
// next handshake on; files that do not load (half written, key and
// certificate from different rotations) are logged and the last good
// certificate is kept until they do.
//
// The chain it serves is hub.crt's certificates followed by those of
// ca.crt that hub.crt does not already carry, so a joining agent finds
// the CA it pinned.
type Files struct {
	dir      string
	interval time.Duration
	log      logr.Logger

	mu  sync.RWMutex
	cur *loadedFiles
}

// loadedFiles is one load of the directory.
type loadedFiles struct {
	// raw is what was read, to tell a change.
	raw    [3][]byte
	cert   *tls.Certificate
	caPEM  []byte
	caCert *x509.Certificate
}

// LoadFiles loads the certificate in dir, which must be there. interval
// is how often Start rereads it (zero: DefaultReloadInterval).
func LoadFiles(dir string, interval time.Duration, log logr.Logger) (*Files, error) {
	if interval <= 0 {
		interval = DefaultReloadInterval
	}
	f := &Files{dir: dir, interval: interval, log: log}
	cur, err := loadDir(dir, nil)
	if err != nil {
		return nil, err
	}
	f.cur = cur
	return f, nil
}

// GetCertificate returns the hub certificate as last loaded; it is
// tls.Config.GetCertificate and safe for concurrent use.
func (f *Files) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return f.loaded().cert, nil
}

// NotAfter is when the hub certificate last loaded expires.
func (f *Files) NotAfter() time.Time { return f.loaded().cert.Leaf.NotAfter }

// CANotAfter is when the first CA in ca.crt, as last loaded, expires.
func (f *Files) CANotAfter() time.Time { return f.loaded().caCert.NotAfter }

// CABundle is ca.crt as last loaded, for the webhook configurations'
// caBundle.
func (f *Files) CABundle() []byte { return f.loaded().caPEM }

func (f *Files) loaded() *loadedFiles {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.cur
}

// NeedLeaderElection is false: every replica serves the webhook.
func (f *Files) NeedLeaderElection() bool { return false }

// Start rereads the directory every interval until ctx ends.
func (f *Files) Start(ctx context.Context) error {
	t := time.NewTicker(f.interval)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		next, err := loadDir(f.dir, f.loaded())
		if err != nil {
			// Logged once per distinct error, not every interval.
			if err.Error() != lastErr {
				f.log.Error(err, "reloading the hub's certificate; the one loaded before is kept", "dir", f.dir)
			}
			lastErr = err.Error()
			continue
		}
		lastErr = ""
		if next == nil {
			continue
		}
		f.mu.Lock()
		f.cur = next
		f.mu.Unlock()
		f.log.Info("loaded a new hub certificate", "dir", f.dir, "serial", next.cert.Leaf.SerialNumber.Text(16), "notAfter", next.cert.Leaf.NotAfter)
	}
}

// loadDir loads dir. It returns nil, nil when the files hold what prev
// was loaded from.
func loadDir(dir string, prev *loadedFiles) (*loadedFiles, error) {
	var raw [3][]byte
	for i, name := range []string{pki.HubCertFile, pki.HubKeyFile, pki.CACertFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("reading the hub certificate: %w", err)
		}
		raw[i] = b
	}
	if prev != nil && bytes.Equal(raw[0], prev.raw[0]) && bytes.Equal(raw[1], prev.raw[1]) && bytes.Equal(raw[2], prev.raw[2]) {
		return nil, nil
	}
	hubPath, caPath := filepath.Join(dir, pki.HubCertFile), filepath.Join(dir, pki.CACertFile)
	chain, err := parseCertificates(raw[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", hubPath, err)
	}
	key, err := pki.ParsePrivateKey(raw[1])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, pki.HubKeyFile), err)
	}
	if !key.PublicKey.Equal(chain[0].PublicKey) {
		return nil, fmt.Errorf("%s and %s do not belong together (one of them was replaced and the other not yet?)", hubPath, pki.HubKeyFile)
	}
	cas, err := parseCertificates(raw[2])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caPath, err)
	}
	cert := &tls.Certificate{PrivateKey: key, Leaf: chain[0]}
	for _, c := range chain {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	for _, ca := range cas {
		if !containsCert(chain, ca) {
			cert.Certificate = append(cert.Certificate, ca.Raw)
		}
	}
	return &loadedFiles{raw: raw, cert: cert, caPEM: raw[2], caCert: cas[0]}, nil
}

// parseCertificates parses every CERTIFICATE block of a PEM bundle; it
// needs at least one.
func parseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no CERTIFICATE PEM block")
	}
	return certs, nil
}

func containsCert(certs []*x509.Certificate, c *x509.Certificate) bool {
	for _, x := range certs {
		if x.Equal(c) {
			return true
		}
	}
	return false
}
