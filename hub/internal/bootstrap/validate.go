package bootstrap

import (
	"crypto/x509"
	"fmt"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// maxRequestLabels bounds the labels a joining agent may ask for.
const maxRequestLabels = 32

// register is a RegisterRequest that passed validateRegister.
type register struct {
	token   bootstrap.Token
	cluster string
	csr     *x509.CertificateRequest // nil only for a dry run without one
	csrPEM  []byte
	labels  map[string]string
}

// fieldError is a refusal of one field of a request: its code is the
// gRPC code the proto promises for it.
type fieldError struct {
	unauthenticated bool // the token: UNAUTHENTICATED; the rest: INVALID_ARGUMENT
	msg             string
}

func (e *fieldError) Error() string { return e.msg }

func invalid(format string, args ...any) *fieldError {
	return &fieldError{msg: fmt.Sprintf(format, args...)}
}

// validateRegister checks everything in req that needs no apiserver: the
// token's form, the cluster name, the labels, region, zone and provider,
// and the certificate request (see pki.ParseAgentCSR). A dry run may come
// without a request; one it brings is checked.
func validateRegister(req *syncv1.RegisterRequest) (*register, *fieldError) {
	tok, err := bootstrap.ParseToken(req.GetToken())
	if err != nil {
		return nil, &fieldError{unauthenticated: true, msg: "token: " + err.Error()}
	}
	if err := pki.ValidateClusterName(req.GetClusterName()); err != nil {
		return nil, invalid("cluster_name: %v", err)
	}
	if len(req.GetLabels()) > maxRequestLabels {
		return nil, invalid("labels: %d labels, more than the %d a join may ask for", len(req.GetLabels()), maxRequestLabels)
	}
	for k, v := range req.GetLabels() {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, invalid("labels: key %q: %s", k, strings.Join(errs, "; "))
		}
		if reservedLabel(k) {
			return nil, invalid("labels: key %q is in the flotilla.dev/ domain, which the hub manages", k)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, invalid("labels: value of %q: %s", k, strings.Join(errs, "; "))
		}
	}
	for _, f := range []struct{ name, v string }{{"region", req.GetRegion()}, {"zone", req.GetZone()}, {"provider", req.GetProvider()}} {
		if len(f.v) > 63 {
			return nil, invalid("%s: %d characters, more than 63", f.name, len(f.v))
		}
	}
	out := &register{token: tok, cluster: req.GetClusterName(), labels: req.GetLabels()}
	if req.GetDryRun() && len(req.GetCsr()) == 0 {
		return out, nil
	}
	csr, err := pki.ParseAgentCSR(req.GetCsr(), out.cluster)
	if err != nil {
		return nil, invalid("csr: %v", err)
	}
	out.csr, out.csrPEM = csr, req.GetCsr()
	return out, nil
}

// reservedLabel says whether k is a label the hub sets itself: anything
// in the flotilla.dev domain (the join token, cluster, fleet labels).
func reservedLabel(k string) bool {
	prefix, _, found := strings.Cut(k, "/")
	return found && (prefix == "flotilla.dev" || strings.HasSuffix(prefix, ".flotilla.dev"))
}

// memberLabels are the labels of a MemberCluster joined with token id:
// what the agent asked for, then the token's (an admin's choice wins over
// the joining cluster's), then the join-token label.
func memberLabels(requested, fromToken map[string]string, tokenID string) map[string]string {
	out := make(map[string]string, len(requested)+len(fromToken)+1)
	for k, v := range requested {
		out[k] = v
	}
	for k, v := range fromToken {
		out[k] = v
	}
	out[flotillav1.LabelJoinToken] = tokenID
	return out
}

// reuse decides whether Register may use the MemberCluster mc that exists
// already under the requested name: only one this token created (its
// join-token label), that never got a certificate and never connected.
// That is an agent retrying a Register whose answer it lost; anything
// else is someone else's name. csrs are the flotilla.dev/agent requests
// labelled with the cluster.
func reuse(mc *flotillav1.MemberCluster, tokenID string, csrs []certificatesv1.CertificateSigningRequest) (bool, string) {
	if mc.Labels[flotillav1.LabelJoinToken] != tokenID {
		return false, fmt.Sprintf("MemberCluster %s exists and was not created by a join with token %s: choose another cluster name, or delete it first", mc.Name, tokenID)
	}
	if !mc.DeletionTimestamp.IsZero() {
		return false, fmt.Sprintf("MemberCluster %s is being deleted: wait for it to go, then join again", mc.Name)
	}
	if mc.Status.LastHeartbeatTime != nil {
		return false, fmt.Sprintf("MemberCluster %s has an agent that connected already: choose another cluster name, or unjoin it first", mc.Name)
	}
	for i := range csrs {
		if len(csrs[i].Status.Certificate) > 0 {
			return false, fmt.Sprintf("MemberCluster %s got its certificate already (request %s): choose another cluster name, or unjoin it first", mc.Name, csrs[i].Name)
		}
	}
	return true, ""
}

// requestState is what Certificate answers for a CSR: DENIED with the
// Denied or Failed condition's message, ISSUED with the certificate, or
// PENDING with why.
func requestState(csr *certificatesv1.CertificateSigningRequest, mc *flotillav1.MemberCluster) (syncv1.CertificateResponse_State, string) {
	for _, c := range csr.Status.Conditions {
		if (c.Type == certificatesv1.CertificateDenied || c.Type == certificatesv1.CertificateFailed) && c.Status != "False" {
			msg := c.Message
			if msg == "" {
				msg = c.Reason
			}
			return syncv1.CertificateResponse_DENIED, fmt.Sprintf("request %s %s: %s", csr.Name, strings.ToLower(string(c.Type)), msg)
		}
	}
	if len(csr.Status.Certificate) > 0 {
		return syncv1.CertificateResponse_ISSUED, ""
	}
	cluster := csr.Labels[flotillav1.LabelCluster]
	switch {
	case mc == nil:
		return syncv1.CertificateResponse_PENDING, fmt.Sprintf("MemberCluster %s is not there (yet)", cluster)
	case !mc.IsAccepted():
		return syncv1.CertificateResponse_PENDING, fmt.Sprintf("MemberCluster %s is %s: waiting for an admin (kubectl flotilla accept %s)", cluster, mc.Spec.Acceptance, cluster)
	}
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved {
			return syncv1.CertificateResponse_PENDING, "approved; the hub is signing it"
		}
	}
	return syncv1.CertificateResponse_PENDING, "waiting for the hub to approve it"
}
