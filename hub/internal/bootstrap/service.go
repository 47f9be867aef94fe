package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/hub/internal/syncbridge"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	syncserver "github.com/flotilla-dev/flotilla/pkg/sync/server"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// Values of the flotilla.dev/certificate-request label.
const (
	RequestRegister = "register"
	RequestRenew    = "renew"
)

// minExpirationSeconds is the shortest expirationSeconds the apiserver
// accepts on a CertificateSigningRequest. A shorter agent lifetime (tests
// use minutes) is asked for as this; the signer still caps the
// certificate at the hub's lifetime.
const minExpirationSeconds = 600

// maxOpenRenewals bounds the renewals of one cluster that wait at once:
// an agent renews once per lifetime, so more are a loop or an attack,
// and each would be an object in the hub's apiserver.
const maxOpenRenewals = 3

// Register creates MemberClusters (and deletes the one it created when a
// later step fails) and the CertificateSigningRequests; it reads and
// updates the token Secrets in the hub's namespace, by name and uncached,
// so the hub needs neither list nor watch on Secrets.
//
// +kubebuilder:rbac:groups=flotilla.dev,resources=memberclusters,verbs=get;create;delete
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;update,namespace=flotilla-system

// Service implements syncv1.BootstrapServer for the hub.
type Service struct {
	syncv1.UnimplementedBootstrapServer

	// Client writes MemberClusters, CertificateSigningRequests and token
	// Secrets.
	Client client.Client
	// APIReader reads token Secrets and MemberClusters uncached: a token
	// must be judged on its latest state, and its resourceVersion is what
	// makes a single-use claim safe.
	APIReader client.Reader
	// Cache reads CertificateSigningRequests (the CSR controller watches
	// them); a request not there yet is read through APIReader.
	Cache client.Reader
	// Namespace holds the token Secrets (flotilla-system).
	Namespace string
	// CA is the hub CA, whose certificate Certificate returns.
	CA *pki.KeyPair
	// Lifetime is the agent certificates' lifetime
	// (--agent-certificate-lifetime).
	Lifetime time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log logs joins and refusals.
	Log logr.Logger
}

