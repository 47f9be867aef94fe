package bootstrap

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

const testToken = "abcdef.0123456789abcdef"

func agentCSR(t *testing.T, cluster string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := pki.NewAgentCSR(key, cluster)
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

func TestValidateRegister(t *testing.T) {
	east := agentCSR(t, "east")
	for _, tc := range []struct {
		name    string
		req     *syncv1.RegisterRequest
		unauth  bool
		wantErr string
	}{
		{name: "valid", req: &syncv1.RegisterRequest{Token: testToken, ClusterName: "east", Csr: east, Labels: map[string]string{"env": "prod", "example.com/team": "a"}, Region: "eu"}},
		{name: "dry run without a request", req: &syncv1.RegisterRequest{Token: testToken, ClusterName: "east", DryRun: true}},
		{name: "malformed token", req: &syncv1.RegisterRequest{Token: "abcdef.short", ClusterName: "east", Csr: east}, unauth: true, wantErr: "token: malformed"},
		{name: "no token", req: &syncv1.RegisterRequest{ClusterName: "east", Csr: east}, unauth: true, wantErr: "token:"},
		{name: "invalid cluster name", req: &syncv1.RegisterRequest{Token: testToken, ClusterName: "East_1", Csr: east}, wantErr: "cluster_name:"},
		{name: "the request names another cluster", req: &syncv1.RegisterRequest{Token: testToken, ClusterName: "west", Csr: east}, wantErr: `csr: certificate request names cluster "east"`},
		{name: "a dry run's request is checked too", req: &syncv1.RegisterRequest{Token: testToken, ClusterName: "west", Csr: east, DryRun: true}, wantErr: "csr:"},
		{name: "no request", req: &syncv1.RegisterRequest{Token: testToken, ClusterName: "east"}, wantErr: "csr: certificate request is empty"},
		{name: "reserved label", req: &syncv1.RegisterRequest{Token: testToken, ClusterName: "east", Csr: east, Labels: map[string]string{flotillav1.LabelJoinToken: "zzzzzz"}}, wantErr: "flotilla.dev/ domain"},
		{name: "bad label key", req: &syncv1.RegisterRequest{Token: testToken, ClusterName: "east", Csr: east, Labels: map[string]string{"a b": "x"}}, wantErr: `labels: key "a b"`},
		{name: "bad label value", req: &syncv1.RegisterRequest{Token: testToken, ClusterName: "east", Csr: east, Labels: map[string]string{"env": "a b"}}, wantErr: `labels: value of "env"`},
		{name: "long zone", req: &syncv1.RegisterRequest{Token: testToken, ClusterName: "east", Csr: east, Zone: strings.Repeat("z", 64)}, wantErr: "zone: 64 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := validateRegister(tc.req)
			if tc.wantErr == "" {
				if err != nil || r == nil {
					t.Fatalf("validateRegister = %v, %v; want it valid", r, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.msg, tc.wantErr) || err.unauthenticated != tc.unauth {
				t.Fatalf("validateRegister error = %+v; want one containing %q (unauthenticated %v)", err, tc.wantErr, tc.unauth)
			}
		})
	}
}

func TestMemberLabels(t *testing.T) {
	got := memberLabels(map[string]string{"env": "dev", "team": "a"}, map[string]string{"env": "prod"}, "abcdef")
	want := map[string]string{"env": "prod", "team": "a", flotillav1.LabelJoinToken: "abcdef"}
	if len(got) != len(want) {
		t.Fatalf("labels = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q (the token's labels win over the agent's)", k, got[k], v)
		}
	}
}

func TestReuse(t *testing.T) {
	member := func(token string, mut ...func(*flotillav1.MemberCluster)) *flotillav1.MemberCluster {
		mc := &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "east", Labels: map[string]string{}}}
		if token != "" {
			mc.Labels[flotillav1.LabelJoinToken] = token
		}
		for _, m := range mut {
			m(mc)
		}
		return mc
	}
	issued := certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-east-x"}, Status: certificatesv1.CertificateSigningRequestStatus{Certificate: []byte("PEM")}}
	pending := certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "flotilla-east-y"}}
	now := metav1.Now()
	for _, tc := range []struct {
		name    string
		mc      *flotillav1.MemberCluster
		csrs    []certificatesv1.CertificateSigningRequest
		want    bool
		wantWhy string
	}{
		{"this token's, nothing issued yet: the agent retries", member("abcdef"), []certificatesv1.CertificateSigningRequest{pending}, true, ""},
		{"made by an admin", member(""), nil, false, "not created by a join with token abcdef"},
		{"made by another token", member("zzzzzz"), nil, false, "not created by a join with token abcdef"},
		{"its certificate was issued", member("abcdef"), []certificatesv1.CertificateSigningRequest{pending, issued}, false, "got its certificate already (request flotilla-east-x)"},
		{"its agent connected", member("abcdef", func(mc *flotillav1.MemberCluster) { mc.Status.LastHeartbeatTime = &now }), nil, false, "connected already"},
		{"being deleted", member("abcdef", func(mc *flotillav1.MemberCluster) { mc.DeletionTimestamp = &now }), nil, false, "being deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := reuse(tc.mc, "abcdef", tc.csrs)
			if ok != tc.want || !strings.Contains(why, tc.wantWhy) {
				t.Errorf("reuse = %v, %q; want %v with %q", ok, why, tc.want, tc.wantWhy)
			}
		})
	}
}

