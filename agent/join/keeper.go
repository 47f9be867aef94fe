package join

import (
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpccreds "google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/util/retry"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// Defaults for the zero values of Config's tuning fields.
const (
	DefaultPollInitial  = time.Second
	DefaultPollMax      = 10 * time.Second
	DefaultRetryInitial = time.Second
	DefaultRetryMax     = time.Minute
	// DefaultRenewTimeout bounds one renewal, the polling included; a
	// renewal that takes longer is retried with a new key.
	DefaultRenewTimeout = 5 * time.Minute
	// rpcTimeout bounds each call to the hub.
	rpcTimeout = 30 * time.Second
)

// Reasons of the Events the Keeper records on the credentials Secret.
const (
	ReasonJoinRefused       = "JoinRefused"
	ReasonCertificateDenied = "CertificateDenied"
	ReasonJoined            = "Joined"
	ReasonRenewed           = "CertificateRenewed"
	ReasonRenewFailed       = "CertificateRenewalFailed"
)

// Config configures a Keeper.
type Config struct {
	// Reader reads the Secrets from the member apiserver (never a cache:
	// a new leader must see what the last one wrote). Writer writes
	// them, and Events.
	Reader kclient.Reader
	Writer kclient.Client
	// Namespace holds both Secrets.
	Namespace string
	// CredentialsSecret and BootstrapSecret name them; empty means
	// flotilla-agent-credentials and flotilla-agent-bootstrap.
	CredentialsSecret string
	BootstrapSecret   string
	// Cluster is the cluster the agent started as (Plan.ClusterName).
	// Secrets that come to name another make the Keeper fail, so the
	// agent restarts and decides again.
	Cluster string
	// Target and ServerName are the hub as a gRPC target and the name its
	// serving certificate carries (empty: the host of a host:port Target).
	Target     string
	ServerName string
	// Source receives the certificate; the sync client's TLS
	// configuration reads it.
	Source *Source
	// Instance names this replica on Events.
	Instance string
	// Logger logs; the zero value discards.
	Logger logr.Logger

	// PollInitial and PollMax bound the wait between two polls of a
	// certificate request, which doubles from one to the other.
	PollInitial, PollMax time.Duration
	// RetryInitial and RetryMax bound the wait before retrying a failed
	// renewal (or a hub that cannot be reached while joining).
	RetryInitial, RetryMax time.Duration
	// RenewTimeout bounds one renewal.
	RenewTimeout time.Duration
}

// Keeper joins the hub when the agent has no certificate yet and renews
// the certificate at 80 % of its lifetime. It is a leader-only runnable:
// only the replica that holds the stream writes the Secret.
type Keeper struct {
	cfg Config
	log logr.Logger
	now func() time.Time
	// received is when the current certificate came from the hub (zero
	// for one read from the Secret).
	received time.Time
	// unsaved is a renewed pair the Secret does not hold yet.
	unsaved *pki.KeyPair
}

// NewKeeper checks cfg and returns a Keeper.
func NewKeeper(cfg Config) (*Keeper, error) {
	if cfg.Reader == nil || cfg.Writer == nil || cfg.Source == nil || cfg.Namespace == "" || cfg.Target == "" || cfg.Cluster == "" {
		return nil, errors.New("join: Config.Reader, Writer, Source, Namespace, Target and Cluster are required")
	}
	if cfg.CredentialsSecret == "" {
		cfg.CredentialsSecret = flotillav1.AgentCredentialsSecretName
	}
	if cfg.BootstrapSecret == "" {
		cfg.BootstrapSecret = flotillav1.AgentBootstrapSecretName
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&cfg.PollInitial, DefaultPollInitial}, {&cfg.PollMax, DefaultPollMax}, {&cfg.RetryInitial, DefaultRetryInitial}, {&cfg.RetryMax, DefaultRetryMax}, {&cfg.RenewTimeout, DefaultRenewTimeout}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if cfg.ServerName == "" {
		// The hub's certificate is checked for a name always: the SNI a
		// handshake reports is empty for an IP address.
		host, _, err := net.SplitHostPort(cfg.Target)
		if err != nil || host == "" {
			return nil, fmt.Errorf("join: Config.ServerName is empty and target %q is not host:port", cfg.Target)
		}
		cfg.ServerName = host
	}
	cfg.PollMax = max(cfg.PollMax, cfg.PollInitial)
	cfg.RetryMax = max(cfg.RetryMax, cfg.RetryInitial)
	return &Keeper{cfg: cfg, log: cfg.Logger.WithName("join").WithValues("cluster", cfg.Cluster), now: time.Now}, nil
}

// NeedLeaderElection: only the leader joins, renews and writes the Secret.
func (k *Keeper) NeedLeaderElection() bool { return true }

// Start obtains a certificate (Obtain), then renews it until ctx ends. An
// error means the agent cannot get an identity without a person: the
// hub denied it, refused the token, or is not the pinned hub.
func (k *Keeper) Start(ctx context.Context) error {
	if err := k.Obtain(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	k.rotate(ctx)
	return nil
}

// Obtain reads the Secrets afresh and puts a certificate into the Source:
// the stored one when it is valid, else by resuming a pending request or
// registering with the bootstrap token. It returns once the Source holds
// one, or with an error only a person can fix.
func (k *Keeper) Obtain(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		st, err := k.read(ctx)
		if err != nil {
			// The member apiserver did not answer: nothing to decide on.
			k.log.Info("reading the agent's Secrets failed; retrying", "error", err.Error())
			if !sleep(ctx, backoffDelay(attempt, k.cfg.RetryInitial, k.cfg.RetryMax)) {
				return ctx.Err()
			}
			continue
		}
		plan, err := Decide(st.creds, st.credsErr, st.boot, st.bootErr, k.now())
		if err != nil {
			return err
		}
		if plan.Mode != UseFiles && plan.ClusterName != k.cfg.Cluster {
			return fmt.Errorf("the agent's Secrets now name cluster %q, but it started as %q: restarting takes the new identity", plan.ClusterName, k.cfg.Cluster)
		}
		k.log.Info("deciding the agent's identity", "mode", plan.Mode.String(), "why", plan.Why)
		switch plan.Mode {
		case UseFiles:
			return fmt.Errorf("no identity for the agent: %s", plan.Why)
		case UseCredentials:
			k.use(&pki.KeyPair{Cert: st.creds.Cert, Key: st.creds.Key}, st.creds.CA, time.Time{})
			if plan.DeleteBootstrap {
				k.deleteBootstrap(ctx, st.creds.BootstrapVersion)
			}
			return nil
		case Resume:
			err = k.await(ctx, st.creds.Key, st.creds.CA, st.creds.Request, st.creds.BootstrapVersion)
		case Register:
			var reuse *ecdsa.PrivateKey
			if plan.ReuseKey {
				reuse = st.creds.Key
			}
			err = k.register(ctx, st.boot, reuse)
		}
		if errors.Is(err, errRequestGone) {
			// Decide again: without the request, the bootstrap Secret (if
			// any) registers anew.
			continue
		}
		return err
	}
}

// secrets is what read found.
type secrets struct {
	creds    *Credentials
	credsErr error
	boot     *Bootstrap
	bootErr  error
}

// read reads both Secrets; err is set only when the apiserver could not
// answer.
func (k *Keeper) read(ctx context.Context) (secrets, error) {
	var st secrets
	cs, err := k.getSecret(ctx, k.cfg.CredentialsSecret)
	if err != nil {
		return st, err
	}
	if cs != nil {
		st.creds, st.credsErr = ReadCredentials(cs)
	}
	bs, err := k.getSecret(ctx, k.cfg.BootstrapSecret)
	if err != nil {
		return st, err
	}
	if bs != nil {
		st.boot, st.bootErr = ReadBootstrap(bs)
	}
	return st, nil
}

// Load reads both Secrets with reader and decides (Decide) at now; empty
// names mean flotilla-agent-credentials and flotilla-agent-bootstrap. err
// is set when the apiserver could not answer or Decide fails.
func Load(ctx context.Context, reader kclient.Reader, namespace, credentialsSecret, bootstrapSecret string, now time.Time) (Plan, error) {
	if credentialsSecret == "" {
		credentialsSecret = flotillav1.AgentCredentialsSecretName
	}
	if bootstrapSecret == "" {
		bootstrapSecret = flotillav1.AgentBootstrapSecretName
	}
	k := &Keeper{cfg: Config{Reader: reader, Namespace: namespace, CredentialsSecret: credentialsSecret, BootstrapSecret: bootstrapSecret}}
	st, err := k.read(ctx)
	if err != nil {
		return Plan{}, err
	}
	return Decide(st.creds, st.credsErr, st.boot, st.bootErr, now)
}

func (k *Keeper) getSecret(ctx context.Context, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	err := k.cfg.Reader.Get(ctx, kclient.Key{Namespace: k.cfg.Namespace, Name: name}, s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", k.cfg.Namespace, name, err)
	}
	return s, nil
}

// use puts kp into the Source.
func (k *Keeper) use(kp *pki.KeyPair, ca *x509.Certificate, received time.Time) {
	k.cfg.Source.Set(kp, ca)
	k.received = received
	expiry.Set(float64(kp.Cert.NotAfter.Unix()))
	k.log.Info("using the agent certificate", "serial", kp.Cert.SerialNumber.Text(16), "notAfter", kp.Cert.NotAfter.UTC().Format(time.RFC3339),
		"renewAt", RenewAt(kp.Cert.NotBefore, kp.Cert.NotAfter, received).UTC().Format(time.RFC3339))
}

// register joins with boot's token: it stores the key (reuse, or a new
// one) before sending anything, registers, stores the request and the
// pinned CA, and waits for the certificate.
func (k *Keeper) register(ctx context.Context, boot *Bootstrap, reuse *ecdsa.PrivateKey) error {
	key := reuse
	if key == nil {
		var err error
		if key, err = newKey(); err != nil {
			return err
		}
		keyPEM, err := (&pki.KeyPair{Key: key}).KeyPEM()
		if err != nil {
			return err
		}
		// A new join replaces whatever the Secret held: the old
		// certificate belongs to the old key.
		if err := k.writeCredentials(ctx, func(data map[string][]byte) {
			clear(data)
			data[KeyPrivateKey] = keyPEM
			data[KeyHubAddress] = []byte(boot.HubAddress)
			data[KeyClusterName] = []byte(boot.ClusterName)
			data[KeyBootstrapVersion] = []byte(boot.Version)
		}); err != nil {
			return err
		}
	}
	csr, err := NewCSR(key, boot.ClusterName)
	if err != nil {
		return err
	}
	req := &syncv1.RegisterRequest{
		Token: boot.Token.String(), ClusterName: boot.ClusterName, Csr: csr,
		Labels: boot.Labels, Region: boot.Region, Zone: boot.Zone, Provider: boot.Provider,
	}
	var resp *syncv1.RegisterResponse
	var ca *x509.Certificate
	for attempt := 0; ; attempt++ {
		resp, ca, err = k.callRegister(ctx, boot.CAHash, req)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var pinErr *pinError
		if errors.As(err, &pinErr) || !retryable(err) {
			err = fmt.Errorf("joining hub %s as cluster %q: %w", boot.HubAddress, boot.ClusterName, err)
			k.event(ctx, corev1.EventTypeWarning, ReasonJoinRefused, err.Error())
			return err
		}
		delay := backoffDelay(attempt, k.cfg.RetryInitial, k.cfg.RetryMax)
		k.log.Info("registering with the hub failed; retrying", "hub", boot.HubAddress, "error", err.Error(), "retryIn", delay)
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
	}
	k.log.Info("registered with the hub; waiting for the certificate", "request", resp.GetRequest(), "accepted", resp.GetAccepted())
	if err := k.writeRetrying(ctx, func(data map[string][]byte) {
		data[KeyRequest] = []byte(resp.GetRequest())
		data[KeyCA] = certPEM(ca)
	}); err != nil {
		return err
	}
	return k.await(ctx, key, ca, resp.GetRequest(), boot.Version)
}

// pinError is a hub whose chain does not hold the pinned CA: the token
// was not sent.
type pinError struct{ err error }

func (e *pinError) Error() string { return e.err.Error() }
func (e *pinError) Unwrap() error { return e.err }

// callRegister dials the hub trusting only the CA pinned by hash, and
// registers. It returns the pinned CA.
func (k *Keeper) callRegister(ctx context.Context, pin string, req *syncv1.RegisterRequest) (*syncv1.RegisterResponse, *x509.Certificate, error) {
	var pinned atomic.Pointer[x509.Certificate]
	var refused atomic.Pointer[error]
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: k.cfg.ServerName,
		// Not insecure: VerifyConnection fails every handshake whose
		// chain does not verify against the pinned CA, before a byte of
		// the request (and so the token) is sent.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection.
		VerifyConnection: func(cs tls.ConnectionState) error {
			raw := make([][]byte, len(cs.PeerCertificates))
			for i, c := range cs.PeerCertificates {
				raw[i] = c.Raw
			}
			ca, err := bootstrap.VerifyPinned(raw, pin, k.cfg.ServerName)
			if err != nil {
				refused.Store(&err)
				return err
			}
			pinned.Store(ca)
			return nil
		},
	}
	conn, err := grpc.NewClient(k.cfg.Target, grpc.WithTransportCredentials(grpccreds.NewTLS(cfg)))
	if err != nil {
		return nil, nil, fmt.Errorf("dialling the hub: %w", err)
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
	defer cancel()
	resp, err := syncv1.NewBootstrapClient(conn).Register(cctx, req)
	if p := refused.Load(); p != nil {
		return nil, nil, &pinError{err: *p}
	}
	if err != nil {
		return nil, nil, err
	}
	ca := pinned.Load()
	if ca == nil {
		return nil, nil, errors.New("the hub answered without a verified handshake")
	}
	if resp.GetRequest() == "" {
		return nil, nil, status.Error(codes.Internal, "the hub answered Register without a request name")
	}
	return resp, ca, nil
}

// errRequestGone: the hub no longer knows the stored request.
var errRequestGone = errors.New("the hub no longer knows the certificate request")

// deniedError is a request the hub denied.
type deniedError struct{ request, message string }

func (e *deniedError) Error() string {
	return fmt.Sprintf("the hub denied certificate request %s: %s", e.request, e.message)
}

// await polls a join's request until the certificate is issued, and
// stores it; the hub is verified against ca (pinned at register).
func (k *Keeper) await(ctx context.Context, key *ecdsa.PrivateKey, ca *x509.Certificate, request, bootVersion string) error {
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	cfg := pki.DynamicClientTLSConfig(func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tls.Certificate{}, nil },
		func() *x509.CertPool { return roots }, k.cfg.ServerName)
	resp, err := k.poll(ctx, cfg, request)
	var denied *deniedError
	switch {
	case errors.As(err, &denied):
		// Forget the request: a restart registers again, which works if
		// the member is accepted by then and the token still allows it.
		_ = k.writeCredentials(ctx, func(data map[string][]byte) { delete(data, KeyRequest) })
		err = fmt.Errorf("cluster %q cannot join: %w (accept the MemberCluster on the hub, or join again with a new token)", k.cfg.Cluster, err)
		k.event(ctx, corev1.EventTypeWarning, ReasonCertificateDenied, err.Error())
		return err
	case errors.Is(err, errRequestGone):
		k.log.Info("the hub no longer knows the pending request; forgetting it", "request", request)
		if werr := k.writeCredentials(ctx, func(data map[string][]byte) { delete(data, KeyRequest) }); werr != nil {
			return werr
		}
		return errRequestGone
	case err != nil:
		return err
	}
	cert, err := checkIssued(resp.GetCertificate(), key, k.cfg.Cluster, k.now())
	if err != nil {
		err = fmt.Errorf("request %s: %w", request, err)
		k.event(ctx, corev1.EventTypeWarning, ReasonCertificateDenied, err.Error())
		return err
	}
	kp := &pki.KeyPair{Cert: cert, Key: key}
	if err := k.writeRetrying(ctx, func(data map[string][]byte) {
		data[KeyCertificate] = kp.CertPEM()
		data[KeyCA] = certPEM(ca)
		delete(data, KeyRequest)
	}); err != nil {
		return err
	}
	k.use(kp, ca, k.now())
	k.event(ctx, corev1.EventTypeNormal, ReasonJoined, fmt.Sprintf("cluster %q joined the hub: certificate %s valid until %s", k.cfg.Cluster, cert.SerialNumber.Text(16), cert.NotAfter.UTC().Format(time.RFC3339)))
	k.deleteBootstrap(ctx, bootVersion)
	return nil
}