var _ syncv1.BootstrapServer = (*Service)(nil)

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Register implements syncv1.BootstrapServer.
func (s *Service) Register(ctx context.Context, req *syncv1.RegisterRequest) (*syncv1.RegisterResponse, error) {
	r, ferr := validateRegister(req)
	if ferr != nil {
		if ferr.unauthenticated {
			return nil, status.Error(codes.Unauthenticated, ferr.msg)
		}
		return nil, status.Error(codes.InvalidArgument, ferr.msg)
	}
	log := s.Log.WithValues("cluster", r.cluster, "token", r.token.ID)

	secret, info, retry, err := s.checkToken(ctx, r)
	if err != nil {
		log.Info("refused a join", "reason", err)
		return nil, err
	}
	existing, err := s.existingMember(ctx, r)
	if err != nil {
		log.Info("refused a join", "reason", err)
		return nil, err
	}
	if retry && existing == nil {
		// The token was used by this name, whose MemberCluster is gone:
		// a single-use token does not come back with it.
		return nil, status.Errorf(codes.Unauthenticated, "%v: token %s was used by cluster %s (create a new one)", bootstrap.ErrUsed, r.token.ID, r.cluster)
	}
	if req.GetDryRun() {
		return &syncv1.RegisterResponse{Accepted: info.AutoAccept || (existing != nil && existing.IsAccepted())}, nil
	}

	// Claim the token first: of two joins racing for a single-use token,
	// the one whose update loses creates nothing. A multi-use token this
	// cluster used already (an agent retrying) needs no new claim, and a
	// failure must not take the earlier one back.
	claimed := false
	if !retry && !slices.Contains(info.UsedBy, r.cluster) {
		if err := s.claim(ctx, secret, r); err != nil {
			log.Info("refused a join", "reason", err)
			return nil, err
		}
		claimed = true
	}
	undo := func(mc *flotillav1.MemberCluster) {
		// Best effort, on a context of its own: the RPC's may be what
		// ended.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if mc != nil {
			if err := s.Client.Delete(ctx, mc, client.Preconditions{UID: &mc.UID}); err != nil && !apierrors.IsNotFound(err) {
				log.Error(err, "undoing a failed join: deleting the MemberCluster")
			}
		}
		if claimed {
			if err := s.unclaim(ctx, r); err != nil {
				log.Error(err, "undoing a failed join: releasing the token")
			}
		}
	}

	mc := existing
	var created *flotillav1.MemberCluster
	if mc == nil {
		mc = &flotillav1.MemberCluster{
			ObjectMeta: metav1.ObjectMeta{Name: r.cluster, Labels: memberLabels(r.labels, info.Labels, r.token.ID)},
			Spec: flotillav1.MemberClusterSpec{
				Region: req.GetRegion(), Zone: req.GetZone(), Provider: req.GetProvider(),
				Acceptance: flotillav1.AcceptancePending,
			},
		}
		if info.AutoAccept {
			mc.Spec.Acceptance = flotillav1.AcceptanceAccepted
		}
		if err := s.Client.Create(ctx, mc); err != nil {
			undo(nil)
			if apierrors.IsAlreadyExists(err) {
				return nil, status.Errorf(codes.AlreadyExists, "MemberCluster %s was created meanwhile by someone else: choose another cluster name", r.cluster)
			}
			return nil, status.Errorf(codes.Unavailable, "creating MemberCluster %s: %v", r.cluster, err)
		}
		created = mc
	}
	csr, err := s.createCSR(ctx, r.cluster, r.csrPEM, RequestRegister, r.token.ID)
	if err != nil {
		undo(created)
		return nil, status.Errorf(codes.Unavailable, "creating the certificate request of cluster %s: %v", r.cluster, err)
	}
	log.Info("cluster joined", "request", csr.Name, "accepted", mc.IsAccepted(), "reused", created == nil)
	return &syncv1.RegisterResponse{Request: csr.Name, Accepted: mc.IsAccepted()}, nil
}

// checkToken reads and checks r's token. retry says the token is a
// single-use one this very cluster used already: the agent retrying a
// Register whose answer it lost, which existingMember then confirms.
func (s *Service) checkToken(ctx context.Context, r *register) (*corev1.Secret, bootstrap.Info, bool, error) {
	secret := &corev1.Secret{}
	err := s.APIReader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: bootstrap.SecretName(r.token.ID)}, secret)
	if apierrors.IsNotFound(err) {
		secret = nil
	} else if err != nil {
		return nil, bootstrap.Info{}, false, status.Errorf(codes.Unavailable, "reading bootstrap token %s: %v", r.token.ID, err)
	}
	info, err := bootstrap.Check(secret, r.token, r.cluster, s.now())
	if errors.Is(err, bootstrap.ErrUsed) {
		// Check got past the secret and the expiry to say this.
		if info, rerr := bootstrap.ReadSecret(secret); rerr == nil && slices.Contains(info.UsedBy, r.cluster) {
			return secret, info, true, nil
		}
	}
	if err != nil {
		return nil, bootstrap.Info{}, false, status.Error(codes.Unauthenticated, err.Error())
	}
	return secret, info, false, nil
}

// existingMember returns the MemberCluster r may re-use, nil when there
// is none, or ALREADY_EXISTS when the name is taken (see reuse).
func (s *Service) existingMember(ctx context.Context, r *register) (*flotillav1.MemberCluster, error) {
	mc := &flotillav1.MemberCluster{}
	err := s.APIReader.Get(ctx, client.ObjectKey{Name: r.cluster}, mc)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "reading MemberCluster %s: %v", r.cluster, err)
	}
	csrs := &certificatesv1.CertificateSigningRequestList{}
	if err := s.APIReader.List(ctx, csrs, client.MatchingLabels{flotillav1.LabelCluster: r.cluster}); err != nil {
		return nil, status.Errorf(codes.Unavailable, "listing the certificate requests of cluster %s: %v", r.cluster, err)
	}
	if ok, why := reuse(mc, r.token.ID, ours(csrs.Items)); !ok {
		return nil, status.Error(codes.AlreadyExists, why)
	}
	return mc, nil
}

