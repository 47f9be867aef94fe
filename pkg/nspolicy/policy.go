package nspolicy

import (
	"fmt"
	"slices"
	"strings"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// maxListed bounds how many policies a denial message names, so a fleet
// with hundreds of policies still gets a condition message and an
// admission error of sensible size; the rest are counted.
const maxListed = 5

// Decision is whether a MyApp of one hub namespace may place into one
// member namespace, and why.
type Decision struct {
	// Allowed says the MyApp may place into TargetNamespace.
	Allowed bool
	// HubNamespace is the MyApp's namespace on the hub.
	HubNamespace string
	// TargetNamespace is the effective member namespace (the MyApp's own
	// namespace when spec.targetNamespace is empty).
	TargetNamespace string
	// Considered are the names of the policies whose hubNamespaces match
	// HubNamespace, sorted.
	Considered []string
	// GrantedBy are the names of the considered policies whose
	// memberNamespaces match TargetNamespace, sorted; empty when the
	// target is the MyApp's own namespace or nothing grants it.
	GrantedBy []string
	// Reason says why, in a sentence fit for a condition message or an
	// admission error after the field it is about.
	Reason string
}

// Decide says whether a MyApp in hubNamespace may place into member
// namespace target (empty: its own namespace), given every
// FleetNamespacePolicy. Its own namespace is always allowed; any other
// namespace only when a policy whose hubNamespaces match hubNamespace has
// memberNamespaces that match it. Policies only add rights, so the result
// does not depend on their order, and adding one never takes a right away.
func Decide(hubNamespace, target string, policies []flotillav1.FleetNamespacePolicy) Decision {
	if target == "" {
		target = hubNamespace
	}
	d := Decision{HubNamespace: hubNamespace, TargetNamespace: target}
	matching := Matching(hubNamespace, policies)
	for _, p := range matching {
		d.Considered = append(d.Considered, p.Name)
		if MatchAny(p.Spec.MemberNamespaces, target) {
			d.GrantedBy = append(d.GrantedBy, p.Name)
		}
	}
	switch {
	case target == hubNamespace:
		d.Allowed = true
		d.Reason = fmt.Sprintf("member namespace %q is the MyApp's own namespace", target)
	case len(d.GrantedBy) > 0:
		d.Allowed = true
		d.Reason = fmt.Sprintf("FleetNamespacePolicy %s grants member namespace %q to hub namespace %q", listNames(d.GrantedBy), target, hubNamespace)
	case len(matching) == 0:
		d.Reason = fmt.Sprintf("no FleetNamespacePolicy matches hub namespace %q, so its MyApps may place only into member namespace %q", hubNamespace, hubNamespace)
	default:
		d.Reason = fmt.Sprintf("member namespace %q is neither the MyApp's own namespace %q nor granted by the FleetNamespacePolicies that match hub namespace %q (%s)",
			target, hubNamespace, hubNamespace, describe(matching))
	}
	return d
}

// Detail is the decision without the field's name and value, for a
// field error on spec.targetNamespace: `is not allowed for a MyApp in hub
// namespace "team-a": <reason>`.
func (d Decision) Detail() string {
	verdict := "is not allowed"
	if d.Allowed {
		verdict = "is allowed"
	}
	return fmt.Sprintf("%s for a MyApp in hub namespace %q: %s", verdict, d.HubNamespace, d.Reason)
}

// Message is the decision as one sentence that names the field and the
// value, for a condition message or a log line:
// `spec.targetNamespace "kube-system" is not allowed for a MyApp in hub
// namespace "team-a": <reason>`.
func (d Decision) Message() string {
	return fmt.Sprintf("spec.targetNamespace %q %s", d.TargetNamespace, d.Detail())
}

// Matching returns the policies whose hubNamespaces match hubNamespace,
// sorted by name so that everything computed from them is independent of
// the order the policies were listed in.
func Matching(hubNamespace string, policies []flotillav1.FleetNamespacePolicy) []*flotillav1.FleetNamespacePolicy {
	var out []*flotillav1.FleetNamespacePolicy
	for i := range policies {
		if MatchAny(policies[i].Spec.HubNamespaces, hubNamespace) {
			out = append(out, &policies[i])
		}
	}
	slices.SortFunc(out, func(a, b *flotillav1.FleetNamespacePolicy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// PodSecurity is the Pod Security level for the MyApps of hubNamespace:
// the strictest level set by a policy that matches hubNamespace, or empty
// when none sets one (the agent's default applies). Strictest wins
// because policies are written by different admins, and a looser one must
// not undo a stricter one.
func PodSecurity(hubNamespace string, policies []flotillav1.FleetNamespacePolicy) flotillav1.PodSecurityLevel {
	var out flotillav1.PodSecurityLevel
	for _, p := range Matching(hubNamespace, policies) {
		if strictness(p.Spec.PodSecurity) > strictness(out) {
			out = p.Spec.PodSecurity
		}
	}
	return out
}

// strictness orders the Pod Security levels; an unset or unknown level
// is 0, below privileged, so that it never wins over a level set.
func strictness(l flotillav1.PodSecurityLevel) int {
	switch l {
	case flotillav1.PodSecurityPrivileged:
		return 1
	case flotillav1.PodSecurityBaseline:
		return 2
	case flotillav1.PodSecurityRestricted:
		return 3
	}
	return 0
}

// describe lists policies with their memberNamespaces, at most maxListed
// of them: "shared: shared-*, tools; other: x and 3 more".
func describe(policies []*flotillav1.FleetNamespacePolicy) string {
	parts := make([]string, 0, min(len(policies), maxListed))
	for i, p := range policies {
		if i == maxListed {
			break
		}
		parts = append(parts, fmt.Sprintf("%s grants %s", p.Name, strings.Join(p.Spec.MemberNamespaces, ", ")))
	}
	s := strings.Join(parts, "; ")
	if n := len(policies) - maxListed; n > 0 {
		s += fmt.Sprintf("; and %d more", n)
	}
	return s
}

// listNames joins names, at most maxListed of them.
func listNames(names []string) string {
	if len(names) <= maxListed {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxListed], ", "), len(names)-maxListed)
}
