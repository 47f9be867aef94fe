package join

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// Keys of the bootstrap Secret `kubectl flotilla join` writes.
const (
	BootstrapKeyHubAddress  = "hub-address"
	BootstrapKeyToken       = "token"
	BootstrapKeyCAHash      = "ca-hash"
	BootstrapKeyClusterName = "cluster-name"
	BootstrapKeyLabels      = "labels" // k=v,k=v
	BootstrapKeyRegion      = "region"
	BootstrapKeyZone        = "zone"
	BootstrapKeyProvider    = "provider"
)

// Keys of the credentials Secret the agent keeps.
const (
	// KeyPrivateKey is the agent's PKCS #8 PEM key, written before the
	// first request is sent.
	KeyPrivateKey = corev1.TLSPrivateKeyKey
	// KeyCertificate is the certificate the hub issued for the key.
	KeyCertificate = corev1.TLSCertKey
	// KeyCA is the hub CA: the one pinned at join.
	KeyCA = "ca.crt"
	// KeyHubAddress and KeyClusterName are the hub and the name the
	// agent joined with.
	KeyHubAddress  = "hub-address"
	KeyClusterName = "cluster-name"
	// KeyRequest names the certificate request a Register returned while
	// the certificate is not issued yet.
	KeyRequest = "request"
	// KeyBootstrapVersion is "<uid>/<resourceVersion>" of the bootstrap
	// Secret the credentials came from. A bootstrap Secret of another
	// version was written after them (a new `join`) and starts over.
	KeyBootstrapVersion = "bootstrap-version"
)

// Bootstrap is what a bootstrap Secret says.
type Bootstrap struct {
	HubAddress  string
	Token       bootstrap.Token
	CAHash      string
	ClusterName string
	Labels      map[string]string
	Region      string
	Zone        string
	Provider    string
	// Version is "<uid>/<resourceVersion>" of the Secret.
	Version string
}

// ReadBootstrap reads a bootstrap Secret; an error names the key that is
// missing or wrong.
func ReadBootstrap(s *corev1.Secret) (*Bootstrap, error) {
	get := func(k string) string { return strings.TrimSpace(string(s.Data[k])) }
	where := func(k string) string { return fmt.Sprintf("bootstrap Secret %s/%s: %s", s.Namespace, s.Name, k) }
	b := &Bootstrap{
		HubAddress: get(BootstrapKeyHubAddress), ClusterName: get(BootstrapKeyClusterName),
		Region: get(BootstrapKeyRegion), Zone: get(BootstrapKeyZone), Provider: get(BootstrapKeyProvider),
		Version: secretVersion(s),
	}
	if b.HubAddress == "" {
		return nil, fmt.Errorf("%s is empty; it must be the hub's sync address host:port", where(BootstrapKeyHubAddress))
	}
	var err error
	if b.Token, err = bootstrap.ParseToken(get(BootstrapKeyToken)); err != nil {
		return nil, fmt.Errorf("%s: %w", where(BootstrapKeyToken), err)
	}
	if b.CAHash, err = bootstrap.ParseCAHash(get(BootstrapKeyCAHash)); err != nil {
		return nil, fmt.Errorf("%s: %w", where(BootstrapKeyCAHash), err)
	}
	if err := pki.ValidateClusterName(b.ClusterName); err != nil {
		return nil, fmt.Errorf("%s: %w", where(BootstrapKeyClusterName), err)
	}
	if b.Labels, err = bootstrap.ParseLabels(get(BootstrapKeyLabels)); err != nil {
		return nil, fmt.Errorf("%s: %w", where(BootstrapKeyLabels), err)
	}
	return b, nil
}

func secretVersion(s *corev1.Secret) string { return string(s.UID) + "/" + s.ResourceVersion }

// Credentials is what a credentials Secret says. Key is nil in none was
// stored; Cert and CA are nil until the certificate is issued.
type Credentials struct {
	Key              *ecdsa.PrivateKey
	Cert             *x509.Certificate
	CA               *x509.Certificate
	HubAddress       string
	ClusterName      string
	Request          string
	BootstrapVersion string
}

