package csr

import (
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

const hub = "system:serviceaccount:flotilla-system:flotilla-hub"

type csrOpt func(*certificatesv1.CertificateSigningRequest)

func request(opts ...csrOpt) *certificatesv1.CertificateSigningRequest {
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "flotilla-east-abcde", CreationTimestamp: metav1.NewTime(t0.Add(-time.Minute)),
			Labels: map[string]string{flotillav1.LabelCluster: "east"}},
		Spec: certificatesv1.CertificateSigningRequestSpec{SignerName: flotillav1.AgentSignerName, Username: hub},
	}
	for _, o := range opts {
		o(csr)
	}
	return csr
}

func withCondition(typ certificatesv1.RequestConditionType) csrOpt {
	return func(c *certificatesv1.CertificateSigningRequest) {
		c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: typ, Status: corev1.ConditionTrue})
	}
}

func issued(c *certificatesv1.CertificateSigningRequest) { c.Status.Certificate = []byte("PEM") }

func createdAgo(d time.Duration) csrOpt {
	return func(c *certificatesv1.CertificateSigningRequest) { c.CreationTimestamp = metav1.NewTime(t0.Add(-d)) }
}

func member(a flotillav1.Acceptance) *flotillav1.MemberCluster {
	return &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "east", UID: "uid-1"}, Spec: flotillav1.MemberClusterSpec{Acceptance: a}}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name      string
		csr       *certificatesv1.CertificateSigningRequest
		mc        *flotillav1.MemberCluster
		want      action
		wantMsg   string
		wantAfter time.Duration
	}{
		{"the hub's request for an Accepted member: approve", request(), member(flotillav1.AcceptanceAccepted), actApprove, "is Accepted", 0},
		{"acceptance unset counts as Accepted", request(), member(""), actApprove, "is Accepted", 0},
		{"Pending member: wait for accept", request(), member(flotillav1.AcceptancePending), actWait, "kubectl flotilla accept east", 0},
		{"Denied member: deny", request(), member(flotillav1.AcceptanceDenied), actDeny, "is Denied", 0},
		{"member gone: delete", request(), nil, actDelete, "MemberCluster east is gone", 0},
		{"someone else's request: never approved by the hub", request(func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Username = "mallory" }), member(flotillav1.AcceptanceAccepted), actWait, `created by "mallory"`, 0},
		{"no cluster label: left alone", request(func(c *certificatesv1.CertificateSigningRequest) { c.Labels = nil }), member(flotillav1.AcceptanceAccepted), actWait, "no flotilla.dev/cluster label", 0},
		{"approved: sign", request(withCondition(certificatesv1.CertificateApproved)), member(flotillav1.AcceptanceAccepted), actSign, "", 0},
		{"created by someone else and approved by an admin: never signed", request(withCondition(certificatesv1.CertificateApproved), func(c *certificatesv1.CertificateSigningRequest) { c.Spec.Username = "admin" }), member(flotillav1.AcceptanceAccepted), actFail, "not by the hub", 0},
		{"approved, then the member was denied: fail", request(withCondition(certificatesv1.CertificateApproved)), member(flotillav1.AcceptanceDenied), actFail, "no longer Accepted", 0},
		{"issued a minute ago: keep for the rest of the hour", request(withCondition(certificatesv1.CertificateApproved), issued), member(flotillav1.AcceptanceAccepted), actWait, "decided", 59 * time.Minute},
		{"issued over an hour ago: delete", request(withCondition(certificatesv1.CertificateApproved), issued, createdAgo(61*time.Minute)), member(flotillav1.AcceptanceAccepted), actDelete, "decided 1h1m0s ago", 0},
		{"denied over an hour ago: delete", request(withCondition(certificatesv1.CertificateDenied), createdAgo(2*time.Hour)), member(flotillav1.AcceptanceDenied), actDelete, "decided", 0},
		{"failed recently: keep", request(withCondition(certificatesv1.CertificateApproved), withCondition(certificatesv1.CertificateFailed)), member(flotillav1.AcceptanceAccepted), actWait, "decided", 59 * time.Minute},
		{"an issued request of a deleted member: delete at once", request(withCondition(certificatesv1.CertificateApproved), issued), nil, actDelete, "gone", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.csr, tc.mc, hub, t0, DefaultRetain)
			if d.act != tc.want || !strings.Contains(d.message, tc.wantMsg) || d.after != tc.wantAfter {
				t.Errorf("decide = %s %q after %s; want %s with %q after %s", d.act, d.message, d.after, tc.want, tc.wantMsg, tc.wantAfter)
			}
		})
	}
}

func TestValidity(t *testing.T) {
	for _, tc := range []struct {
		name     string
		seconds  *int32
		lifetime time.Duration
		want     time.Duration
	}{
		{"none asked: the lifetime", nil, 720 * time.Hour, 720 * time.Hour},
		{"asked for less", ptr.To[int32](3600), 720 * time.Hour, time.Hour},
		{"asked for more: the lifetime", ptr.To[int32](100 * 24 * 3600), 720 * time.Hour, 720 * time.Hour},
		{"a lifetime under the apiserver's 10-minute minimum wins", ptr.To[int32](600), 2 * time.Minute, 2 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			csr := request(func(c *certificatesv1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = tc.seconds })
			if got := validity(csr, tc.lifetime); got != tc.want {
				t.Errorf("validity = %s, want %s", got, tc.want)
			}
		})
	}
}
