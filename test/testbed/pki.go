package testbed

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// pkiValidity is how long every testbed certificate is valid: a testbed's
// identity lives as long as its folder.
const pkiValidity = 10 * 365 * 24 * time.Hour

// clusterPKI is what one cluster's control plane needs: a CA for serving and
// client certificates, a front-proxy CA for the aggregation layer's request
// headers, and an RSA key pair for service-account tokens. The certificates
// come from pkg/pki, Flotilla's own certificate code.
type clusterPKI struct {
	dir string
}

func (p clusterPKI) path(name string) string { return filepath.Join(p.dir, name) }

// write stores kp as <dir>/<name>.crt and <dir>/<name>.key.
func (p clusterPKI) write(kp *pki.KeyPair, name string) error {
	return kp.WriteFiles(p.path(name+".crt"), p.path(name+".key"))
}

// generate writes the cluster's PKI into dir unless it is already there, so
// a restarted cluster keeps the identity its kubeconfig trusts.
func (p clusterPKI) generate() error {
	if _, err := os.Stat(p.path("admin.crt")); err == nil {
		return nil
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return err
	}
	ca, err := pki.NewCA("flotilla-testbed-ca", pkiValidity)
	if err != nil {
		return err
	}
	if err := p.write(ca, "ca"); err != nil {
		return err
	}
	serving, err := ca.Issue(&x509.Certificate{
		Subject: pkix.Name{CommonName: "kube-apiserver"},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, pkiValidity)
	if err != nil {
		return err
	}
	if err := p.write(serving, "apiserver"); err != nil {
		return err
	}
	// The apiserver takes the user from the common name and the groups
	// from the organizations.
	admin, err := ca.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, pkiValidity)
	if err != nil {
		return err
	}
	frontCA, err := pki.NewCA("flotilla-testbed-front-proxy-ca", pkiValidity)
	if err != nil {
		return err
	}
	if err := p.write(frontCA, "front-proxy-ca"); err != nil {
		return err
	}
	// Its common name is the apiserver's --requestheader-allowed-names.
	front, err := frontCA.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "front-proxy-client"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, pkiValidity)
	if err != nil {
		return err
	}
	if err := p.write(front, "front-proxy-client"); err != nil {
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
	return p.write(admin, "admin")
}
