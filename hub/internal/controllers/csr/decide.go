package csr

import (
	"fmt"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// action is what the controller does with one request.
type action int

const (
	// actWait: nothing now (Pending member, someone else's request, or a
	// decided request not old enough to delete; after says when to look
	// again, 0 for never on time alone).
	actWait action = iota
	actApprove
	actDeny
	actSign
	actFail
	actDelete
)

func (a action) String() string {
	return [...]string{"wait", "approve", "deny", "sign", "fail", "delete"}[a]
}

// decision is decide's answer: an action, with the reason and message of
// the condition it sets (approve, deny, fail) or why it waits or deletes.
type decision struct {
	act     action
	reason  string
	message string
	after   time.Duration
}

// Reasons of the conditions the controller sets.
const (
	ReasonMemberAccepted = "FlotillaMemberAccepted"
	ReasonMemberDenied   = "FlotillaMemberDenied"
	ReasonNotAccepted    = "FlotillaMemberNotAccepted"
	ReasonSigningFailed  = "FlotillaSigningFailed"
	ReasonNotHubRequest  = "FlotillaNotHubRequest"
)

// decide says what to do with csr, a request of this signer, given the
// MemberCluster its label names (nil: it does not exist), the hub's own
// username, now and how long decided requests are kept.
func decide(csr *certificatesv1.CertificateSigningRequest, mc *flotillav1.MemberCluster, hubUser string, now time.Time, retain time.Duration) decision {
	cluster := csr.Labels[flotillav1.LabelCluster]
	if cluster == "" {
		return decision{act: actWait, message: "no " + flotillav1.LabelCluster + " label: not a request the hub made; left to an admin"}
	}
	if mc == nil {
		return decision{act: actDelete, message: fmt.Sprintf("MemberCluster %s is gone", cluster)}
	}
	approved, denied, failed := conditions(csr)
	if denied || failed || len(csr.Status.Certificate) > 0 {
		age := now.Sub(csr.CreationTimestamp.Time)
		if age >= retain {
			return decision{act: actDelete, message: fmt.Sprintf("decided %s ago", age.Round(time.Second))}
		}
		return decision{act: actWait, message: "decided", after: retain - age}
	}
	if approved {
		if csr.Spec.Username != hubUser {
			// Only a request the hub made, for a Register or Renew it
			// authenticated, carries an agent's proof; one anybody else
			// created is never signed, even when an admin approved it.
			return decision{act: actFail, reason: ReasonNotHubRequest,
				message: fmt.Sprintf("created by %q, not by the hub (%q): the hub signs only the requests it made for a token or certificate it checked", csr.Spec.Username, hubUser)}
		}
		if !mc.IsAccepted() {
			return decision{act: actFail, reason: ReasonNotAccepted,
				message: fmt.Sprintf("MemberCluster %s is %s, no longer Accepted: not signed", cluster, mc.Spec.Acceptance)}
		}
		return decision{act: actSign}
	}
	if csr.Spec.Username != hubUser {
		return decision{act: actWait, message: fmt.Sprintf("created by %q, not by the hub (%q): left to an admin", csr.Spec.Username, hubUser)}
	}
	switch {
	case mc.IsAccepted():
		return decision{act: actApprove, reason: ReasonMemberAccepted,
			message: fmt.Sprintf("MemberCluster %s is Accepted", cluster)}
	case mc.Spec.Acceptance == flotillav1.AcceptanceDenied:
		return decision{act: actDeny, reason: ReasonMemberDenied,
			message: fmt.Sprintf("MemberCluster %s is Denied on this hub", cluster)}
	default:
		return decision{act: actWait, message: fmt.Sprintf("MemberCluster %s is %s: waiting for kubectl flotilla accept %s", cluster, mc.Spec.Acceptance, cluster)}
	}
}

// conditions reads a request's Approved, Denied and Failed conditions.
func conditions(csr *certificatesv1.CertificateSigningRequest) (approved, denied, failed bool) {
	for _, c := range csr.Status.Conditions {
		if c.Status == corev1.ConditionFalse {
			continue
		}
		switch c.Type {
		case certificatesv1.CertificateApproved:
			approved = true
		case certificatesv1.CertificateDenied:
			denied = true
		case certificatesv1.CertificateFailed:
			failed = true
		}
	}
	return approved, denied, failed
}

// validity is how long the certificate signed for csr lasts: what it asks
// for (expirationSeconds), at most the hub's lifetime. The CA's own
// NotAfter caps it further (pki.SignAgentCSR).
func validity(csr *certificatesv1.CertificateSigningRequest, lifetime time.Duration) time.Duration {
	if s := csr.Spec.ExpirationSeconds; s != nil && *s > 0 {
		if d := time.Duration(*s) * time.Second; d < lifetime {
			return d
		}
	}
	return lifetime
}
