package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// File names the Ensure* functions and cmd/flotilla-pki use inside a
// directory. Keys are written with mode 0600, in a directory of mode 0700
// (EnsureKeyDir).
const (
	CACertFile  = "ca.crt"
	CAKeyFile   = "ca.key"
	HubCertFile = "hub.crt"
	HubKeyFile  = "hub.key"
)

// AgentCertFile is the file name of cluster's agent certificate.
func AgentCertFile(cluster string) string { return "agent-" + cluster + ".crt" }

// AgentKeyFile is the file name of cluster's agent key.
func AgentKeyFile(cluster string) string { return "agent-" + cluster + ".key" }

// Validity periods used when the caller passes zero.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultLeafValidity = 365 * 24 * time.Hour
	// renewBefore is how close to expiry an existing certificate may be and
	// still be kept by the Ensure* functions.
	renewBefore = 7 * 24 * time.Hour
	// clockSkew backdates NotBefore so a member whose clock runs a little
	// behind the machine that issued the certificate still accepts it.
	clockSkew = time.Hour
)

// ClusterURIScheme and ClusterURIHost make up the URI SAN that names an
// agent's cluster: flotilla://cluster/<name>.
const (
	ClusterURIScheme = "flotilla"
	ClusterURIHost   = "cluster"
)

// ClusterURI is the URI SAN that names cluster in an agent certificate.
func ClusterURI(cluster string) *url.URL {
	return &url.URL{Scheme: ClusterURIScheme, Host: ClusterURIHost, Path: "/" + cluster}
}

// ValidateClusterName checks that name can be a MemberCluster name and so
// the suffix of its hub namespace flotilla-cluster-<name>.
func ValidateClusterName(name string) error {
	if name == "" {
		return errors.New("cluster name is empty")
	}
	if len(name) > v1alpha1.MaxClusterNameLength {
		return fmt.Errorf("cluster name %q is longer than %d characters", name, v1alpha1.MaxClusterNameLength)
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("cluster name %q is not valid: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// ParseClusterURI returns the cluster a flotilla://cluster/<name> URI names.
// ok is false for URIs of any other form, which are not Flotilla's to judge;
// err is set for a Flotilla cluster URI whose name is not a valid cluster
// name.
func ParseClusterURI(u *url.URL) (cluster string, ok bool, err error) {
	if u == nil || u.Scheme != ClusterURIScheme || u.Host != ClusterURIHost {
		return "", false, nil
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", true, fmt.Errorf("cluster URI %q must be exactly %s://%s/<name>", u.String(), ClusterURIScheme, ClusterURIHost)
	}
	name, found := strings.CutPrefix(u.Path, "/")
	if !found || strings.Contains(name, "/") {
		return "", true, fmt.Errorf("cluster URI %q must be exactly %s://%s/<name>", u.String(), ClusterURIScheme, ClusterURIHost)
	}
	if err := ValidateClusterName(name); err != nil {
		return "", true, fmt.Errorf("cluster URI %q: %w", u.String(), err)
	}
	return name, true, nil
}

// ClusterFromCertificate returns the cluster cert's URI SAN names. A
// certificate that names no cluster, or more than one, names none: a hub
// must not have to guess which one the peer means.
func ClusterFromCertificate(cert *x509.Certificate) (string, error) {
	var found []string
	for _, u := range cert.URIs {
		name, ok, err := ParseClusterURI(u)
		if err != nil {
			return "", err
		}
		if ok {
			found = append(found, name)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("certificate %q has no %s://%s/<name> URI SAN; issue agent certificates with flotilla-pki agent", cert.Subject.CommonName, ClusterURIScheme, ClusterURIHost)
	case 1:
		return found[0], nil
	default:
		return "", fmt.Errorf("certificate %q names %d clusters (%s); an agent certificate must name exactly one", cert.Subject.CommonName, len(found), strings.Join(found, ", "))
	}
}

// VerifyAgent checks that chain (leaf first, as TLS presents it) was issued
// for client authentication by one of roots, and returns the cluster it
// names.
func VerifyAgent(chain []*x509.Certificate, roots *x509.CertPool, now time.Time) (string, error) {
	cluster, _, err := VerifyAgentChain(chain, roots, now)
	return cluster, err
}

// VerifyAgentChain is VerifyAgent that also says until when the
// verification holds: the earliest NotAfter of the certificates of the
// verified chain (the leaf, an intermediate or the root, whichever
// expires first). A server that keeps a connection open past it must end
// it then.
func VerifyAgentChain(chain []*x509.Certificate, roots *x509.CertPool, now time.Time) (cluster string, notAfter time.Time, err error) {
	if len(chain) == 0 {
		return "", time.Time{}, errors.New("no client certificate was presented")
	}
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	verified, err := chain[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: intermediates,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("client certificate %q is not trusted: %w", chain[0].Subject.CommonName, err)
	}
	cluster, err = ClusterFromCertificate(chain[0])
	if err != nil {
		return "", time.Time{}, err
	}
	// Of several chains to the roots, the one that lasts longest is what
	// the peer proved.
	for _, c := range verified {
		end := c[0].NotAfter
		for _, cert := range c[1:] {
			if cert.NotAfter.Before(end) {
				end = cert.NotAfter
			}
		}
		if end.After(notAfter) {
			notAfter = end
		}
	}
	return cluster, notAfter, nil
}

// KeyPair is a certificate and its private key.
type KeyPair struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// CertPEM is the certificate as PEM.
func (kp *KeyPair) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: kp.Cert.Raw})
}

// KeyPEM is the private key as PKCS #8 PEM.
func (kp *KeyPair) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(kp.Key)
	if err != nil {
		return nil, fmt.Errorf("encoding private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// TLSCertificate is the pair as crypto/tls wants it.
func (kp *KeyPair) TLSCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{kp.Cert.Raw}, PrivateKey: kp.Key, Leaf: kp.Cert}
}

// WriteFiles writes the certificate and the key (mode 0600). Each file is
// written to a temporary name and renamed, so a reader never sees half a
// file.
func (kp *KeyPair) WriteFiles(certFile, keyFile string) error {
	keyPEM, err := kp.KeyPEM()
	if err != nil {
		return err
	}
	if err := writeFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certFile, kp.CertPEM(), 0o644)
}

