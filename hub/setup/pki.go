package setup

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/startup"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/hubca"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/pkg/serving"
)

// The hub CA (self-managed mode, pkg/hubca): that one Secret in the hub's
// namespace, read by name. Creating it the first time is the revision
// key's create rule (revisionkey.go); the hub still cannot read any other
// Secret.
//
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get,resourceNames=flotilla-hub-ca,namespace=flotilla-system

// Bounds of --serving-certificate-lifetime.
const (
	DefaultServingCertificateLifetime = hubca.DefaultServingLifetime
	// MinServingCertificateLifetime keeps renewals (at 80 %) at least
	// twelve seconds apart.
	MinServingCertificateLifetime = time.Minute
)

// ServingServiceNames are the Services of deploy/hub that reach the hub:
// the sync endpoint, its headless twin and the webhook. A self-managed
// hub's serving certificate is always valid for their names in the hub's
// namespace (DefaultServingHosts).
var ServingServiceNames = []string{"flotilla-hub", "flotilla-hub-headless", "flotilla-hub-webhook"}

// CertificateOptions configure the hub's own certificates when it manages
// them (Options.CertDir empty).
type CertificateOptions struct {
	// ServingLifetime is the lifetime of each serving certificate
	// (--serving-certificate-lifetime): renewed at 80 % of it.
	// DefaultServingCertificateLifetime when zero; at least
	// MinServingCertificateLifetime.
	ServingLifetime time.Duration
	// ServingHosts are DNS names and IP addresses the serving certificate
	// is valid for besides DefaultServingHosts and loopback
	// (--serving-hosts): whatever agents outside the hub cluster dial (a
	// load balancer's name, a node IP).
	ServingHosts []string
	// ReloadInterval is how often provided certificate files
	// (Options.CertDir) are reread; hubca.DefaultReloadInterval when zero.
	ReloadInterval time.Duration
}

// validate refuses values the certificate flags must not have, naming the
// flag.
func (o CertificateOptions) validate() error {
	if o.ServingLifetime != 0 && o.ServingLifetime < MinServingCertificateLifetime {
		return fmt.Errorf("--serving-certificate-lifetime is %s: give at least %s (0 means the default, %s)", o.ServingLifetime, MinServingCertificateLifetime, DefaultServingCertificateLifetime)
	}
	for _, h := range o.ServingHosts {
		if net.ParseIP(h) != nil {
			continue
		}
		if errs := validation.IsDNS1123Subdomain(h); len(errs) > 0 {
			return fmt.Errorf("--serving-hosts: %q is neither an IP address nor a DNS name: %s", h, strings.Join(errs, "; "))
		}
	}
	if o.ReloadInterval < 0 {
		return fmt.Errorf("certificate reload interval %s is negative", o.ReloadInterval)
	}
	return nil
}

// DefaultServingHosts are the names of ServingServiceNames in namespace:
// <svc>.<ns>, <svc>.<ns>.svc and <svc>.<ns>.svc.cluster.local.
func DefaultServingHosts(namespace string) []string {
	var hosts []string
	for _, svc := range ServingServiceNames {
		base := svc + "." + namespace
		hosts = append(hosts, base, base+".svc", base+".svc.cluster.local")
	}
	return hosts
}

// hubPKI is the hub's PKI as the rest of setup uses it, whichever mode
// made it: self-managed (the CA in Secret flotilla-hub-ca, serving
// certificates issued in memory and rotated by a hubca.Rotator) or
// provided files (Options.CertDir, reread by hubca.Files).
type hubPKI struct {
	// CA is the CA the hub signs agent certificates with: the hub CA, or
	// ca.crt and ca.key in --cert-dir. nil: no key to sign with (a
	// --cert-dir without ca.key, or a hub that serves neither agents nor
	// the webhook).
	CA *pki.KeyPair
	// ClientCAs are the CAs agents' client certificates must chain to.
	// Self-managed: the hub CA and --agent-ca-file's. Provided files:
	// --agent-ca-file's, else ca.crt, as loaded at start (a new CA is a
	// restart: agents need it too).
	ClientCAs *x509.CertPool
	// GetCertificate serves the hub's certificate, chain [leaf, CA], to
	// the sync server and the webhook server alike.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// CABundle is the PEM of the CA that signs the serving certificate,
	// as of now: what the webhook configurations' caBundle must hold.
	CABundle func() []byte

	// servingNotAfter and caNotAfter feed the expiry metric.
	servingNotAfter, caNotAfter func() time.Time
	// renewer keeps GetCertificate current (hubca.Rotator or
	// hubca.Files); it runs on every replica.
	renewer manager.Runnable
}

