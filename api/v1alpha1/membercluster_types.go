package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SyncMode is how a member receives its Works.
// +kubebuilder:validation:Enum=Pull;Push
type SyncMode string

const (
	// SyncModePull: an agent in the member holds a gRPC stream to the hub
	// and applies the member's Works itself.
	SyncModePull SyncMode = "Pull"
	// SyncModePush: no agent; the hub leader reaches the member's apiserver
	// with the kubeconfig in spec.push.kubeconfigSecretRef and applies the
	// Works itself, under the same rules as an agent.
	SyncModePush SyncMode = "Push"
)

// PushSpec says how the hub reaches a Push member.
type PushSpec struct {
	// KubeconfigSecretRef names the Secret, in the hub's own namespace
	// (flotilla-system), whose key holds a kubeconfig for the member. Its
	// current context is used; its identity needs the rights the agent's
	// RBAC in deploy/agent grants. A changed Secret is picked up within
	// seconds, without a restart.
	KubeconfigSecretRef SecretKeyRef `json:"kubeconfigSecretRef"`
	// PrometheusURL is the member's Prometheus, which the hub queries for
	// the Prometheus signals of MyApps' spec.placement.healthShift (an
	// agent does this for a Pull member, with its --prometheus-url).
	// Empty makes those signals Unknown, so nothing shifts on them.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	// +optional
	PrometheusURL string `json:"prometheusURL,omitempty"`
}

// SecretKeyRef names a key of a Secret in the hub's own namespace.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key in the Secret's data (default kubeconfig).
	// +kubebuilder:default=kubeconfig
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// MemberClusterSpec describes a member cluster.
// +kubebuilder:validation:XValidation:rule="!has(self.syncMode) || self.syncMode != 'Push' || has(self.push)",message="spec.push.kubeconfigSecretRef is required when spec.syncMode is Push: name the Secret in the hub's namespace that holds the member's kubeconfig"
type MemberClusterSpec struct {
	// Provider is the cloud or platform, e.g. aws, gcp, onprem.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Provider string `json:"provider,omitempty"`
	// Region is the cluster's region.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Region string `json:"region,omitempty"`
	// Zone is the cluster's zone.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Zone string `json:"zone,omitempty"`
	// Taints keep apps without a matching toleration away. The hub manages
	// the flotilla.dev/unreachable taint itself.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Taints []corev1.Taint `json:"taints,omitempty"`
	// SyncMode is Pull (the default: the member's agent connects to the
	// hub) or Push (no agent: the hub applies the member's Works through
	// the kubeconfig named by spec.push). Switching keeps what runs: both
	// modes apply with the same field owner and keep the same applied-set
	// records in the member.
	// +kubebuilder:default=Pull
	// +optional
	SyncMode SyncMode `json:"syncMode,omitempty"`
	// Push says how the hub reaches the member in Push mode; required
	// then, ignored in Pull mode.
	// +optional
	Push *PushSpec `json:"push,omitempty"`
	// DeletionPolicy says what happens to the workloads in the member when
	// this MemberCluster is deleted. The hub first drains it (replicas move
	// to other members, as in a graceful failover); then the member's
	// copies are deleted only with Delete, and kept running, released from
	// Flotilla, with Orphan (the default: removing a cluster from the fleet
	// should not take down what runs in it). A MyApp's own Orphan policy
	// wins over Delete.
	// +kubebuilder:default=Orphan
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
	// RevokedCertificates are the SHA-256 fingerprints (lower-case hex of
	// the DER certificate) of agent client certificates the hub refuses
	// for this cluster, although they chain to the agent CA and have not
	// expired: a stolen or leaked certificate is revoked by adding it
	// here. A stream that presented one is closed at once. It is spec
	// because it is an admin's decision, not something the hub observes.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Pattern=`^[0-9a-f]{64}$`
	RevokedCertificates []string `json:"revokedCertificates,omitempty"`
	// Acceptance is the hub's half of the double opt-in of a joining
	// cluster: only an Accepted member gets a certificate, a stream and
	// replicas. A MemberCluster an admin creates is Accepted (the
	// default); one created by a join with a token that does not
	// auto-accept starts Pending until `kubectl flotilla accept`. Denied
	// revokes the cluster's identity: its stream is closed, its
	// certificate requests are refused and its replicas move away.
	// +kubebuilder:default=Accepted
	// +optional
	Acceptance Acceptance `json:"acceptance,omitempty"`
}

// Acceptance says whether the hub lets a member into the fleet.
// +kubebuilder:validation:Enum=Accepted;Pending;Denied
type Acceptance string

const (
	// AcceptanceAccepted: the member is part of the fleet.
	AcceptanceAccepted Acceptance = "Accepted"
	// AcceptancePending: the member asked to join and waits for an admin.
	AcceptancePending Acceptance = "Pending"
	// AcceptanceDenied: the admin refused the member, or revoked it.
	AcceptanceDenied Acceptance = "Denied"
)

// IsPush says whether the hub applies mc's Works itself (spec.syncMode
// Push).
func (mc *MemberCluster) IsPush() bool { return mc.Spec.SyncMode == SyncModePush }

// IsAccepted says whether mc is in the fleet: Acceptance is Accepted, or
// empty (an object written before the field existed, or by a client that
// skipped the CRD's default).
func (mc *MemberCluster) IsAccepted() bool {
	return mc.Spec.Acceptance == "" || mc.Spec.Acceptance == AcceptanceAccepted
}

// MemberClusterStatus is the member as the hub last heard of it.
type MemberClusterStatus struct {
	// Conditions: Ready and Connected.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastHeartbeatTime is when the agent was last heard from.
	// +optional
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty"`
	// Agent describes the connected agent.
	// +optional
	Agent *AgentInfo `json:"agent,omitempty"`
	// KubernetesVersion is the member apiserver's version.
	// +optional
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// Resources summarises the member's capacity, for dynamic weighting.
	// +optional
	Resources *ResourceSummary `json:"resources,omitempty"`
}

// AgentInfo describes a member's agent.
type AgentInfo struct {
	// Version of the agent binary.
	// +optional
	Version string `json:"version,omitempty"`
	// Identity is the identity proven by its client certificate.
	// +optional
	Identity string `json:"identity,omitempty"`
	// Instance names the agent replica holding the stream (its pod or host).
	// +optional
	Instance string `json:"instance,omitempty"`
}

// ResourceSummary sums capacity over the member's Ready, schedulable nodes.
type ResourceSummary struct {
	// Allocatable is the nodes' allocatable cpu, memory and pods.
	// +optional
	Allocatable corev1.ResourceList `json:"allocatable,omitempty"`
	// Allocated is what the pods on those nodes request.
	// +optional
	Allocated corev1.ResourceList `json:"allocated,omitempty"`
	// Nodes is the number of nodes counted.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
}

// MemberCluster is one member cluster as the hub sees it. Its name is the
// cluster's identity: agents prove it with their client certificate.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=mc,categories=flotilla
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 46 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1123 label of at most 46 characters"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Connected",type=string,JSONPath=`.status.conditions[?(@.type=="Connected")].status`
// +kubebuilder:printcolumn:name="Region",type=string,JSONPath=`.spec.region`
// +kubebuilder:printcolumn:name="Zone",type=string,JSONPath=`.spec.zone`,priority=1
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.kubernetesVersion`,priority=1
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.lastHeartbeatTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MemberCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MemberClusterSpec   `json:"spec,omitempty"`
	Status MemberClusterStatus `json:"status,omitempty"`
}

// MemberClusterList is a list of MemberClusters.
// +kubebuilder:object:root=true
type MemberClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MemberCluster `json:"items"`
}