func writeFileAtomic(name string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	defer os.Remove(f.Name()) // No-op once renamed.
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if err := os.Rename(f.Name(), name); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}

// LoadKeyPair reads a certificate and its key from PEM files.
func LoadKeyPair(certFile, keyFile string) (*KeyPair, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("reading certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("reading key: %w", err)
	}
	kp, err := ParseKeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s, %s: %w", certFile, keyFile, err)
	}
	return kp, nil
}

// ParseKeyPair parses a PEM certificate and its PEM ECDSA key (PKCS #8 or
// SEC 1) and checks that they belong together.
func ParseKeyPair(certPEM, keyPEM []byte) (*KeyPair, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("certificate: %w", err)
	}
	key, err := ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("the key does not belong to the certificate")
	}
	return &KeyPair{Cert: cert, Key: key}, nil
}

// ParsePrivateKey parses a PEM ECDSA private key (PKCS #8 or SEC 1).
func ParsePrivateKey(keyPEM []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("key: no PEM block")
	}
	var key any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		err = fmt.Errorf("unexpected PEM block %q", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	ecKey, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, errors.New("key: not an ECDSA key")
	}
	return ecKey, nil
}

// ParseCertificatePEM parses one PEM certificate.
func ParseCertificatePEM(data []byte) (*x509.Certificate, error) { return parseCertPEM(data) }

func parseCertPEM(data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no CERTIFICATE PEM block")
	}
	return x509.ParseCertificate(block.Bytes)
}

// NewCA creates a self-signed CA. A zero validity means DefaultCAValidity.
func NewCA(commonName string, validity time.Duration) (*KeyPair, error) {
	if validity == 0 {
		validity = DefaultCAValidity
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"flotilla"}},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// Zero path length: this CA signs leaves only.
		MaxPathLenZero: true,
	}
	return issue(tmpl, nil, validity)
}

