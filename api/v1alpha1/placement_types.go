package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The placement vocabulary mirrors Karmada's PropagationPolicy so that its
// users feel at home: clusterAffinity, clusterAffinities, clusterTolerations,
// spreadConstraints and replicaScheduling mean what they mean there.

// Placement says which member clusters may run a MyApp and how its replicas
// are shared among them.
// +kubebuilder:validation:XValidation:rule="!(has(self.clusterAffinity) && has(self.clusterAffinities))",message="clusterAffinity and clusterAffinities are mutually exclusive"
type Placement struct {
	// ClusterAffinity selects the clusters that may run the app. Unset means
	// every member cluster.
	// +optional
	ClusterAffinity *ClusterAffinity `json:"clusterAffinity,omitempty"`

	// ClusterAffinities is an ordered list of affinity groups. The scheduler
	// uses the first group that yields a schedulable result and falls back
	// to the next one when it doesn't (for example when every cluster of the
	// primary group is lost). Mutually exclusive with clusterAffinity.
	// +optional
	// +listType=map
	// +listMapKey=affinityName
	// +kubebuilder:validation:MaxItems=16
	ClusterAffinities []ClusterAffinityTerm `json:"clusterAffinities,omitempty"`

	// ClusterTolerations let the app run on clusters with matching taints.
	// A NoExecute toleration with tolerationSeconds bounds how long replicas
	// stay on a tainted cluster. The unreachable taint is tolerated for
	// failover.clusterUnreachable.tolerationSeconds unless a toleration here
	// names it.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	ClusterTolerations []corev1.Toleration `json:"clusterTolerations,omitempty"`

	// SpreadConstraints bound how many groups (regions, zones, providers or
	// clusters) the app is spread over.
	// +optional
	// +listType=map
	// +listMapKey=spreadByField
	// +kubebuilder:validation:MaxItems=4
	SpreadConstraints []SpreadConstraint `json:"spreadConstraints,omitempty"`

	// ReplicaScheduling says how replicas are shared among the selected
	// clusters. Unset means Duplicated: every selected cluster runs
	// spec.replicas.
	// +optional
	ReplicaScheduling *ReplicaSchedulingStrategy `json:"replicaScheduling,omitempty"`

	// HealthShift moves replicas and traffic away from clusters where the
	// app is unhealthy or slow, and back when they recover.
	// +optional
	HealthShift *HealthShift `json:"healthShift,omitempty"`
}

// ClusterAffinity selects member clusters. A cluster is selected when it
// matches every field that is set and is not excluded.
type ClusterAffinity struct {
	// LabelSelector matches the MemberCluster's labels.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`

	// FieldSelector matches the MemberCluster's provider, region and zone.
	// +optional
	FieldSelector *FieldSelector `json:"fieldSelector,omitempty"`

	// ClusterNames lists the clusters by name.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=46
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ClusterNames []string `json:"clusterNames,omitempty"`

	// ExcludeClusters lists clusters that are never selected.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=46
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ExcludeClusters []string `json:"exclude,omitempty"`
}

// ClusterAffinityTerm is one named group of an ordered fallback list.
type ClusterAffinityTerm struct {
	// AffinityName names the group; the decision records which group is used.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	AffinityName string `json:"affinityName"`

	ClusterAffinity `json:",inline"`
}

// FieldSelector matches cluster fields.
type FieldSelector struct {
	// MatchExpressions are ANDed. Keys are provider, region or zone.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	MatchExpressions []FieldSelectorRequirement `json:"matchExpressions"`
}

// ClusterField names a field of a MemberCluster that selectors and spread
// constraints can use.
// +kubebuilder:validation:Enum=provider;region;zone
type ClusterField string

// The cluster fields a FieldSelector can match.
const (
	ClusterFieldProvider ClusterField = "provider"
	ClusterFieldRegion   ClusterField = "region"
	ClusterFieldZone     ClusterField = "zone"
)

// FieldSelectorRequirement is one expression of a FieldSelector.
// +kubebuilder:validation:XValidation:rule="self.operator in ['In', 'NotIn'] ? size(self.values) > 0 : size(self.values) == 0",message="values must be non-empty for In and NotIn and empty for Exists and DoesNotExist"
type FieldSelectorRequirement struct {
	// Key is the field: provider, region or zone.
	Key ClusterField `json:"key"`
	// Operator is In, NotIn, Exists or DoesNotExist.
	// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist
	Operator corev1.NodeSelectorOperator `json:"operator"`
	// Values for In and NotIn.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	Values []string `json:"values,omitempty"`
}

// SpreadByField is what a spread constraint groups clusters by.
// +kubebuilder:validation:Enum=cluster;region;zone;provider
type SpreadByField string