// ReadCredentials reads a credentials Secret; an error names the key that
// is wrong. A certificate must come with its key, the CA and the names.
func ReadCredentials(s *corev1.Secret) (*Credentials, error) {
	where := func(k string) string { return fmt.Sprintf("credentials Secret %s/%s: %s", s.Namespace, s.Name, k) }
	c := &Credentials{
		HubAddress:       strings.TrimSpace(string(s.Data[KeyHubAddress])),
		ClusterName:      strings.TrimSpace(string(s.Data[KeyClusterName])),
		Request:          strings.TrimSpace(string(s.Data[KeyRequest])),
		BootstrapVersion: string(s.Data[KeyBootstrapVersion]),
	}
	if len(s.Data[KeyPrivateKey]) > 0 {
		key, err := pki.ParsePrivateKey(s.Data[KeyPrivateKey])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where(KeyPrivateKey), err)
		}
		c.Key = key
	}
	if len(s.Data[KeyCertificate]) > 0 {
		if c.Key == nil {
			return nil, fmt.Errorf("%s is set but %s is empty", where(KeyCertificate), KeyPrivateKey)
		}
		cert, err := pki.ParseCertificatePEM(s.Data[KeyCertificate])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where(KeyCertificate), err)
		}
		if !c.Key.PublicKey.Equal(cert.PublicKey) {
			return nil, fmt.Errorf("%s does not belong to %s", where(KeyCertificate), KeyPrivateKey)
		}
		name, err := pki.ClusterFromCertificate(cert)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where(KeyCertificate), err)
		}
		if c.ClusterName != "" && name != c.ClusterName {
			return nil, fmt.Errorf("%s names cluster %q but %s is %q", where(KeyCertificate), name, KeyClusterName, c.ClusterName)
		}
		c.ClusterName = name
		c.Cert = cert
		if c.CA, err = pki.ParseCertificatePEM(s.Data[KeyCA]); err != nil {
			return nil, fmt.Errorf("%s: %w", where(KeyCA), err)
		}
		if c.HubAddress == "" {
			return nil, fmt.Errorf("%s is empty", where(KeyHubAddress))
		}
	}
	if c.Request != "" && (c.Key == nil || c.ClusterName == "" || c.HubAddress == "" || len(s.Data[KeyCA]) == 0) {
		return nil, fmt.Errorf("%s %q is pending but %s, %s, %s or %s is empty", where(KeyRequest), c.Request, KeyPrivateKey, KeyClusterName, KeyHubAddress, KeyCA)
	}
	if c.Request != "" && c.CA == nil {
		ca, err := pki.ParseCertificatePEM(s.Data[KeyCA])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where(KeyCA), err)
		}
		c.CA = ca
	}
	return c, nil
}

// validAt says whether the credentials hold a certificate valid at now.
func (c *Credentials) validAt(now time.Time) bool {
	return c != nil && c.Cert != nil && !now.Before(c.Cert.NotBefore) && now.Before(c.Cert.NotAfter)
}

// Mode is where the agent's identity comes from.
type Mode int

const (
	// UseFiles: neither Secret gives an identity; the agent loads
	// --cert-file, --key-file and --ca-file (flotilla-pki).
	UseFiles Mode = iota
	// UseCredentials: the credentials Secret holds a certificate valid
	// now.
	UseCredentials
	// Resume: a request is pending; poll it with the stored key.
	Resume
	// Register: join with the bootstrap Secret's token.
	Register
)