// IssueHub issues the hub's serving certificate. It is valid for
// 127.0.0.1, ::1 and localhost, so loopback tests and the testbed need no
// names, plus hosts (DNS names or IP addresses). A zero validity means
// DefaultLeafValidity.
func (kp *KeyPair) IssueHub(hosts []string, validity time.Duration) (*KeyPair, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "flotilla-hub", Organization: []string{"flotilla"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	tmpl.IPAddresses, tmpl.DNSNames = hubNames(hosts)
	return issue(tmpl, kp, validity)
}

// hubNames splits the hub's names into IP and DNS SANs, loopback first,
// without duplicates.
func hubNames(hosts []string) ([]net.IP, []string) {
	ips := []net.IP{net.IPv4(127, 0, 0, 1).To4(), net.IPv6loopback}
	dns := []string{"localhost"}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			if ip4 := ip.To4(); ip4 != nil {
				ip = ip4
			}
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		} else if !slices.Contains(dns, h) {
			dns = append(dns, h)
		}
	}
	return ips, dns
}

// IssueAgent issues the client certificate of cluster's agent, naming the
// cluster in a flotilla://cluster/<name> URI SAN. A zero validity means
// DefaultLeafValidity.
func (kp *KeyPair) IssueAgent(cluster string, validity time.Duration) (*KeyPair, error) {
	if err := ValidateClusterName(cluster); err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "flotilla-agent:" + cluster, Organization: []string{"flotilla"}},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{ClusterURI(cluster)},
	}
	return issue(tmpl, kp, validity)
}

// Issue signs a leaf certificate with a new key for what tmpl says:
// subject, names and key usages. It sets the serial number and the
// validity itself (never past the CA's own) and leaves tmpl unchanged. A
// zero validity means DefaultLeafValidity. IssueHub and IssueAgent make
// Flotilla's own certificates; Issue is for the others the same CA code
// serves, such as the testbed's apiserver and admin certificates.
func (kp *KeyPair) Issue(tmpl *x509.Certificate, validity time.Duration) (*KeyPair, error) {
	if tmpl.IsCA {
		return nil, fmt.Errorf("issuing %q: Issue makes leaf certificates, NewCA makes CAs", tmpl.Subject.CommonName)
	}
	leaf := *tmpl
	return issue(&leaf, kp, validity)
}

