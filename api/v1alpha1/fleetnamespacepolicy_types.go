package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodSecurityLevel is a Pod Security Admission level
// (pod-security.kubernetes.io/enforce).
// +kubebuilder:validation:Enum=privileged;baseline;restricted
type PodSecurityLevel string

// The Pod Security Admission levels.
const (
	PodSecurityPrivileged PodSecurityLevel = "privileged"
	PodSecurityBaseline   PodSecurityLevel = "baseline"
	PodSecurityRestricted PodSecurityLevel = "restricted"
)

// FleetNamespacePolicySpec grants the MyApps of some hub namespaces the
// right to place into member namespaces other than their own.
//
// Without any policy a MyApp in hub namespace N places only into member
// namespace N. A policy whose HubNamespaces match N adds the member
// namespaces its MemberNamespaces match; several policies add up (a union:
// no policy takes a right away). Patterns are globs in which '*' matches any
// run of characters and '?' one character; nothing else is special.
type FleetNamespacePolicySpec struct {
	// HubNamespaces are the hub namespaces (globs) whose MyApps this policy
	// applies to.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[-a-z0-9*?]+$`
	HubNamespaces []string `json:"hubNamespaces"`
	// MemberNamespaces are the member namespaces (globs) those MyApps may
	// place into, besides their own namespace.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[-a-z0-9*?]+$`
	MemberNamespaces []string `json:"memberNamespaces"`
	// PodSecurity is the Pod Security Admission level an agent enforces on
	// the member namespaces it creates for these MyApps. Empty: the
	// agent's default (baseline). When several policies match, the
	// strictest level wins.
	// +optional
	PodSecurity PodSecurityLevel `json:"podSecurity,omitempty"`
}

// FleetNamespacePolicy is an admin-owned, cluster-scoped grant: which member
// namespaces the MyApps of which hub namespaces may place into. Only fleet
// admins should be able to write it; tenants never get RBAC on it.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=fnp,categories=flotilla
// +kubebuilder:printcolumn:name="Hub",type=string,JSONPath=`.spec.hubNamespaces`
// +kubebuilder:printcolumn:name="Member",type=string,JSONPath=`.spec.memberNamespaces`
// +kubebuilder:printcolumn:name="PodSecurity",type=string,JSONPath=`.spec.podSecurity`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type FleetNamespacePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec FleetNamespacePolicySpec `json:"spec"`
}

// FleetNamespacePolicyList is a list of FleetNamespacePolicies.
// +kubebuilder:object:root=true
type FleetNamespacePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []FleetNamespacePolicy `json:"items"`
}
