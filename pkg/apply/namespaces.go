package apply

import (
	"errors"
	"fmt"
	"strings"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/nspolicy"
)

// The names of the settings a refusal names. The agent has flags of these
// names, and a hub that applies directly to a member is meant to take the
// same ones, so the message on the Work says what to change.
const (
	FlagDeniedNamespaces  = "--denied-namespaces"
	FlagAllowedNamespaces = "--allowed-namespaces"
)

// The Pod Security Admission labels a namespace created by an Applier gets.
const (
	LabelPodSecurityEnforce        = "pod-security.kubernetes.io/enforce"
	LabelPodSecurityEnforceVersion = "pod-security.kubernetes.io/enforce-version"
)

// DefaultDeniedNamespaces are the member namespaces no Work may write into
// unless a caller's NamespacePolicy says otherwise: the cluster's own.
var DefaultDeniedNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// DefaultPodSecurity is the Pod Security Admission level of a namespace an
// Applier creates for a Work whose spec.podSecurity is empty, unless
// Options.DefaultPodSecurity says otherwise.
const DefaultPodSecurity = v1alpha1.PodSecurityBaseline

// ErrNamespaceDenied is wrapped by Apply's error when a Work names an object
// its NamespacePolicy refuses; nothing of that Work was applied. Retrying
// does not help until the Work or the policy changes.
var ErrNamespaceDenied = errors.New("the applier's namespace policy refuses the Work")

// NamespacePolicy says where an Applier may write. The hub already keeps
// each MyApp in the namespaces its FleetNamespacePolicies grant; this is
// the member's own, independent check, so a hub that is wrong, or a Work
// written past the hub's webhook, still cannot reach the member's system
// namespaces.
type NamespacePolicy struct {
	// Denied are globs (see pkg/nspolicy) of namespaces nothing may be
	// written into. A denial wins over Allowed.
	Denied []string
	// Allowed, when not empty, are the globs of the only namespaces
	// objects may be written into; empty allows every namespace Denied
	// does not match.
	Allowed []string
	// ClusterScoped lets a Work carry cluster-scoped objects (whose
	// kinds Options.Kinds must also list). It is off by default: the hub
	// renders only namespaced objects, and a cluster-scoped one such as a
	// ClusterRoleBinding or a webhook configuration reaches beyond any
	// namespace, so a Work carrying one is a privilege escalation. Even
	// with it on, a Namespace object is checked by its name like any
	// namespace.
	ClusterScoped bool
}

// DefaultNamespacePolicy is the policy of an Applier whose
// Options.Namespaces is nil: DefaultDeniedNamespaces denied, every other
// namespace allowed, cluster-scoped objects refused.
func DefaultNamespacePolicy() NamespacePolicy {
	return NamespacePolicy{Denied: append([]string(nil), DefaultDeniedNamespaces...)}
}

// Refusal says why p refuses the object id names, or "" when it allows it.
// An identifier without a namespace is a cluster-scoped object (Apply
// defaults the namespace of every namespaced one). It is pure.
func (p NamespacePolicy) Refusal(id v1alpha1.ResourceIdentifier) string {
	ns := id.Namespace
	if ns == "" {
		if !p.ClusterScoped {
			return fmt.Sprintf("%s is cluster-scoped, and this applier writes only namespaced objects: a cluster-scoped object reaches beyond any namespace", describe(id))
		}
		if !isNamespace(id) {
			return ""
		}
		// A Namespace object is the namespace it names.
		ns = id.Name
	}
	for _, pattern := range p.Denied {
		if nspolicy.Match(pattern, ns) {
			return fmt.Sprintf("namespace %s is refused by %s (pattern %q)", ns, FlagDeniedNamespaces, pattern)
		}
	}
	if len(p.Allowed) > 0 && !nspolicy.MatchAny(p.Allowed, ns) {
		return fmt.Sprintf("namespace %s is not in %s (%s)", ns, FlagAllowedNamespaces, strings.Join(p.Allowed, ","))
	}
	return ""
}

// ParsePodSecurity checks that value is a Pod Security Admission level
// (privileged, baseline or restricted); empty means DefaultPodSecurity.
// field names the setting in the error.
func ParsePodSecurity(field, value string) (v1alpha1.PodSecurityLevel, error) {
	switch l := v1alpha1.PodSecurityLevel(value); l {
	case "":
		return DefaultPodSecurity, nil
	case v1alpha1.PodSecurityPrivileged, v1alpha1.PodSecurityBaseline, v1alpha1.PodSecurityRestricted:
		return l, nil
	default:
		return "", fmt.Errorf("%s: %q is not a Pod Security level; use privileged, baseline or restricted", field, value)
	}
}

// createdNamespaceLabels are the labels of namespace name when an Applier
// creates it for work: Flotilla's (LabelNamespaceCreated and the fleet and
// cluster identity, so admins can tell which namespaces Flotilla made) and
// Pod Security Admission's, at work.Spec.PodSecurity or else def. An
// invalid spec.podSecurity (the hub's CRD allows none, so a Work written
// around it) is an error naming the field. It is pure.
func createdNamespaceLabels(work *v1alpha1.Work, def v1alpha1.PodSecurityLevel, fleet, cluster string) (map[string]string, error) {
	level := def
	if level == "" {
		level = DefaultPodSecurity
	}
	if work.Spec.PodSecurity != "" {
		var err error
		if level, err = ParsePodSecurity("spec.podSecurity", string(work.Spec.PodSecurity)); err != nil {
			return nil, err
		}
	}
	labels := map[string]string{
		v1alpha1.LabelNamespaceCreated: "true",
		LabelPodSecurityEnforce:        string(level),
		// "latest": the checks of the member's own Kubernetes version,
		// which is what its admission can evaluate.
		LabelPodSecurityEnforceVersion: "latest",
	}
	if fleet != "" {
		labels[v1alpha1.LabelFleet] = fleet
	}
	if cluster != "" {
		labels[v1alpha1.LabelCluster] = cluster
	}
	return labels, nil
}