func TestRequestState(t *testing.T) {
	csr := func(conds ...certificatesv1.CertificateSigningRequestCondition) *certificatesv1.CertificateSigningRequest {
		return &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "r", Labels: map[string]string{flotillav1.LabelCluster: "east"}},
			Status: certificatesv1.CertificateSigningRequestStatus{Conditions: conds}}
	}
	cond := func(t certificatesv1.RequestConditionType, msg string) certificatesv1.CertificateSigningRequestCondition {
		return certificatesv1.CertificateSigningRequestCondition{Type: t, Status: corev1.ConditionTrue, Reason: "R", Message: msg}
	}
	issued := csr(cond(certificatesv1.CertificateApproved, ""))
	issued.Status.Certificate = []byte("PEM")
	accepted := &flotillav1.MemberCluster{Spec: flotillav1.MemberClusterSpec{Acceptance: flotillav1.AcceptanceAccepted}}
	pending := &flotillav1.MemberCluster{Spec: flotillav1.MemberClusterSpec{Acceptance: flotillav1.AcceptancePending}}
	for _, tc := range []struct {
		name    string
		csr     *certificatesv1.CertificateSigningRequest
		mc      *flotillav1.MemberCluster
		want    syncv1.CertificateResponse_State
		wantMsg string
	}{
		{"issued", issued, accepted, syncv1.CertificateResponse_ISSUED, ""},
		{"denied, with the condition's message", csr(cond(certificatesv1.CertificateDenied, "MemberCluster east is Denied")), accepted, syncv1.CertificateResponse_DENIED, "denied: MemberCluster east is Denied"},
		{"failed", csr(cond(certificatesv1.CertificateApproved, ""), cond(certificatesv1.CertificateFailed, "URI SAN mismatch")), accepted, syncv1.CertificateResponse_DENIED, "failed: URI SAN mismatch"},
		{"waiting for accept", csr(), pending, syncv1.CertificateResponse_PENDING, "kubectl flotilla accept east"},
		{"approved, not signed yet", csr(cond(certificatesv1.CertificateApproved, "")), accepted, syncv1.CertificateResponse_PENDING, "signing"},
		{"not approved yet", csr(), accepted, syncv1.CertificateResponse_PENDING, "approve"},
		{"member gone", csr(), nil, syncv1.CertificateResponse_PENDING, "not there"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, msg := requestState(tc.csr, tc.mc)
			if st != tc.want || !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("requestState = %s %q; want %s with %q", st, msg, tc.want, tc.wantMsg)
			}
		})
	}
}