// poll asks for request until it is ISSUED (the response), DENIED
// (*deniedError), unknown (errRequestGone), or a call fails for a reason
// retrying will not fix. Unreachable hubs and PENDING are retried, the
// wait doubling from PollInitial to PollMax.
func (k *Keeper) poll(ctx context.Context, tlsCfg *tls.Config, request string) (*syncv1.CertificateResponse, error) {
	conn, err := grpc.NewClient(k.cfg.Target, grpc.WithTransportCredentials(grpccreds.NewTLS(tlsCfg)))
	if err != nil {
		return nil, fmt.Errorf("dialling the hub: %w", err)
	}
	defer conn.Close()
	c := syncv1.NewBootstrapClient(conn)
	pendingSaid := false
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, rpcTimeout)
		resp, err := c.Certificate(cctx, &syncv1.CertificateRequest{Request: request})
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case status.Code(err) == codes.NotFound:
			return nil, fmt.Errorf("%w %s: %v", errRequestGone, request, err)
		case err != nil && !retryable(err):
			return nil, fmt.Errorf("asking for certificate request %s: %w", request, err)
		case err != nil:
			k.log.Info("asking for the certificate failed; retrying", "request", request, "error", err.Error())
		case resp.GetState() == syncv1.CertificateResponse_ISSUED:
			return resp, nil
		case resp.GetState() == syncv1.CertificateResponse_DENIED:
			return nil, &deniedError{request: request, message: resp.GetMessage()}
		case !pendingSaid:
			// Once at Info: a join may wait long for `kubectl flotilla accept`.
			pendingSaid = true
			k.log.Info("waiting for the hub to issue the certificate", "request", request, "message", resp.GetMessage())
		default:
			k.log.V(1).Info("the certificate is not issued yet", "request", request, "message", resp.GetMessage())
		}
		if !sleep(ctx, backoffDelay(attempt, k.cfg.PollInitial, k.cfg.PollMax)) {
			return nil, ctx.Err()
		}
	}
}

