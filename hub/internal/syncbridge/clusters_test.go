package syncbridge

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestAdmission(t *testing.T) {
	mc := func(a flotillav1.Acceptance) *flotillav1.MemberCluster {
		return &flotillav1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "east", UID: "uid-2"}, Spec: flotillav1.MemberClusterSpec{Acceptance: a}}
	}
	for _, tc := range []struct {
		name       string
		mc         *flotillav1.MemberCluster
		certUID    string
		want       bool
		wantReason string
	}{
		{"Accepted, join-issued certificate of this member", mc(flotillav1.AcceptanceAccepted), "uid-2", true, ""},
		{"Accepted, flotilla-pki certificate (no UID)", mc(flotillav1.AcceptanceAccepted), "", true, ""},
		{"acceptance unset (made before it existed)", mc(""), "", true, ""},
		{"Pending", mc(flotillav1.AcceptancePending), "uid-2", false, "kubectl flotilla accept east"},
		{"Denied", mc(flotillav1.AcceptanceDenied), "uid-2", false, "is Denied"},
		{"re-created: the certificate carries the old UID", mc(flotillav1.AcceptanceAccepted), "uid-1", false, "MemberCluster east was re-created"},
		{"re-created and Pending: the UID is what to fix first", mc(flotillav1.AcceptancePending), "uid-1", false, "join it again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, why := Admission(tc.mc, tc.certUID)
			if ok != tc.want || !strings.Contains(why, tc.wantReason) || (ok && why != "") {
				t.Errorf("Admission = %v, %q; want %v with a reason containing %q", ok, why, tc.want, tc.wantReason)
			}
		})
	}
}