// The fields clusters can be spread by.
const (
	SpreadByFieldCluster  SpreadByField = "cluster"
	SpreadByFieldRegion   SpreadByField = "region"
	SpreadByFieldZone     SpreadByField = "zone"
	SpreadByFieldProvider SpreadByField = "provider"
)

// SpreadConstraint bounds the number of groups the app runs in.
// +kubebuilder:validation:XValidation:rule="!has(self.maxGroups) || !has(self.minGroups) || self.minGroups <= self.maxGroups",message="minGroups must be less than or equal to maxGroups"
type SpreadConstraint struct {
	// SpreadByField groups clusters by cluster, region, zone or provider.
	SpreadByField SpreadByField `json:"spreadByField"`
	// MinGroups is the least number of groups to use; when fewer are
	// eligible the app is unschedulable and the status says why.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MinGroups *int32 `json:"minGroups,omitempty"`
	// MaxGroups is the most groups to use.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxGroups *int32 `json:"maxGroups,omitempty"`
}

// ReplicaSchedulingType is Duplicated or Divided.
// +kubebuilder:validation:Enum=Duplicated;Divided
type ReplicaSchedulingType string

// The replica scheduling types.
const (
	// ReplicaSchedulingDuplicated runs spec.replicas in every selected
	// cluster.
	ReplicaSchedulingDuplicated ReplicaSchedulingType = "Duplicated"
	// ReplicaSchedulingDivided shares spec.replicas among the selected
	// clusters; the parts always sum to spec.replicas.
	ReplicaSchedulingDivided ReplicaSchedulingType = "Divided"
)

// ReplicaDivisionPreference says how Divided replicas are shared.
// +kubebuilder:validation:Enum=Aggregated;Weighted
type ReplicaDivisionPreference string

// The division preferences.
const (
	// ReplicaDivisionAggregated packs replicas into as few clusters as
	// possible, the roomiest first.
	ReplicaDivisionAggregated ReplicaDivisionPreference = "Aggregated"
	// ReplicaDivisionWeighted shares replicas by weights.
	ReplicaDivisionWeighted ReplicaDivisionPreference = "Weighted"
)

// DynamicWeightFactor names where dynamic weights come from.
// +kubebuilder:validation:Enum=AvailableReplicas
type DynamicWeightFactor string

// DynamicWeightAvailableReplicas weighs each cluster by how many more pods
// of the app's template it can take, from its resource summary.
const DynamicWeightAvailableReplicas DynamicWeightFactor = "AvailableReplicas"

// ReplicaSchedulingStrategy says how replicas are shared among clusters.
// +kubebuilder:validation:XValidation:rule="self.replicaSchedulingType == 'Divided' || !has(self.replicaDivisionPreference)",message="replicaDivisionPreference is only valid when replicaSchedulingType is Divided"
// +kubebuilder:validation:XValidation:rule="!has(self.weightPreference) || (has(self.replicaDivisionPreference) && self.replicaDivisionPreference == 'Weighted')",message="weightPreference is only valid when replicaDivisionPreference is Weighted"
type ReplicaSchedulingStrategy struct {
	// ReplicaSchedulingType is Duplicated (the default) or Divided.
	// +kubebuilder:default=Duplicated
	// +optional
	ReplicaSchedulingType ReplicaSchedulingType `json:"replicaSchedulingType,omitempty"`

	// ReplicaDivisionPreference applies when Divided: Aggregated or Weighted
	// (the default).
	// +optional
	ReplicaDivisionPreference ReplicaDivisionPreference `json:"replicaDivisionPreference,omitempty"`

	// WeightPreference applies when Weighted. Unset means equal weights.
	// +optional
	WeightPreference *ClusterPreferences `json:"weightPreference,omitempty"`
}

// ClusterPreferences gives weights, statically or from cluster capacity.
// +kubebuilder:validation:XValidation:rule="has(self.staticWeightList) != has(self.dynamicWeight)",message="exactly one of staticWeightList and dynamicWeight must be set"
type ClusterPreferences struct {
	// StaticWeightList gives clusters fixed weights. A selected cluster
	// that no entry matches gets no replicas.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1000
	StaticWeightList []StaticClusterWeight `json:"staticWeightList,omitempty"`

	// DynamicWeight derives weights from the clusters' capacity.
	// +optional
	DynamicWeight DynamicWeightFactor `json:"dynamicWeight,omitempty"`
}

// StaticClusterWeight gives the clusters an affinity matches one weight.
type StaticClusterWeight struct {
	// TargetCluster selects the clusters this weight applies to.
	TargetCluster ClusterAffinity `json:"targetCluster"`
	// Weight is at least 1.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	Weight int64 `json:"weight"`
}