// serves says whether there is a certificate to serve.
func (p *hubPKI) serves() bool { return p.GetCertificate != nil }

// loadPKI loads or creates the hub's PKI. A hub that serves neither
// agents nor the webhook needs none and gets an empty hubPKI.
func loadPKI(ctx context.Context, opts Options, scheme *runtime.Scheme) (*hubPKI, error) {
	if opts.SyncAddr == "" && opts.WebhookAddr == "" {
		return &hubPKI{}, nil
	}
	if opts.CertDir != "" {
		return providedPKI(opts)
	}
	return selfManagedPKI(ctx, opts, scheme)
}

// ensureCA is hubca.Ensure, the hub's first call to its apiserver, tried
// again for up to startup.Timeout while the apiserver cannot be reached
// (a hub pod on a node that just started; internal/startup). Ensure may
// be tried again: a Secret its lost create made is read the next time.
func ensureCA(ctx context.Context, log logr.Logger, c client.Client, namespace string) (*pki.KeyPair, error) {
	ctx, cancel := context.WithTimeout(ctx, startup.Timeout)
	defer cancel()
	return startup.Retry(ctx, log, "reading the hub CA", func(ctx context.Context) (*pki.KeyPair, error) {
		return hubca.Ensure(ctx, c, c, namespace)
	})
}

