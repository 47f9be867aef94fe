package join

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net/url"

	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// newKey makes the agent's ECDSA P-256 key.
func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the agent's key: %w", err)
	}
	return key, nil
}

// NewCSR is the PEM PKCS #10 request for key that a Register or Renew
// sends: exactly one URI SAN, flotilla://cluster/<cluster>, and nothing
// else the hub would have to judge.
func NewCSR(key *ecdsa.PrivateKey, cluster string) ([]byte, error) {
	if err := pki.ValidateClusterName(cluster); err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "flotilla-agent:" + cluster, Organization: []string{"flotilla"}},
		URIs:    []*url.URL{pki.ClusterURI(cluster)},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("making the certificate request: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}