// rotate renews the certificate at RenewAt until ctx ends. A failed
// renewal keeps the current certificate and is retried with backoff.
func (k *Keeper) rotate(ctx context.Context) {
	failures := 0
	for {
		kp, _ := k.cfg.Source.Current()
		wait := time.Until(RenewAt(kp.Cert.NotBefore, kp.Cert.NotAfter, k.received))
		if failures > 0 || k.unsaved != nil {
			wait = backoffDelay(failures-1, k.cfg.RetryInitial, k.cfg.RetryMax)
		}
		if !sleep(ctx, wait) {
			return
		}
		if k.unsaved != nil {
			if err := k.saveRenewed(ctx, k.unsaved); err != nil {
				failures++
				k.log.Error(err, "storing the renewed certificate in the credentials Secret failed; it is in use, and storing is retried")
				continue
			}
			k.unsaved, failures = nil, 0
			continue
		}
		err := k.renew(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			renewals.WithLabelValues(resultIssued).Inc()
			failures = 0
			continue
		}
		failures++
		var denied *deniedError
		result := resultError
		if errors.As(err, &denied) || status.Code(err) == codes.PermissionDenied {
			result = resultDenied
		}
		renewals.WithLabelValues(result).Inc()
		if now := k.now(); !now.Before(kp.Cert.NotAfter) {
			k.log.Error(err, "renewing the agent certificate failed, and it expired: the hub refuses this agent until it joins again (kubectl flotilla join)", "expired", kp.Cert.NotAfter.UTC().Format(time.RFC3339))
		} else {
			k.log.Error(err, "renewing the agent certificate failed; keeping the current one and retrying", "expires", kp.Cert.NotAfter.UTC().Format(time.RFC3339))
		}
		if failures == 1 {
			k.event(ctx, corev1.EventTypeWarning, ReasonRenewFailed, err.Error())
		}
	}
}