func (m Mode) String() string {
	switch m {
	case UseFiles:
		return "files"
	case UseCredentials:
		return "credentials"
	case Resume:
		return "resume"
	case Register:
		return "register"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Plan is Decide's answer.
type Plan struct {
	Mode Mode
	// Why says in a sentence what decided, for the log and for errors.
	Why string
	// ClusterName and HubAddress are the identity's (empty for UseFiles).
	ClusterName string
	HubAddress  string
	// ReuseKey: Register with the stored key (it was stored for this
	// bootstrap Secret before a register that did not finish).
	ReuseKey bool
	// DeleteBootstrap: the bootstrap Secret is the one the credentials
	// came from, left behind by a restart between storing the
	// certificate and deleting it.
	DeleteBootstrap bool
}

// Decide says where the agent's identity comes from, given the
// credentials and bootstrap Secrets (nil: absent) or why they could not
// be read (credsErr, bootErr), at now.
//
//   - A bootstrap Secret the credentials did not come from is a new
//     `join`: register with it, whatever the credentials hold (a member
//     re-created on the hub refuses the old certificate).
//   - A certificate valid now is used.
//   - A pending request is polled.
//   - A bootstrap Secret (the one the credentials came from) registers
//     again, with the stored key.
//   - Otherwise the files, with the reason in Why.
//
// A bootstrap Secret that cannot be read is an error: someone meant this
// agent to join and it cannot. Unreadable credentials are an error unless
// a bootstrap Secret replaces them.
func Decide(creds *Credentials, credsErr error, boot *Bootstrap, bootErr error, now time.Time) (Plan, error) {
	if bootErr != nil {
		return Plan{}, bootErr
	}
	if credsErr != nil && boot == nil {
		return Plan{}, fmt.Errorf("%w (delete the Secret and join again, or repair it)", credsErr)
	}
	if credsErr != nil {
		creds = nil
	}
	if boot != nil && (creds == nil || creds.BootstrapVersion != boot.Version) {
		return Plan{Mode: Register, ClusterName: boot.ClusterName, HubAddress: boot.HubAddress,
			Why: fmt.Sprintf("a bootstrap Secret for cluster %q asks to join hub %s", boot.ClusterName, boot.HubAddress)}, nil
	}
	if creds.validAt(now) {
		return Plan{Mode: UseCredentials, ClusterName: creds.ClusterName, HubAddress: creds.HubAddress, DeleteBootstrap: boot != nil,
			Why: fmt.Sprintf("the credentials Secret holds a certificate for cluster %q valid until %s", creds.ClusterName, creds.Cert.NotAfter.UTC().Format(time.RFC3339))}, nil
	}
	if creds != nil && creds.Request != "" {
		return Plan{Mode: Resume, ClusterName: creds.ClusterName, HubAddress: creds.HubAddress,
			Why: fmt.Sprintf("certificate request %s for cluster %q is pending", creds.Request, creds.ClusterName)}, nil
	}
	if boot != nil {
		return Plan{Mode: Register, ClusterName: boot.ClusterName, HubAddress: boot.HubAddress, ReuseKey: creds.Key != nil && creds.Cert == nil,
			Why: fmt.Sprintf("the bootstrap Secret for cluster %q has no certificate yet", boot.ClusterName)}, nil
	}
	switch {
	case creds != nil && creds.Cert != nil:
		return Plan{Mode: UseFiles, Why: fmt.Sprintf("the certificate in the credentials Secret is not valid now (%s to %s) and there is no bootstrap Secret: join again with `kubectl flotilla join`",
			creds.Cert.NotBefore.UTC().Format(time.RFC3339), creds.Cert.NotAfter.UTC().Format(time.RFC3339))}, nil
	case creds != nil:
		return Plan{Mode: UseFiles, Why: "the credentials Secret holds no certificate and no pending request, and there is no bootstrap Secret"}, nil
	}
	return Plan{Mode: UseFiles, Why: "there is neither a credentials Secret nor a bootstrap Secret"}, nil
}

// errNoCertificate is returned for a certificate response without one.
var errNoCertificate = errors.New("the hub reported the certificate ISSUED but sent none")

// checkIssued parses the certificate the hub issued for key and checks it
// is what the agent asked for: its key, a client certificate naming
// cluster, valid at now.
func checkIssued(certPEM []byte, key *ecdsa.PrivateKey, cluster string, now time.Time) (*x509.Certificate, error) {
	if len(certPEM) == 0 {
		return nil, errNoCertificate
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("the issued certificate is not a PEM CERTIFICATE")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing the issued certificate: %w", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("the issued certificate is not for this agent's key")
	}
	name, err := pki.ClusterFromCertificate(cert)
	if err != nil {
		return nil, fmt.Errorf("the issued certificate: %w", err)
	}
	if name != cluster {
		return nil, fmt.Errorf("the issued certificate names cluster %q, not %q", name, cluster)
	}
	clientAuth := false
	for _, u := range cert.ExtKeyUsage {
		clientAuth = clientAuth || u == x509.ExtKeyUsageClientAuth
	}
	if !clientAuth {
		return nil, errors.New("the issued certificate is not for client authentication")
	}
	if now.Before(cert.NotBefore) || !now.Before(cert.NotAfter) {
		return nil, fmt.Errorf("the issued certificate is not valid now (%s to %s)", cert.NotBefore.UTC().Format(time.RFC3339), cert.NotAfter.UTC().Format(time.RFC3339))
	}
	return cert, nil
}

// RenewAt is when a certificate valid from notBefore to notAfter is
// renewed: at 80 % of its lifetime. received, when set, is when the agent
// got the certificate from the hub; a hub that backdates NotBefore (for
// members whose clocks run behind) would otherwise put the 80 % mark of
// a short-lived certificate in the past, and the agent would renew again
// at once. The lifetime is therefore counted from the later of the two.
func RenewAt(notBefore, notAfter, received time.Time) time.Time {
	start := notBefore
	if received.After(start) && received.Before(notAfter) {
		start = received
	}
	return start.Add(notAfter.Sub(start) * 4 / 5)
}
