package testbed

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certKey is a certificate with its private key, both PEM encoded.
type certKey struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// certRequest describes a certificate to issue.
type certRequest struct {
	commonName   string
	organization []string
	dnsNames     []string
	ips          []net.IP
	server       bool
	client       bool
}

// newCA creates a self-signed CA valid for ten years.
func newCA(name string) (*certKey, error) {
	return issue(nil, certRequest{commonName: name}, true)
}

// issue creates a certificate signed by ca (self-signed when ca is nil).
func issue(ca *certKey, req certRequest, isCA bool) (*certKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key for %s: %w", req.commonName, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return nil, fmt.Errorf("generating serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.commonName, Organization: req.organization},
		DNSNames:     req.dnsNames,
		IPAddresses:  req.ips,
		// Backdate a little so clocks that differ by a second still agree.
		NotBefore: now.Add(-time.Minute),
		NotAfter:  now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:  x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	if isCA {
		tmpl.IsCA = true
		tmpl.BasicConstraintsValid = true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	}
	if req.server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if req.client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return nil, fmt.Errorf("signing certificate for %s: %w", req.commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &certKey{
		cert:    cert,
		key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// write stores the pair as <dir>/<name>.crt and <dir>/<name>.key.
func (c *certKey) write(dir, name string) error {
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), c.CertPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), c.KeyPEM, 0o600)
}

// clusterPKI is what one cluster's control plane needs: a CA for serving and
// client certificates, a front-proxy CA for the aggregation layer's request
// headers, and an RSA key pair for service-account tokens.
type clusterPKI struct {
	dir string
}

func (p clusterPKI) path(name string) string { return filepath.Join(p.dir, name) }

// generate writes the cluster's PKI into dir unless it is already there, so
// a restarted cluster keeps the identity its kubeconfig trusts.
func (p clusterPKI) generate() error {
	if _, err := os.Stat(p.path("admin.crt")); err == nil {
		return nil
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	ca, err := newCA("flotilla-testbed-ca")
	if err != nil {
		return err
	}
	if err := ca.write(p.dir, "ca"); err != nil {
		return err
	}
	serving, err := issue(ca, certRequest{
		commonName: "kube-apiserver",
		dnsNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		ips:    []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		server: true,
	}, false)
	if err != nil {
		return err
	}
	if err := serving.write(p.dir, "apiserver"); err != nil {
		return err
	}
	admin, err := issue(ca, certRequest{commonName: "admin", organization: []string{"system:masters"}, client: true}, false)
	if err != nil {
		return err
	}
	frontCA, err := newCA("flotilla-testbed-front-proxy-ca")
	if err != nil {
		return err
	}
	if err := frontCA.write(p.dir, "front-proxy-ca"); err != nil {
		return err
	}
	front, err := issue(frontCA, certRequest{commonName: "front-proxy-client", client: true}, false)
	if err != nil {
		return err
	}
	if err := front.write(p.dir, "front-proxy-client"); err != nil {
		return err
	}
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generating service-account key: %w", err)
	}
	saPub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.path("sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(sa)}), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(p.path("sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}), 0o644); err != nil {
		return err
	}
	// The admin pair is written last: its presence marks a complete PKI.
	return admin.write(p.dir, "admin")
}