// renew makes a new key, asks the hub for its certificate over mTLS with
// the current one, and swaps the pair in.
func (k *Keeper) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, k.cfg.RenewTimeout)
	defer cancel()
	_, ca := k.cfg.Source.Current()
	key, err := newKey()
	if err != nil {
		return err
	}
	csr, err := NewCSR(key, k.cfg.Cluster)
	if err != nil {
		return err
	}
	tlsCfg := k.cfg.Source.TLSConfig(k.cfg.ServerName)
	conn, err := grpc.NewClient(k.cfg.Target, grpc.WithTransportCredentials(grpccreds.NewTLS(tlsCfg)))
	if err != nil {
		return fmt.Errorf("dialling the hub: %w", err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(ctx, rpcTimeout)
	resp, err := syncv1.NewBootstrapClient(conn).Renew(cctx, &syncv1.RenewRequest{Csr: csr})
	ccancel()
	if err != nil {
		return fmt.Errorf("asking the hub to renew: %w", err)
	}
	cresp, err := k.poll(ctx, tlsCfg, resp.GetRequest())
	if err != nil {
		return err
	}
	cert, err := checkIssued(cresp.GetCertificate(), key, k.cfg.Cluster, k.now())
	if err != nil {
		return fmt.Errorf("request %s: %w", resp.GetRequest(), err)
	}
	kp := &pki.KeyPair{Cert: cert, Key: key}
	// Stored first, so a restart finds the newest pair; swapped in
	// either way, since the new certificate is good and the old one
	// stays valid in the Secret until its end.
	if err := k.saveRenewed(ctx, kp); err != nil {
		k.log.Error(err, "storing the renewed certificate in the credentials Secret failed; using it and retrying the write")
		k.unsaved = kp
	}
	k.use(kp, ca, k.now())
	k.event(ctx, corev1.EventTypeNormal, ReasonRenewed, fmt.Sprintf("renewed the agent certificate: %s valid until %s", cert.SerialNumber.Text(16), cert.NotAfter.UTC().Format(time.RFC3339)))
	return nil
}

func (k *Keeper) saveRenewed(ctx context.Context, kp *pki.KeyPair) error {
	keyPEM, err := kp.KeyPEM()
	if err != nil {
		return err
	}
	return k.writeCredentials(ctx, func(data map[string][]byte) {
		data[KeyPrivateKey] = keyPEM
		data[KeyCertificate] = kp.CertPEM()
	})
}

// writeCredentials changes the credentials Secret's data with mutate,
// creating the Secret when it is missing, and retrying on conflicts.
func (k *Keeper) writeCredentials(ctx context.Context, mutate func(map[string][]byte)) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := k.getSecret(ctx, k.cfg.CredentialsSecret)
		if err != nil {
			return err
		}
		if s == nil {
			s = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: k.cfg.Namespace, Name: k.cfg.CredentialsSecret,
					Labels: map[string]string{"app.kubernetes.io/part-of": "flotilla", "app.kubernetes.io/component": "agent"}},
				Type: corev1.SecretTypeOpaque,
				Data: map[string][]byte{},
			}
			mutate(s.Data)
			return k.cfg.Writer.Create(ctx, s, "")
		}
		if s.Data == nil {
			s.Data = map[string][]byte{}
		}
		mutate(s.Data)
		return k.cfg.Writer.Update(ctx, s, "")
	})
	if err != nil {
		return fmt.Errorf("writing the credentials Secret %s/%s: %w", k.cfg.Namespace, k.cfg.CredentialsSecret, err)
	}
	return nil
}