// issue signs tmpl with parent, or self-signs it when parent is nil.
func issue(tmpl *x509.Certificate, parent *KeyPair, validity time.Duration) (*KeyPair, error) {
	if validity == 0 {
		validity = DefaultLeafValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore = now.Add(-clockSkew)
	tmpl.NotAfter = now.Add(validity)
	signer, signerCert := key, tmpl
	if parent != nil {
		signer, signerCert = parent.Key, parent.Cert
		if tmpl.NotAfter.After(parent.Cert.NotAfter) {
			// A leaf outliving its CA would fail verification anyway.
			tmpl.NotAfter = parent.Cert.NotAfter
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, &key.PublicKey, signer)
	if err != nil {
		return nil, fmt.Errorf("signing certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Cert: cert, Key: key}, nil
}

// KeyDirMode is the mode of a directory holding private keys: its owner's
// alone, so that no other user can list, replace or add key files.
const KeyDirMode os.FileMode = 0o700

// EnsureKeyDir creates dir with KeyDirMode, or, when it exists already,
// takes away any group and other permission it has, before keys are
// written into it. A key file's own 0600 keeps it from being read, but a
// directory others may write lets them swap a key or certificate, and one
// they may read shows which keys exist.
func EnsureKeyDir(dir string) error {
	if err := os.MkdirAll(dir, KeyDirMode); err != nil {
		return fmt.Errorf("creating the key directory %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("checking the key directory %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("key directory %s is not a directory", dir)
	}
	if fi.Mode().Perm()&^KeyDirMode != 0 {
		if err := os.Chmod(dir, KeyDirMode); err != nil {
			return fmt.Errorf("making the key directory %s private (mode %o): %w", dir, KeyDirMode, err)
		}
	}
	return nil
}

// EnsureCA loads the CA in dir, creating dir and a new CA when there is
// none. A CA that exists but cannot be loaded is an error, not something to
// replace silently: every certificate it issued would stop working.
func EnsureCA(dir string) (*KeyPair, error) {
	certFile, keyFile := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	if certErr == nil || keyErr == nil {
		ca, err := LoadKeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("loading the CA in %s (remove %s and %s to start over): %w", dir, CACertFile, CAKeyFile, err)
		}
		return ca, nil
	}
	if err := EnsureKeyDir(dir); err != nil {
		return nil, err
	}
	ca, err := NewCA("flotilla-ca", 0)
	if err != nil {
		return nil, err
	}
	if err := ca.WriteFiles(certFile, keyFile); err != nil {
		return nil, err
	}
	return ca, nil
}

// EnsureHub makes sure dir holds a hub certificate from ca that is valid
// for hosts (and loopback) for at least a week more, issuing a new one
// otherwise. It reports whether it issued one.
func EnsureHub(dir string, ca *KeyPair, hosts []string) (issued bool, err error) {
	if err := EnsureKeyDir(dir); err != nil {
		return false, err
	}
	certFile, keyFile := filepath.Join(dir, HubCertFile), filepath.Join(dir, HubKeyFile)
	if kp, err := LoadKeyPair(certFile, keyFile); err == nil && usable(kp, ca, x509.ExtKeyUsageServerAuth) {
		ips, dns := hubNames(hosts)
		if coversAll(kp.Cert, ips, dns) {
			return false, nil
		}
	}
	kp, err := ca.IssueHub(hosts, 0)
	if err != nil {
		return false, err
	}
	return true, kp.WriteFiles(certFile, keyFile)
}

// EnsureAgent makes sure dir holds cluster's agent certificate from ca,
// valid for at least a week more, issuing a new one otherwise. It reports
// whether it issued one.
func EnsureAgent(dir string, ca *KeyPair, cluster string) (issued bool, err error) {
	if err := EnsureKeyDir(dir); err != nil {
		return false, err
	}
	certFile, keyFile := filepath.Join(dir, AgentCertFile(cluster)), filepath.Join(dir, AgentKeyFile(cluster))
	if kp, err := LoadKeyPair(certFile, keyFile); err == nil && usable(kp, ca, x509.ExtKeyUsageClientAuth) {
		if name, err := ClusterFromCertificate(kp.Cert); err == nil && name == cluster {
			return false, nil
		}
	}
	kp, err := ca.IssueAgent(cluster, 0)
	if err != nil {
		return false, err
	}
	return true, kp.WriteFiles(certFile, keyFile)
}

// usable says whether kp was issued by ca for usage and stays valid for at
// least renewBefore.
func usable(kp, ca *KeyPair, usage x509.ExtKeyUsage) bool {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	_, err := kp.Cert.Verify(x509.VerifyOptions{
		Roots:       roots,
		CurrentTime: time.Now().Add(renewBefore),
		KeyUsages:   []x509.ExtKeyUsage{usage},
	})
	return err == nil
}

func coversAll(cert *x509.Certificate, ips []net.IP, dns []string) bool {
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	for _, d := range dns {
		if !slices.Contains(cert.DNSNames, d) {
			return false
		}
	}
	return true
}

// LoadCertPool reads the PEM certificates in caFile into a pool.
func LoadCertPool(caFile string) (*x509.CertPool, error) {
	data, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bytes.TrimSpace(data)) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caFile)
	}
	return pool, nil
}

// ServerTLSConfig is the hub's TLS configuration: its serving certificate,
// and the CA in caFile as ClientCAs. A hub that verifies agents against a
// bundle of their own (its --agent-ca-file) replaces ClientCAs with that
// pool (LoadCertPool).
//
// It asks clients for a certificate but lets the handshake finish without
// one, or with one from another CA (tls.RequestClientCert). That is on
// purpose: the sync server verifies the chain itself against ClientCAs (see
// VerifyAgent), on every RPC, so it can refuse a stranger with an
// UNAUTHENTICATED status that says what is wrong, where a failed handshake
// only tells the agent "bad certificate". A server that does not verify
// peers itself must set ClientAuth to tls.RequireAndVerifyClientCert.
func ServerTLSConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	kp, err := LoadKeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	pool, err := LoadCertPool(caFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{kp.TLSCertificate()},
		ClientCAs:    pool,
		ClientAuth:   tls.RequestClientCert,
	}, nil
}

