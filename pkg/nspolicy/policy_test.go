package nspolicy

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func policy(name string, hub, member []string, ps flotillav1.PodSecurityLevel) flotillav1.FleetNamespacePolicy {
	return flotillav1.FleetNamespacePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       flotillav1.FleetNamespacePolicySpec{HubNamespaces: hub, MemberNamespaces: member, PodSecurity: ps},
	}
}

func TestDecide(t *testing.T) {
	shared := policy("team-a-shared", []string{"team-a"}, []string{"shared-*"}, "")
	tools := policy("all-teams-tools", []string{"team-*"}, []string{"tools", "cache-?"}, flotillav1.PodSecurityRestricted)
	other := policy("team-b-only", []string{"team-b"}, []string{"b-*"}, "")
	tests := []struct {
		name        string
		hub, target string
		policies    []flotillav1.FleetNamespacePolicy
		wantAllowed bool
		wantGranted []string
		// wantReason are substrings the reason must contain.
		wantReason []string
	}{{
		name: "the own namespace, explicitly, without any policy", hub: "team-a", target: "team-a",
		wantAllowed: true, wantReason: []string{`"team-a" is the MyApp's own namespace`},
	}, {
		name: "an empty target is the own namespace", hub: "team-a", target: "",
		wantAllowed: true, wantReason: []string{"own namespace"},
	}, {
		name: "kube-system without any policy", hub: "team-a", target: "kube-system",
		wantReason: []string{`no FleetNamespacePolicy matches hub namespace "team-a"`, `only into member namespace "team-a"`},
	}, {
		name: "another tenant's namespace without any policy", hub: "team-a", target: "team-b",
		wantReason: []string{`no FleetNamespacePolicy matches hub namespace "team-a"`},
	}, {
		name: "a granted namespace", hub: "team-a", target: "shared-x", policies: []flotillav1.FleetNamespacePolicy{shared, other},
		wantAllowed: true, wantGranted: []string{"team-a-shared"}, wantReason: []string{"FleetNamespacePolicy team-a-shared grants"},
	}, {
		name: "kube-system with policies that grant something else", hub: "team-a", target: "kube-system",
		policies:   []flotillav1.FleetNamespacePolicy{shared, tools, other},
		wantReason: []string{`"kube-system" is neither the MyApp's own namespace "team-a"`, "all-teams-tools grants tools, cache-?", "team-a-shared grants shared-*"},
	}, {
		name: "a policy for another hub namespace grants nothing", hub: "team-a", target: "b-1",
		policies:   []flotillav1.FleetNamespacePolicy{other},
		wantReason: []string{`no FleetNamespacePolicy matches hub namespace "team-a"`},
	}, {
		name: "a hub namespace glob and a '?' member glob", hub: "team-c", target: "cache-1",
		policies:    []flotillav1.FleetNamespacePolicy{tools},
		wantAllowed: true, wantGranted: []string{"all-teams-tools"},
	}, {
		name: "'?' matches exactly one character", hub: "team-c", target: "cache-12",
		policies: []flotillav1.FleetNamespacePolicy{tools}, wantReason: []string{"all-teams-tools grants tools, cache-?"},
	}, {
		name: "several policies grant the same namespace: all are named, sorted", hub: "team-a", target: "tools",
		policies:    []flotillav1.FleetNamespacePolicy{policy("z", []string{"team-a"}, []string{"tools"}, ""), tools},
		wantAllowed: true, wantGranted: []string{"all-teams-tools", "z"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.hub, tt.target, tt.policies)
			if d.Allowed != tt.wantAllowed {
				t.Errorf("Allowed = %v, want %v (%s)", d.Allowed, tt.wantAllowed, d.Reason)
			}
			if !slices.Equal(d.GrantedBy, tt.wantGranted) {
				t.Errorf("GrantedBy = %q, want %q", d.GrantedBy, tt.wantGranted)
			}
			for _, s := range tt.wantReason {
				if !strings.Contains(d.Reason, s) {
					t.Errorf("Reason %q does not contain %q", d.Reason, s)
				}
			}
			msg := d.Message()
			if !strings.HasPrefix(msg, "spec.targetNamespace ") || !strings.Contains(msg, `"`+d.TargetNamespace+`"`) || !strings.Contains(msg, `hub namespace "`+tt.hub+`"`) {
				t.Errorf("Message %q does not name the field, the value and the hub namespace", msg)
			}
		})
	}
}

func TestDecideBoundsTheListOfPolicies(t *testing.T) {
	var many []flotillav1.FleetNamespacePolicy
	for i := range 40 {
		many = append(many, policy(strings.Repeat("p", 1+i), []string{"team-a"}, []string{"x-*"}, ""))
	}
	d := Decide("team-a", "kube-system", many)
	if d.Allowed || len(d.Considered) != 40 {
		t.Fatalf("Allowed = %v, considered %d; want false, 40", d.Allowed, len(d.Considered))
	}
	if !strings.Contains(d.Reason, "and 35 more") || strings.Count(d.Reason, " grants ") != maxListed {
		t.Errorf("Reason lists %d policies and does not count the rest: %q", strings.Count(d.Reason, " grants "), d.Reason)
	}
}