// writeRetrying is writeCredentials retried with backoff until it
// succeeds or ctx ends. It stores what the hub answered: a request that
// is lost would make a restart register again, which a single-use token
// refuses.
func (k *Keeper) writeRetrying(ctx context.Context, mutate func(map[string][]byte)) error {
	for attempt := 0; ; attempt++ {
		err := k.writeCredentials(ctx, mutate)
		if err == nil {
			return nil
		}
		delay := backoffDelay(attempt, k.cfg.RetryInitial, k.cfg.RetryMax)
		k.log.Error(err, "storing the hub's answer failed; retrying", "retryIn", delay)
		if !sleep(ctx, delay) {
			return ctx.Err()
		}
	}
}

// deleteBootstrap deletes the bootstrap Secret the credentials came from
// (version "<uid>/<resourceVersion>"), and only that one: a bootstrap
// Secret written since is a new join, which the next start acts on.
func (k *Keeper) deleteBootstrap(ctx context.Context, version string) {
	uid, rv, ok := strings.Cut(version, "/")
	if !ok || uid == "" || rv == "" {
		return
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: k.cfg.Namespace, Name: k.cfg.BootstrapSecret}}
	u := types.UID(uid)
	err := k.cfg.Writer.Delete(ctx, s, kclient.DeleteOptions{Preconditions: metav1.Preconditions{UID: &u, ResourceVersion: &rv}})
	switch {
	case err == nil:
		k.log.Info("deleted the bootstrap Secret: the agent holds a certificate", "secret", k.cfg.BootstrapSecret)
	case apierrors.IsNotFound(err):
	case apierrors.IsConflict(err):
		k.log.Info("the bootstrap Secret changed since the agent joined with it; keeping it (the next start joins with it)", "secret", k.cfg.BootstrapSecret)
	default:
		k.log.Error(err, "deleting the bootstrap Secret failed; the next start deletes it", "secret", k.cfg.BootstrapSecret)
	}
}

