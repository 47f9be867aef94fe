package csr

import (
	"context"
	"errors"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// DefaultRetain is how long a decided request stays before the
// controller deletes it: long enough for an agent to fetch its
// certificate and for an admin to look, short enough to keep the hub
// tidy (kube-controller-manager's own garbage collection waits longer).
const DefaultRetain = time.Hour

// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests/approval,verbs=update
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests/status,verbs=update
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=signers,resourceNames=flotilla.dev/agent,verbs=approve;sign
// +kubebuilder:rbac:groups=flotilla.dev,resources=memberclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=selfsubjectreviews,verbs=create

// Reconciler approves, signs and tidies the flotilla.dev/agent
// CertificateSigningRequests.
type Reconciler struct {
	Client client.Client
	// APIReader confirms a MemberCluster the cache does not have: a
	// request Register just created may arrive before its member does.
	APIReader client.Reader
	// CA signs the certificates.
	CA *pki.KeyPair
	// Lifetime is the longest an agent certificate lasts
	// (--agent-certificate-lifetime).
	Lifetime time.Duration
	// HubUsername is the hub's own user name (HubUsername); only requests
	// it created are approved.
	HubUsername string
	// Retain is how long decided requests stay; 0 means DefaultRetain.
	Retain time.Duration
	// Clock is the clock; nil means the real one.
	Clock clock.PassiveClock
}

var _ reconcile.Reconciler = &Reconciler{}

// HubUsername asks the apiserver who the hub is (a SelfSubjectReview,
// which every authenticated user may make).
func HubUsername(ctx context.Context, c client.Client) (string, error) {
	ssr := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, ssr); err != nil {
		return "", fmt.Errorf("asking the apiserver for the hub's own user name (SelfSubjectReview): %w", err)
	}
	if ssr.Status.UserInfo.Username == "" {
		return "", errors.New("the apiserver gave the hub an empty user name (SelfSubjectReview)")
	}
	return ssr.Status.UserInfo.Username, nil
}

// ours selects this signer's requests.
func ours(obj client.Object) bool {
	csr, ok := obj.(*certificatesv1.CertificateSigningRequest)
	return ok && csr.Spec.SignerName == flotillav1.AgentSignerName
}

// SetupWithManager registers the controller: requests of this signer,
// and every request of a MemberCluster that changes or goes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.CA == nil || r.Lifetime <= 0 || r.HubUsername == "" {
		return errors.New("csr controller: CA, Lifetime and HubUsername are required")
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Retain == 0 {
		r.Retain = DefaultRetain
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&certificatesv1.CertificateSigningRequest{}, builder.WithPredicates(predicate.NewPredicateFuncs(ours))).
		Watches(&flotillav1.MemberCluster{}, handler.EnqueueRequestsFromMapFunc(r.memberRequests)).
		Named("agent-csr").
		Complete(r)
}

// memberRequests maps a MemberCluster to its requests.
func (r *Reconciler) memberRequests(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &certificatesv1.CertificateSigningRequestList{}
	if err := r.Client.List(ctx, list, client.MatchingLabels{flotillav1.LabelCluster: obj.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing a MemberCluster's certificate requests", "cluster", obj.GetName())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if ours(&list.Items[i]) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: list.Items[i].Name}})
		}
	}
	return out
}

// Reconcile carries out decide's decision for one request.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	csr := &certificatesv1.CertificateSigningRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, csr); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !ours(csr) {
		return reconcile.Result{}, nil
	}
	mc, err := r.member(ctx, csr.Labels[flotillav1.LabelCluster])
	if err != nil {
		return reconcile.Result{}, err
	}
	now := r.Clock.Now()
	d := decide(csr, mc, r.HubUsername, now, r.Retain)
	logger := log.FromContext(ctx).WithValues("cluster", csr.Labels[flotillav1.LabelCluster], "action", d.act.String())
	switch d.act {
	case actWait:
		logger.V(1).Info("certificate request waits", "why", d.message)
		return reconcile.Result{RequeueAfter: d.after}, nil
	case actDelete:
		logger.Info("deleting certificate request", "why", d.message)
		if err := r.Client.Delete(ctx, csr, client.Preconditions{UID: &csr.UID}); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("deleting certificate request %s: %w", csr.Name, err)
		}
		return reconcile.Result{}, nil
	case actApprove, actDeny:
		typ := certificatesv1.CertificateApproved
		if d.act == actDeny {
			typ = certificatesv1.CertificateDenied
		}
		addCondition(csr, typ, d.reason, d.message, now)
		if err := r.Client.SubResource("approval").Update(ctx, csr); err != nil {
			return reconcile.Result{}, fmt.Errorf("%s certificate request %s: %w", d.act, csr.Name, err)
		}
		logger.Info("certificate request decided", "why", d.message)
		return reconcile.Result{}, nil
	case actFail:
		return reconcile.Result{}, r.fail(ctx, csr, d.reason, d.message, now)
	case actSign:
		return reconcile.Result{}, r.sign(ctx, csr, mc, now)
	}
	return reconcile.Result{}, nil
}

// member reads cluster's MemberCluster from the cache, and from the
// apiserver when the cache does not have it: nil only when it is gone.
func (r *Reconciler) member(ctx context.Context, cluster string) (*flotillav1.MemberCluster, error) {
	if cluster == "" {
		return nil, nil
	}
	mc := &flotillav1.MemberCluster{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: cluster}, mc)
	if apierrors.IsNotFound(err) && r.APIReader != nil {
		err = r.APIReader.Get(ctx, client.ObjectKey{Name: cluster}, mc)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading MemberCluster %s: %w", cluster, err)
	}
	return mc, nil
}

// sign issues the certificate of an approved request, or sets Failed
// when the request cannot be signed (retrying would not help).
func (r *Reconciler) sign(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, mc *flotillav1.MemberCluster, now time.Time) error {
	cluster := csr.Labels[flotillav1.LabelCluster]
	req, err := pki.ParseAgentCSR(csr.Spec.Request, cluster)
	if err != nil {
		return r.fail(ctx, csr, ReasonSigningFailed, fmt.Sprintf("not signed: %v", err), now)
	}
	cert, err := r.CA.SignAgentCSR(req, cluster, string(mc.UID), validity(csr, r.Lifetime), now)
	if err != nil {
		return r.fail(ctx, csr, ReasonSigningFailed, fmt.Sprintf("not signed: %v", err), now)
	}
	csr.Status.Certificate = pki.CertificatePEM(cert)
	if err := r.Client.Status().Update(ctx, csr); err != nil {
		return fmt.Errorf("writing the certificate of request %s: %w", csr.Name, err)
	}
	log.FromContext(ctx).Info("signed agent certificate", "cluster", cluster, "request", csr.Name, "notAfter", cert.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// fail sets the Failed condition, which tells the agent (Certificate:
// DENIED) why.
func (r *Reconciler) fail(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, reason, msg string, now time.Time) error {
	addCondition(csr, certificatesv1.CertificateFailed, reason, msg, now)
	if err := r.Client.Status().Update(ctx, csr); err != nil {
		return fmt.Errorf("marking certificate request %s failed: %w", csr.Name, err)
	}
	log.FromContext(ctx).Info("certificate request failed", "request", csr.Name, "why", msg)
	return nil
}

func addCondition(csr *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType, reason, msg string, now time.Time) {
	t := metav1.NewTime(now)
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: msg, LastUpdateTime: t, LastTransitionTime: t,
	})
}