func TestPodSecurity(t *testing.T) {
	tests := []struct {
		name     string
		policies []flotillav1.FleetNamespacePolicy
		want     flotillav1.PodSecurityLevel
	}{{
		name: "no policy: empty (the agent's default)",
	}, {
		name:     "a matching policy without a level: empty",
		policies: []flotillav1.FleetNamespacePolicy{policy("a", []string{"team-a"}, []string{"x"}, "")},
	}, {
		name:     "one level",
		policies: []flotillav1.FleetNamespacePolicy{policy("a", []string{"team-a"}, []string{"x"}, flotillav1.PodSecurityPrivileged)},
		want:     flotillav1.PodSecurityPrivileged,
	}, {
		name: "the strictest of the matching policies wins",
		policies: []flotillav1.FleetNamespacePolicy{
			policy("a", []string{"team-*"}, []string{"x"}, flotillav1.PodSecurityPrivileged),
			policy("b", []string{"team-a"}, []string{"y"}, flotillav1.PodSecurityRestricted),
			policy("c", []string{"*"}, []string{"z"}, flotillav1.PodSecurityBaseline),
		},
		want: flotillav1.PodSecurityRestricted,
	}, {
		name: "a policy of another hub namespace does not count",
		policies: []flotillav1.FleetNamespacePolicy{
			policy("a", []string{"team-a"}, []string{"x"}, flotillav1.PodSecurityBaseline),
			policy("b", []string{"team-b"}, []string{"y"}, flotillav1.PodSecurityRestricted),
		},
		want: flotillav1.PodSecurityBaseline,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PodSecurity("team-a", tt.policies); got != tt.want {
				t.Errorf("PodSecurity = %q, want %q", got, tt.want)
			}
		})
	}
}

// fuzzAlphabet keeps fuzzed names and globs short and colliding often, so
// that matches happen: a few letters, '-', and the two wildcards.
const fuzzAlphabet = "ab-*?"

// fuzzPolicies builds up to eight policies from the fuzzer's bytes.
func fuzzPolicies(seed uint64, n uint8) []flotillav1.FleetNamespacePolicy {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	word := func(wild bool) string {
		alphabet := fuzzAlphabet
		if !wild {
			alphabet = fuzzAlphabet[:3]
		}
		b := make([]byte, 1+r.IntN(4))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	levels := []flotillav1.PodSecurityLevel{"", flotillav1.PodSecurityPrivileged, flotillav1.PodSecurityBaseline, flotillav1.PodSecurityRestricted}
	var out []flotillav1.FleetNamespacePolicy
	for i := range int(n % 9) {
		out = append(out, policy(string(rune('a'+i)), []string{word(true), word(true)}[:1+r.IntN(2)],
			[]string{word(true), word(true)}[:1+r.IntN(2)], levels[r.IntN(len(levels))]))
	}
	return out
}

// FuzzDecide checks the invariants of the rule on random policies: the
// own namespace is always allowed; without policies only the own
// namespace is; adding a policy never removes a right nor loosens the Pod
// Security level; and neither the decision nor its reason depends on the
// order of the policies.
func FuzzDecide(f *testing.F) {
	f.Add("ab", "ba", uint64(1), uint8(3), uint64(7))
	f.Add("a-b", "a-b", uint64(2), uint8(8), uint64(0))
	f.Add("b", "", uint64(3), uint8(0), uint64(1))
	f.Fuzz(func(t *testing.T, hub, target string, seed uint64, n uint8, shuffle uint64) {
		if hub == "" || len(hub) > 8 || len(target) > 8 {
			return
		}
		policies := fuzzPolicies(seed, n)

		if d := Decide(hub, hub, policies); !d.Allowed {
			t.Fatalf("the own namespace %q was refused: %s", hub, d.Reason)
		}
		if d := Decide(hub, "", policies); !d.Allowed {
			t.Fatalf("an empty target (the own namespace) was refused: %s", d.Reason)
		}
		if d := Decide(hub, target, nil); d.Allowed != (target == "" || target == hub) {
			t.Fatalf("without policies, %q from hub namespace %q: Allowed = %v", target, hub, d.Allowed)
		}

		d := Decide(hub, target, policies)
		ps := PodSecurity(hub, policies)
		for i := range policies {
			fewer := slices.Delete(slices.Clone(policies), i, i+1)
			if Decide(hub, target, fewer).Allowed && !d.Allowed {
				t.Fatalf("adding policy %+v took away %q from hub namespace %q", policies[i].Spec, target, hub)
			}
			if strictness(PodSecurity(hub, fewer)) > strictness(ps) {
				t.Fatalf("adding policy %+v loosened the Pod Security level", policies[i].Spec)
			}
		}

		shuffled := slices.Clone(policies)
		rand.New(rand.NewPCG(shuffle, 0)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		e := Decide(hub, target, shuffled)
		if e.Allowed != d.Allowed || e.Reason != d.Reason || !slices.Equal(e.GrantedBy, d.GrantedBy) || !slices.Equal(e.Considered, d.Considered) {
			t.Fatalf("the order of the policies changed the decision:\n%+v\n%+v", d, e)
		}
		if PodSecurity(hub, shuffled) != ps {
			t.Fatalf("the order of the policies changed the Pod Security level")
		}
	})
}