// ours keeps the requests of this hub's signer.
func ours(csrs []certificatesv1.CertificateSigningRequest) []certificatesv1.CertificateSigningRequest {
	return slices.DeleteFunc(csrs, func(c certificatesv1.CertificateSigningRequest) bool {
		return c.Spec.SignerName != flotillav1.AgentSignerName
	})
}

// claim records r's cluster as a user of the token, with the Secret's
// resourceVersion: when another join changed the Secret meanwhile, it
// reads it again and checks the token anew (a single-use token is then
// used up), so at most one join wins a single-use token.
func (s *Service) claim(ctx context.Context, secret *corev1.Secret, r *register) error {
	for attempt := 0; ; attempt++ {
		updated := secret.DeepCopy()
		bootstrap.MarkUsed(updated, r.cluster)
		err := s.Client.Update(ctx, updated)
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) || attempt >= 5 {
			return status.Errorf(codes.Unavailable, "recording the use of bootstrap token %s: %v", r.token.ID, err)
		}
		var retry bool
		secret, _, retry, err = s.checkToken(ctx, r)
		if err != nil {
			return err
		}
		if retry {
			// This cluster's own earlier Register won meanwhile.
			return nil
		}
	}
}

// unclaim takes r's cluster off the token's users again.
func (s *Service) unclaim(ctx context.Context, r *register) error {
	for attempt := 0; attempt < 5; attempt++ {
		secret := &corev1.Secret{}
		if err := s.APIReader.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: bootstrap.SecretName(r.token.ID)}, secret); err != nil {
			return client.IgnoreNotFound(err)
		}
		used := strings.Split(string(secret.Data[bootstrap.KeyUsedBy]), ",")
		kept := slices.DeleteFunc(slices.Clone(used), func(u string) bool { return u == r.cluster })
		if len(kept) == len(used) {
			return nil
		}
		secret.Data[bootstrap.KeyUsedBy] = []byte(strings.Join(kept, ","))
		err := s.Client.Update(ctx, secret)
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return fmt.Errorf("token %s kept changing", r.token.ID)
}

// createCSR creates the CertificateSigningRequest for cluster's agent.
func (s *Service) createCSR(ctx context.Context, cluster string, csrPEM []byte, kind, tokenID string) (*certificatesv1.CertificateSigningRequest, error) {
	labels := map[string]string{
		flotillav1.LabelCluster:            cluster,
		flotillav1.LabelCertificateRequest: kind,
	}
	if tokenID != "" {
		labels[flotillav1.LabelJoinToken] = tokenID
	}
	secs := int32(min(math.MaxInt32, max(minExpirationSeconds, int64(s.Lifetime/time.Second))))
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "flotilla-" + cluster + "-", Labels: labels},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:           csrPEM,
			SignerName:        flotillav1.AgentSignerName,
			ExpirationSeconds: &secs,
			Usages:            []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
	if err := s.Client.Create(ctx, csr); err != nil {
		return nil, err
	}
	return csr, nil
}

