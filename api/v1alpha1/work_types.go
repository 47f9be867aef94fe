package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// WorkSpec is what one member must run for one MyApp.
type WorkSpec struct {
	// Manifests are the objects to apply in the member: the app's
	// Deployment and, with spec.service, its Service.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Manifests []Manifest `json:"manifests"`
	// DeletionPolicy is what the agent does with the member objects when
	// the Work is deleted or pruned, or an object is dropped from it:
	// Delete (the default) or Orphan (release them). The hub renders it
	// from the MyApp's policy and, while the cluster drains, the
	// MemberCluster's. The agent records it with the applied set, so a
	// prune after a restart still honours it.
	// +kubebuilder:default=Delete
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
	// PodSecurity is the Pod Security Admission level the agent enforces
	// on a member namespace it creates for this Work's objects. The hub
	// renders it from the FleetNamespacePolicies that match the MyApp's
	// namespace; empty means the agent's default (baseline). A namespace
	// that already exists is left as it is.
	// +optional
	PodSecurity PodSecurityLevel `json:"podSecurity,omitempty"`
	// Health is what the agent evaluates for the app's health shift.
	// +optional
	Health *WorkHealth `json:"health,omitempty"`
}

// Manifest is one Kubernetes object to apply.
type Manifest struct {
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:EmbeddedResource
	runtime.RawExtension `json:",inline"`
}

// WorkStatus is what the member's agent reports.
type WorkStatus struct {
	// ObservedGeneration is the Work generation the agent last applied.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Applied, Available, Progressing and Degraded. The hub
	// writes at most these four (see pkg/sync, Bounded input); the schema
	// bound holds even for a write that bypasses the hub.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Manifests reports each applied object, at most one per manifest of
	// the spec.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Manifests []ManifestStatus `json:"manifests,omitempty"`
	// Health is the last evaluation of each signal of spec.health.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=4
	Health []SignalStatus `json:"health,omitempty"`
	// LastReportTime is when the hub wrote the agent's last report that
	// changed this status (a report that changes nothing, as agents send
	// on every reconnect, is not written).
	// +optional
	LastReportTime *metav1.Time `json:"lastReportTime,omitempty"`
}

// ResourceIdentifier names one object in a member.
type ResourceIdentifier struct {
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Version string `json:"version,omitempty"`
	// +kubebuilder:validation:MaxLength=253
	Kind string `json:"kind"`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ManifestStatus is the state of one applied object.
type ManifestStatus struct {
	ResourceIdentifier `json:",inline"`
	// Conditions of the object as the agent sees it.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Workload holds replica counts for objects that have them.
	// +optional
	Workload *WorkloadStatus `json:"workload,omitempty"`
	// Endpoints counts a Service's endpoints, from its EndpointSlices.
	// +optional
	Endpoints *EndpointsStatus `json:"endpoints,omitempty"`
}

// EndpointsStatus counts the endpoints of a Service in one member.
type EndpointsStatus struct {
	// Ready endpoints: pods the Service sends traffic to.
	// +kubebuilder:validation:Minimum=0
	Ready int32 `json:"ready"`
	// NotReady endpoints: pods it selects that are not ready (starting,
	// failing their readiness probe, terminating).
	// +kubebuilder:validation:Minimum=0
	NotReady int32 `json:"notReady"`
}

// WorkloadStatus holds a Deployment's own status numbers.
type WorkloadStatus struct {
	// ObservedGeneration is the member object's status.observedGeneration.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Generation is the member object's metadata.generation.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +optional
	UnavailableReplicas int32 `json:"unavailableReplicas,omitempty"`
}

// Work is what one member must run for one MyApp. It lives in the hub
// namespace flotilla-cluster-<member>.
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=flotilla
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Applied",type=string,JSONPath=`.status.conditions[?(@.type=="Applied")].status`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Work struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   WorkSpec   `json:"spec"`
	Status WorkStatus `json:"status,omitempty"`
}

// WorkList is a list of Works.
// +kubebuilder:object:root=true
type WorkList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Work `json:"items"`
}
