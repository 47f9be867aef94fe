package setup

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestNamespacePolicy(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		denied, allowed, podSecurity string
		agentNS                      string
		wantDenied, wantAllowed      []string
		wantLevel                    flotillav1.PodSecurityLevel
	}{
		{name: "defaults", agentNS: "flotilla-system",
			wantDenied: []string{"kube-system", "kube-public", "kube-node-lease", "flotilla-system"}, wantLevel: "baseline"},
		{name: "overridden deny list still denies the agent's namespace", denied: "kube-system, secret-*", agentNS: "agents",
			wantDenied: []string{"kube-system", "secret-*", "agents"}, wantLevel: "baseline"},
		{name: "the agent's namespace is not added twice", denied: "agents", agentNS: "agents",
			wantDenied: []string{"agents"}, wantLevel: "baseline"},
		{name: "allow list and level", allowed: "team-*,shared", podSecurity: "restricted", agentNS: "flotilla-system",
			wantDenied:  []string{"kube-system", "kube-public", "kube-node-lease", "flotilla-system"},
			wantAllowed: []string{"team-*", "shared"}, wantLevel: "restricted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, level, err := namespacePolicy(tc.denied, tc.allowed, tc.podSecurity, tc.agentNS)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Denied, tc.wantDenied) || !slices.Equal(p.Allowed, tc.wantAllowed) || level != tc.wantLevel || p.ClusterScoped {
				t.Errorf("namespacePolicy = %+v, %q; want denied %q, allowed %q, level %q, no cluster-scoped objects",
					p, level, tc.wantDenied, tc.wantAllowed, tc.wantLevel)
			}
		})
	}
}

// TestNamespaceFlagsAreValidated shows that the agent refuses to start
// with a bad namespace flag, with an error naming the flag and the value.
func TestNamespaceFlagsAreValidated(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Options)
		want []string
	}{
		{"denied", func(o *Options) { o.DeniedNamespaces = "kube-system,Kube_Public" }, []string{"--denied-namespaces", `"Kube_Public"`}},
		{"allowed", func(o *Options) { o.AllowedNamespaces = "team-*,a/b" }, []string{"--allowed-namespaces", `"a/b"`}},
		{"pod security", func(o *Options) { o.DefaultPodSecurity = "strict" }, []string{"--default-pod-security", `"strict"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Config: &rest.Config{Host: "https://127.0.0.1:1"}, HubAddress: "127.0.0.1:1"}
			tc.set(&opts)
			a, err := New(opts)
			if err == nil {
				t.Fatalf("New = %v, want an error", a)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}