// event records an Event on the credentials Secret. It is written at
// once, not through a broadcaster, so an agent that exits right after
// (a denied join) leaves it behind. Failures are logged only.
func (k *Keeper) event(ctx context.Context, typ, reason, message string) {
	ref := corev1.ObjectReference{Kind: "Secret", APIVersion: "v1", Namespace: k.cfg.Namespace, Name: k.cfg.CredentialsSecret}
	if s, err := k.getSecret(ctx, k.cfg.CredentialsSecret); err == nil && s != nil {
		ref.UID, ref.ResourceVersion = s.UID, s.ResourceVersion
	}
	now := metav1.NewTime(k.now())
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: k.cfg.Namespace, Name: fmt.Sprintf("%s.%s", k.cfg.CredentialsSecret, rand.String(10))},
		InvolvedObject:      ref,
		Reason:              reason,
		Message:             message,
		Type:                typ,
		Source:              corev1.EventSource{Component: "flotilla-agent"},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "flotilla.dev/agent",
		ReportingInstance:   k.cfg.Instance,
	}
	if err := k.cfg.Writer.Create(ctx, ev, ""); err != nil {
		k.log.Error(err, "recording an Event failed", "reason", reason, "message", message)
	}
}

// retryable says whether a failed call to the hub may succeed later
// without anyone changing anything: the hub was unreachable, busy or
// failed inside. Refusals (a bad token, a denied member, a malformed
// request) are not.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted, codes.Internal, codes.Unknown, codes.Canceled:
		return true
	}
	return false
}

// backoffDelay is the wait before retry attempt+1: initial doubled
// attempt times, capped at maxDelay.
func backoffDelay(attempt int, initial, maxDelay time.Duration) time.Duration {
	d := initial
	for i := 0; i < attempt && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func certPEM(c *x509.Certificate) []byte { return (&pki.KeyPair{Cert: c}).CertPEM() }
