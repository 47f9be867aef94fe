package setup

import (
	"slices"
	"strings"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/apply"
	"github.com/flotilla-dev/flotilla/pkg/nspolicy"
)

// The flags of the agent's namespace policy, as errors name them.
const (
	flagDeniedNamespaces   = "denied-namespaces"
	flagAllowedNamespaces  = "allowed-namespaces"
	flagDefaultPodSecurity = "default-pod-security"
)

// DefaultDeniedNamespaces is the default of --denied-namespaces.
var DefaultDeniedNamespaces = strings.Join(apply.DefaultDeniedNamespaces, ",")

// namespacePolicy turns the agent's flag values into the applier's
// namespace policy and default Pod Security level, with an error naming
// the flag whose value is wrong. denied empty means
// DefaultDeniedNamespaces; allowed empty allows every namespace not
// denied; podSecurity empty means baseline. The agent's own namespace,
// agentNS, is always denied, whatever --denied-namespaces says: a Work
// written there could replace the agent's records of what it applied and
// of the fleet it serves. Cluster-scoped objects are always refused: the
// hub renders none, and the agent has no flag to allow them.
func namespacePolicy(denied, allowed, podSecurity, agentNS string) (apply.NamespacePolicy, flotillav1.PodSecurityLevel, error) {
	if strings.TrimSpace(denied) == "" {
		denied = DefaultDeniedNamespaces
	}
	deny, err := nspolicy.ParsePatterns(flagDeniedNamespaces, denied)
	if err != nil {
		return apply.NamespacePolicy{}, "", err
	}
	if agentNS != "" && !slices.Contains(deny, agentNS) {
		deny = append(deny, agentNS)
	}
	allow, err := nspolicy.ParsePatterns(flagAllowedNamespaces, allowed)
	if err != nil {
		return apply.NamespacePolicy{}, "", err
	}
	level, err := apply.ParsePodSecurity("--"+flagDefaultPodSecurity, podSecurity)
	if err != nil {
		return apply.NamespacePolicy{}, "", err
	}
	return apply.NamespacePolicy{Denied: deny, Allowed: allow}, level, nil
}
