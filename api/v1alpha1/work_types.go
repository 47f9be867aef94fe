package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// WorkSpec is what one member must run for one MyApp.
type WorkSpec struct {
	// Manifests are the objects to apply in the member, today one
	// Deployment.
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
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Applied, Available, Progressing and Degraded.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Manifests reports each applied object.
	// +optional
	Manifests []ManifestStatus `json:"manifests,omitempty"`
	// LastReportTime is when the agent last reported.
	// +optional
	LastReportTime *metav1.Time `json:"lastReportTime,omitempty"`
}

// ResourceIdentifier names one object in a member.
type ResourceIdentifier struct {
	// +optional
	Group string `json:"group,omitempty"`
	// +optional
	Version string `json:"version,omitempty"`
	Kind    string `json:"kind"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// ManifestStatus is the state of one applied object.
type ManifestStatus struct {
	ResourceIdentifier `json:",inline"`
	// Conditions of the object as the agent sees it.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Workload holds replica counts for objects that have them.
	// +optional
	Workload *WorkloadStatus `json:"workload,omitempty"`
}

// WorkloadStatus holds a Deployment's own status numbers.
type WorkloadStatus struct {
	// ObservedGeneration is the member object's status.observedGeneration.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Generation is the member object's metadata.generation.
	// +optional
	Generation int64 `json:"generation,omitempty"`
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`
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
