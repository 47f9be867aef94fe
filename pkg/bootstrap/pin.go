package bootstrap

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// CAHash is the pin of a CA certificate as a join command carries it:
// sha256:<hex of the SHA-256 of its DER SubjectPublicKeyInfo>, the form
// kubeadm's --discovery-token-ca-cert-hash uses.
func CAHash(ca *x509.Certificate) string {
	sum := sha256.Sum256(ca.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ParseCAHash checks the form of a pin and returns it lower-cased.
func ParseCAHash(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok {
		return "", errors.New("CA hash must start with sha256:")
	}
	if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("CA hash %q: want sha256: and 64 hex digits", s)
	}
	return s, nil
}

// VerifyPinned verifies a server's TLS chain (leaf first, as sent) with
// the certificate among them whose public key hashes to pin as the only
// root, and returns that CA. It is the check a joining agent makes before
// it sends its token: a server that does not hold the pinned CA's chain is
// refused with an error naming both hashes.
func VerifyPinned(rawCerts [][]byte, pin, serverName string) (*x509.Certificate, error) {
	pin, err := ParseCAHash(pin)
	if err != nil {
		return nil, err
	}
	if len(rawCerts) == 0 {
		return nil, errors.New("the hub sent no certificate")
	}
	certs := make([]*x509.Certificate, 0, len(rawCerts))
	for _, raw := range rawCerts {
		c, err := x509.ParseCertificate(raw)
		if err != nil {
			return nil, fmt.Errorf("the hub sent a malformed certificate: %w", err)
		}
		certs = append(certs, c)
	}
	var ca *x509.Certificate
	var seen []string
	for _, c := range certs {
		h := CAHash(c)
		if h == pin && c.IsCA {
			ca = c
			break
		}
		seen = append(seen, h)
	}
	if ca == nil {
		return nil, fmt.Errorf("the hub's CA does not match the pinned hash %s (the hub sent %s): wrong --ca-hash, or not the hub you meant", pin, strings.Join(seen, ", "))
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: serverName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return nil, fmt.Errorf("the hub's serving certificate does not verify against the pinned CA: %w", err)
	}
	return ca, nil
}