// selfManagedPKI reads the hub CA from its Secret (creating it the first
// time) and starts a Rotator on it.
func selfManagedPKI(ctx context.Context, opts Options, scheme *runtime.Scheme) (*hubPKI, error) {
	// An uncached client: the manager's cache is not running yet, and the
	// hub may read only this one Secret.
	c, err := client.New(opts.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	ns := hubNamespace(opts)
	ca, err := ensureCA(ctx, opts.Logger, c, ns)
	if err != nil {
		return nil, fmt.Errorf("the hub CA (self-managed, as --cert-dir is empty): %w", err)
	}
	hosts := append(DefaultServingHosts(ns), opts.Certificates.ServingHosts...)
	lifetime := opts.Certificates.ServingLifetime
	if lifetime == 0 {
		lifetime = DefaultServingCertificateLifetime
	}
	rot, err := hubca.NewRotator(ca, hubca.RotatorOptions{Hosts: hosts, Lifetime: lifetime, Logger: opts.Logger.WithName("serving-certificate")})
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if opts.AgentCAFile != "" {
		extra, err := os.ReadFile(opts.AgentCAFile)
		if err != nil {
			return nil, fmt.Errorf("--agent-ca-file: %w", err)
		}
		if !pool.AppendCertsFromPEM(extra) {
			return nil, fmt.Errorf("--agent-ca-file: %s holds no PEM certificate", opts.AgentCAFile)
		}
	}
	caPEM := ca.CertPEM()
	opts.Logger.Info("hub certificates are self-managed", "caSecret", ns+"/"+flotillav1.HubCASecretName, "caHash", bootstrap.CAHash(ca.Cert),
		"servingLifetime", lifetime.String(), "servingHosts", strings.Join(hosts, ","))
	return &hubPKI{
		CA:              ca,
		ClientCAs:       pool,
		GetCertificate:  rot.GetCertificate,
		CABundle:        func() []byte { return caPEM },
		servingNotAfter: rot.NotAfter,
		caNotAfter:      func() time.Time { return ca.Cert.NotAfter },
		renewer:         rot,
	}, nil
}

// providedPKI serves the certificate in Options.CertDir, reread as it
// changes, and signs agent certificates with ca.key when it is there.
func providedPKI(opts Options) (*hubPKI, error) {
	files, err := hubca.LoadFiles(opts.CertDir, opts.Certificates.ReloadInterval, opts.Logger.WithName("hub-certificate"))
	if err != nil {
		return nil, fmt.Errorf("--cert-dir: %w", err)
	}
	caFile := filepath.Join(opts.CertDir, pki.CACertFile)
	poolFile := caFile
	if opts.AgentCAFile != "" {
		poolFile = opts.AgentCAFile
	}
	pool, err := pki.LoadCertPool(poolFile)
	if err != nil {
		return nil, fmt.Errorf("the agents' CA bundle %s: %w", poolFile, err)
	}
	var ca *pki.KeyPair
	keyFile := filepath.Join(opts.CertDir, pki.CAKeyFile)
	if _, err := os.Stat(keyFile); err == nil {
		if ca, err = pki.LoadKeyPair(caFile, keyFile); err != nil {
			return nil, fmt.Errorf("--cert-dir holds %s, which signs agent certificates, but it does not load: %w", pki.CAKeyFile, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("--cert-dir: %w", err)
	}
	if ca != nil && opts.AgentCAFile != "" {
		// --agent-ca-file says which CAs vouch for agents, and ca.crt is
		// not among them: certificates ca.key signed would be refused,
		// so the hub signs none (joining is off).
		opts.Logger.Info("--agent-ca-file is set: the hub does not sign agent certificates with ca.key in --cert-dir")
		ca = nil
	}
	opts.Logger.Info("hub certificates are provided", "certDir", opts.CertDir, "signsAgents", ca != nil)
	return &hubPKI{
		CA:              ca,
		ClientCAs:       pool,
		GetCertificate:  files.GetCertificate,
		CABundle:        files.CABundle,
		servingNotAfter: files.NotAfter,
		caNotAfter:      files.CANotAfter,
		renewer:         files,
	}, nil
}

// serverTLSConfig is the sync server's TLS configuration. Like
// pki.ServerTLSConfig it asks for a client certificate without requiring
// one: the sync server verifies agents against ClientCAs itself, on every
// RPC, and a joining agent's Register has no certificate yet.
func (p *hubPKI) serverTLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: p.GetCertificate,
		ClientCAs:      p.ClientCAs,
		ClientAuth:     tls.RequestClientCert,
	}
}

// webhookTLSOpts are the webhook server's TLS options: pkg/serving's
// hardening, and the hub's GetCertificate. controller-runtime's webhook
// server uses a GetCertificate its TLSOpts set instead of watching
// CertDir (webhook.Options: CertDir, CertName and KeyName "are only used
// when TLSOpts does not set GetCertificate").
func (p *hubPKI) webhookTLSOpts() []func(*tls.Config) {
	return append(serving.WebhookTLSOpts(), func(c *tls.Config) { c.GetCertificate = p.GetCertificate })
}

// addTo runs the renewer on mgr (every replica) and registers the expiry
// metric on registerer (controller-runtime's registry when nil).
func (p *hubPKI) addTo(mgr manager.Manager, registerer prometheus.Registerer) error {
	if !p.serves() {
		return nil
	}
	if registerer == nil {
		registerer = ctrlmetrics.Registry
	}
	if err := registerer.Register(&expiryCollector{serving: p.servingNotAfter, ca: p.caNotAfter}); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			return errors.New("the hub certificate metrics are already registered on this registerer; give each hub its own")
		}
		return err
	}
	return mgr.Add(p.renewer)
}

// expiryCollector exports flotilla_hub_certificate_expiry_timestamp_seconds
// as of each scrape, so a rotation shows at once.
type expiryCollector struct {
	serving, ca func() time.Time
}

var expiryDesc = prometheus.NewDesc("flotilla_hub_certificate_expiry_timestamp_seconds",
	"When the hub's certificates expire, in seconds since the epoch, by certificate: serving (the one the sync and webhook servers present now; a self-managed hub renews it at 80 % of its lifetime) and ca (the CA agents pin and the webhook configurations trust). Alert well before either.",
	[]string{"certificate"}, nil)

func (c *expiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- expiryDesc }

func (c *expiryCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(c.serving().Unix()), "serving")
	ch <- prometheus.MustNewConstMetric(expiryDesc, prometheus.GaugeValue, float64(c.ca().Unix()), "ca")
}

// MetricTypes says the type of the metric the collector exports
// (hack/metricsdoc).
func (c *expiryCollector) MetricTypes() map[string]prometheus.ValueType {
	return map[string]prometheus.ValueType{"flotilla_hub_certificate_expiry_timestamp_seconds": prometheus.GaugeValue}
}