// ClientTLSConfig is an agent's TLS configuration: its client certificate,
// and the CA in caFile as the only roots it trusts for the hub. serverName
// is the name the hub's certificate must carry; empty means the host of the
// address dialled.
func ClientTLSConfig(certFile, keyFile, caFile, serverName string) (*tls.Config, error) {
	kp, err := LoadKeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	pool, err := LoadCertPool(caFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		Certificates:         []tls.Certificate{kp.TLSCertificate()},
		GetClientCertificate: reloadingClientCertificate(certFile, keyFile, kp),
		RootCAs:              pool,
		ServerName:           serverName,
	}, nil
}

// reloadingClientCertificate presents the certificate in certFile and
// keyFile as they are at each handshake. The agent dials a new connection
// for every stream, so a renewed certificate written over the old one is
// used from the next connection on, without a restart: this is how an
// agent whose certificate expired (and whose stream the hub ended then)
// comes back. Files that cannot be read, do not hold a matching pair, or
// name another cluster than the certificate the configuration was made
// with (Certificates, which the agent's cluster was read from) leave the
// last good certificate in place.
func reloadingClientCertificate(certFile, keyFile string, first *KeyPair) func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	cluster, _ := ClusterFromCertificate(first.Cert)
	var mu sync.Mutex
	current := first.TLSCertificate()
	return func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		mu.Lock()
		defer mu.Unlock()
		if next, err := LoadKeyPair(certFile, keyFile); err == nil {
			if name, err := ClusterFromCertificate(next.Cert); err == nil && name == cluster {
				current = next.TLSCertificate()
			}
		}
		c := current
		return &c, nil
	}
}

// DynamicClientTLSConfig is an agent's TLS configuration whose client
// certificate and trusted hub CAs are asked for at every handshake:
// getCert returns the certificate to present (an empty one presents
// none), roots the CAs the hub's serving certificate must chain to. An
// agent whose identity lives in a Secret builds its configuration before
// it holds a certificate (it joins later) and swaps the certificate when
// it renews it; the sync client dials a new connection for every stream,
// so the next stream presents the newest certificate while an open one
// keeps going.
//
// crypto/tls verifies the server against a fixed RootCAs, so the chain is
// verified in VerifyConnection instead (VerifyServer), with the checks
// crypto/tls would make: the chain, the server name and the server-auth
// usage. serverName is the name (or IP address) the hub's certificate
// must carry; empty means the SNI sent, which is the host dialled when
// that is a DNS name, and nothing (a refused handshake) for an IP address.
func DynamicClientTLSConfig(getCert func(*tls.CertificateRequestInfo) (*tls.Certificate, error), roots func() *x509.CertPool, serverName string) *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		GetClientCertificate: getCert,
		ServerName:           serverName,
		// Not insecure: VerifyConnection runs on every handshake and
		// fails it unless the chain verifies against roots().
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection.
		VerifyConnection: func(cs tls.ConnectionState) error {
			// cs.ServerName is the SNI sent, which is empty for an IP
			// address: the name asked for is the one to check.
			name := serverName
			if name == "" {
				name = cs.ServerName
			}
			return VerifyServer(cs.PeerCertificates, roots(), name)
		},
	}
}

// VerifyServer checks that chain (leaf first, as TLS presents it) is a
// serving certificate for serverName issued by one of roots. A nil or
// empty roots trusts nothing.
func VerifyServer(chain []*x509.Certificate, roots *x509.CertPool, serverName string) error {
	if len(chain) == 0 {
		return errors.New("the hub presented no certificate")
	}
	if roots == nil {
		return errors.New("no hub CA is known yet to verify the hub's certificate against")
	}
	if serverName == "" {
		return errors.New("no server name to verify the hub's certificate for")
	}
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: intermediates,
		DNSName:       serverName,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return fmt.Errorf("the hub's certificate %q is not trusted: %w", chain[0].Subject.CommonName, err)
	}
	return nil
}
