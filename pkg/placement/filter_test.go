package placement

import (
	"strings"
	"testing"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func acceptance(a v1alpha1.Acceptance) clusterOpt {
	return func(mc *v1alpha1.MemberCluster) { mc.Spec.Acceptance = a }
}

func TestAccepted(t *testing.T) {
	for _, tc := range []struct {
		acceptance v1alpha1.Acceptance
		want       bool
		reason     string
	}{
		{"", true, ""}, // made before acceptance existed, or by an admin
		{v1alpha1.AcceptanceAccepted, true, ""},
		{v1alpha1.AcceptancePending, false, "Pending (kubectl flotilla accept m)"},
		{v1alpha1.AcceptanceDenied, false, "Denied"},
	} {
		t.Run(string(tc.acceptance), func(t *testing.T) {
			mc := member("m", acceptance(tc.acceptance))
			ok, why := accepted(&mc)
			if ok != tc.want || !strings.Contains(why, tc.reason) || (ok && why != "") {
				t.Errorf("accepted(%q) = %v, %q; want %v and a reason containing %q", tc.acceptance, ok, why, tc.want, tc.reason)
			}
		})
	}
}

func TestScheduleAcceptance(t *testing.T) {
	runCases(t, []schedCase{
		{
			name:  "Duplicated never places on a Pending or Denied member",
			in:    Input{Replicas: 2, Clusters: []v1alpha1.MemberCluster{member("a"), member("b", acceptance(v1alpha1.AcceptancePending)), member("c", acceptance(v1alpha1.AcceptanceDenied))}},
			want:  "a=2",
			check: wantFiltered("b", FilterAcceptance, "kubectl flotilla accept b"),
		},
		{
			name: "a member that was Accepted and is Denied now keeps nothing: its replicas move",
			in: Input{Replicas: 4, Clusters: []v1alpha1.MemberCluster{member("a"), member("b", acceptance(v1alpha1.AcceptanceDenied))},
				Placement: v1alpha1.Placement{ReplicaScheduling: aggregate()},
				Previous:  decision("a=2 b=2")},
			want:  "a=4",
			check: wantFiltered("b", FilterAcceptance, "Denied"),
		},
		{
			name:  "a Pending member named in the affinity is still left out, with the acceptance as its reason",
			in:    Input{Replicas: 1, Clusters: []v1alpha1.MemberCluster{member("a"), member("b", acceptance(v1alpha1.AcceptancePending))}, Placement: v1alpha1.Placement{ClusterAffinity: &v1alpha1.ClusterAffinity{ClusterNames: []string{"a", "b"}}}},
			want:  "a=1",
			check: wantFiltered("b", FilterAcceptance, "Pending"),
		},
	})
}
