package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"time"
)

// Limits on the certificate requests the hub signs for agents.
const (
	// MaxCSRBytes bounds a PEM certificate request: an agent's, with one
	// P-256 or RSA-4096 key and one URI SAN, is well under 4 KiB.
	MaxCSRBytes = 16 << 10
	// MinRSABits and MaxRSABits bound an RSA agent key: below 2048 bits
	// is weak, above 8192 only makes the hub's checks slow.
	MinRSABits = 2048
	MaxRSABits = 8192
	// signingSkew backdates NotBefore of a signed agent certificate: a
	// member whose clock runs a little behind the hub's still accepts
	// it, and a minute is too short to matter for a revocation.
	signingSkew = time.Minute
)

// ErrOtherCluster is wrapped by a CheckAgentCSR refusal of a request that
// names a cluster other than the one it is checked for: the hub answers
// it as a matter of permission, not of form.
var ErrOtherCluster = errors.New("an agent may ask only for its own cluster's certificate")

// ParseAgentCSR decodes a PEM PKCS #10 request and checks that it is one
// the hub may sign for cluster's agent (see CheckAgentCSR).
func ParseAgentCSR(pemData []byte, cluster string) (*x509.CertificateRequest, error) {
	if len(pemData) == 0 {
		return nil, errors.New("certificate request is empty")
	}
	if len(pemData) > MaxCSRBytes {
		return nil, fmt.Errorf("certificate request is %d bytes, more than the %d allowed", len(pemData), MaxCSRBytes)
	}
	block, rest := pem.Decode(pemData)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("certificate request is not a PEM CERTIFICATE REQUEST block")
	}
	if hasPEM(rest) {
		return nil, errors.New("certificate request holds more than one PEM block")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certificate request: %w", err)
	}
	if err := CheckAgentCSR(csr, cluster); err != nil {
		return nil, err
	}
	return csr, nil
}

func hasPEM(b []byte) bool {
	block, _ := pem.Decode(b)
	return block != nil
}

// CheckAgentCSR checks a parsed request the way the hub does before it
// creates (and again before it signs) a certificate for cluster's agent:
// its signature is valid (the requester holds the key), the key is ECDSA
// P-256 or RSA of MinRSABits to MaxRSABits bits, and it names exactly one
// thing, the URI flotilla://cluster/<cluster>: no DNS name, IP address,
// e-mail address or other URI, so a signed request can never be used as
// anything but that cluster's agent.
func CheckAgentCSR(csr *x509.CertificateRequest, cluster string) error {
	if err := ValidateClusterName(cluster); err != nil {
		return err
	}
	if err := csr.CheckSignature(); err != nil {
		return fmt.Errorf("certificate request signature: %w", err)
	}
	if err := checkAgentKey(csr.PublicKey); err != nil {
		return err
	}
	if n := len(csr.DNSNames) + len(csr.IPAddresses) + len(csr.EmailAddresses); n > 0 {
		return fmt.Errorf("certificate request has %d DNS, IP or e-mail SANs; an agent's must have only its URI SAN %s", n, ClusterURI(cluster))
	}
	if len(csr.URIs) != 1 {
		return fmt.Errorf("certificate request has %d URI SANs; an agent's must have exactly one, %s", len(csr.URIs), ClusterURI(cluster))
	}
	name, ok, err := ParseClusterURI(csr.URIs[0])
	if err != nil {
		return fmt.Errorf("certificate request: %w", err)
	}
	if !ok {
		return fmt.Errorf("certificate request's URI SAN %q is not of the form %s://%s/<name>", csr.URIs[0].String(), ClusterURIScheme, ClusterURIHost)
	}
	if name != cluster {
		return fmt.Errorf("certificate request names cluster %q in its URI SAN, not %q: %w", name, cluster, ErrOtherCluster)
	}
	return nil
}

// checkAgentKey accepts ECDSA P-256 and RSA keys of a sensible size.
func checkAgentKey(pub any) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() {
			return fmt.Errorf("certificate request key is ECDSA on %s; use P-256", k.Curve.Params().Name)
		}
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < MinRSABits || bits > MaxRSABits {
			return fmt.Errorf("certificate request key is RSA of %d bits; use %d to %d bits, or ECDSA P-256", bits, MinRSABits, MaxRSABits)
		}
	default:
		return fmt.Errorf("certificate request key is a %T; use ECDSA P-256 or RSA", pub)
	}
	return nil
}

// AgentCertificateUID returns the MemberCluster UID a join-issued agent
// certificate carries in its Subject serialNumber, "" for one without
// (made by flotilla-pki, for an admin-made member).
func AgentCertificateUID(cert *x509.Certificate) string { return cert.Subject.SerialNumber }

// SignAgentCSR signs csr as the client certificate of cluster's agent:
// the request's public key, the URI SAN flotilla://cluster/<cluster>,
// client authentication only, Subject CN flotilla-agent:<cluster> and
// serialNumber memberUID (when not empty), so that a MemberCluster
// re-created under the same name refuses it. It checks csr again
// (CheckAgentCSR) rather than trust its caller. The certificate is valid
// from a minute before now for validity, but never past the CA's own
// NotAfter.
func (kp *KeyPair) SignAgentCSR(csr *x509.CertificateRequest, cluster, memberUID string, validity time.Duration, now time.Time) (*x509.Certificate, error) {
	if err := CheckAgentCSR(csr, cluster); err != nil {
		return nil, err
	}
	if validity <= 0 {
		return nil, fmt.Errorf("signing the certificate of cluster %q: validity %s is not positive", cluster, validity)
	}
	if len(memberUID) > 64 {
		// X.520 bounds serialNumber to 64 characters; a UID is 36.
		return nil, fmt.Errorf("signing the certificate of cluster %q: member UID is longer than 64 characters", cluster)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	notAfter := now.Add(validity)
	if notAfter.After(kp.Cert.NotAfter) {
		notAfter = kp.Cert.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("signing the certificate of cluster %q: the CA expired at %s", cluster, kp.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   "flotilla-agent:" + cluster,
			Organization: []string{"flotilla"},
			SerialNumber: memberUID,
		},
		NotBefore:   now.Add(-signingSkew),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{ClusterURI(cluster)},
	}
	if _, ok := csr.PublicKey.(*rsa.PublicKey); ok {
		// RSA keys encrypt the TLS key exchange in old suites.
		tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, kp.Cert, csr.PublicKey, kp.Key)
	if err != nil {
		return nil, fmt.Errorf("signing the certificate of cluster %q: %w", cluster, err)
	}
	return x509.ParseCertificate(der)
}

// CertificatePEM encodes cert as a PEM CERTIFICATE block.
func CertificatePEM(cert *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
}

// NewAgentCSR makes a PEM certificate request for cluster's agent with
// key: what an agent sends to Register and Renew.
func NewAgentCSR(key *ecdsa.PrivateKey, cluster string) ([]byte, error) {
	if err := ValidateClusterName(cluster); err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "flotilla-agent:" + cluster, Organization: []string{"flotilla"}},
		URIs:    []*url.URL{ClusterURI(cluster)},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("creating the certificate request of cluster %q: %w", cluster, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}