// Renew implements syncv1.BootstrapServer. The sync server's interceptor
// proved the caller's certificate and checked its member is admitted
// (Accepted, same UID); Renew checks again on the latest MemberCluster.
func (s *Service) Renew(ctx context.Context, req *syncv1.RenewRequest) (*syncv1.RegisterResponse, error) {
	id, ok := syncserver.IdentityFromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "Renew needs the agent's current client certificate")
	}
	mc := &flotillav1.MemberCluster{}
	if err := s.APIReader.Get(ctx, client.ObjectKey{Name: id.Cluster}, mc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, status.Errorf(codes.PermissionDenied, "MemberCluster %s does not exist on this hub: join again", id.Cluster)
		}
		return nil, status.Errorf(codes.Unavailable, "reading MemberCluster %s: %v", id.Cluster, err)
	}
	if ok, why := syncbridge.Admission(mc, id.MemberUID); !ok {
		return nil, status.Error(codes.PermissionDenied, why)
	}
	if _, err := pki.ParseAgentCSR(req.GetCsr(), id.Cluster); err != nil {
		if errors.Is(err, pki.ErrOtherCluster) {
			return nil, status.Errorf(codes.PermissionDenied, "csr: %v (this certificate is %s's)", err, id.Cluster)
		}
		return nil, status.Errorf(codes.InvalidArgument, "csr: %v", err)
	}
	open := &certificatesv1.CertificateSigningRequestList{}
	if err := s.Cache.List(ctx, open, client.MatchingLabels{flotillav1.LabelCluster: id.Cluster, flotillav1.LabelCertificateRequest: RequestRenew}); err != nil {
		return nil, status.Errorf(codes.Unavailable, "listing the certificate requests of cluster %s: %v", id.Cluster, err)
	}
	if n := openRequests(ours(open.Items)); n >= maxOpenRenewals {
		return nil, status.Errorf(codes.ResourceExhausted, "cluster %s has %d renewals waiting already; ask Certificate about one of them", id.Cluster, n)
	}
	created, err := s.createCSR(ctx, id.Cluster, req.GetCsr(), RequestRenew, "")
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "creating the certificate request of cluster %s: %v", id.Cluster, err)
	}
	s.Log.V(1).Info("agent renews its certificate", "cluster", id.Cluster, "request", created.Name)
	return &syncv1.RegisterResponse{Request: created.Name, Accepted: true}, nil
}

// openRequests counts the requests neither issued nor denied or failed.
func openRequests(csrs []certificatesv1.CertificateSigningRequest) int {
	n := 0
	for i := range csrs {
		if st, _ := requestState(&csrs[i], &flotillav1.MemberCluster{}); st == syncv1.CertificateResponse_PENDING {
			n++
		}
	}
	return n
}

// Certificate implements syncv1.BootstrapServer. Only this hub's
// signer's requests are reported; any other name is NOT_FOUND, so the
// RPC tells a stranger nothing about the hub's other requests.
func (s *Service) Certificate(ctx context.Context, req *syncv1.CertificateRequest) (*syncv1.CertificateResponse, error) {
	name := req.GetRequest()
	if name == "" || len(name) > 253 {
		return nil, status.Error(codes.InvalidArgument, "request: give the name Register or Renew returned")
	}
	csr := &certificatesv1.CertificateSigningRequest{}
	err := s.Cache.Get(ctx, client.ObjectKey{Name: name}, csr)
	if apierrors.IsNotFound(err) {
		// Register created it a moment ago and the cache has not seen it.
		err = s.APIReader.Get(ctx, client.ObjectKey{Name: name}, csr)
	}
	notFound := status.Errorf(codes.NotFound, "no certificate request %s on this hub (requests are removed an hour after they are decided): register or renew again", name)
	if apierrors.IsNotFound(err) {
		return nil, notFound
	}
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "reading certificate request %s: %v", name, err)
	}
	cluster := csr.Labels[flotillav1.LabelCluster]
	if csr.Spec.SignerName != flotillav1.AgentSignerName || cluster == "" {
		return nil, notFound
	}
	var mc *flotillav1.MemberCluster
	m := &flotillav1.MemberCluster{}
	if err := s.Cache.Get(ctx, client.ObjectKey{Name: cluster}, m); err == nil {
		mc = m
	} else if !apierrors.IsNotFound(err) {
		return nil, status.Errorf(codes.Unavailable, "reading MemberCluster %s: %v", cluster, err)
	}
	st, msg := requestState(csr, mc)
	out := &syncv1.CertificateResponse{State: st, Message: msg, Ca: s.CA.CertPEM()}
	if st == syncv1.CertificateResponse_ISSUED {
		out.Certificate = csr.Status.Certificate
	}
	return out, nil
}
