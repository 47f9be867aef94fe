package v1alpha1

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// MyAppSpec is what the user wants to run and where.
// +kubebuilder:validation:XValidation:rule="!has(self.progressDeadlineSeconds) || self.progressDeadlineSeconds > (has(self.minReadySeconds) ? self.minReadySeconds : 0)",message="progressDeadlineSeconds must be greater than minReadySeconds"
type MyAppSpec struct {
	// Image is the container image, e.g. registry.example.com/team/web:1.2.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.matches('\\\\s')",message="image must not contain white space"
	Image string `json:"image"`

	// Replicas is the total number of replicas when Divided, or the number
	// per cluster when Duplicated.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Template is the pod template of the member Deployments: metadata
	// and a full pod spec, as in a Deployment. spec.image is the image of
	// its main container. The pods' resource requests drive dynamic
	// weighting.
	// +optional
	Template *PodTemplate `json:"template,omitempty"`

	// MainContainer names the container of spec.template.spec that runs
	// spec.image and that image, env and resources overrides change; the
	// first container when unset.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	MainContainer string `json:"mainContainer,omitempty"`

	// Strategy is the member Deployments' update strategy, passed through
	// as it is: RollingUpdate (the default, with maxSurge and
	// maxUnavailable) or Recreate. It says how each member replaces its
	// pods; spec.rollout says how a change reaches the members.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.type) || self.type in ['RollingUpdate', 'Recreate']",message="type must be RollingUpdate or Recreate"
	// +kubebuilder:validation:XValidation:rule="!has(self.type) || self.type != 'Recreate' || !has(self.rollingUpdate)",message="rollingUpdate may not be set when type is Recreate"
	// +kubebuilder:validation:XValidation:rule="!has(self.rollingUpdate) || !has(self.rollingUpdate.maxSurge) || (type(self.rollingUpdate.maxSurge) == int ? self.rollingUpdate.maxSurge >= 0 : self.rollingUpdate.maxSurge.matches('^[0-9]+%$'))",message="rollingUpdate.maxSurge must be a count of at least 0 or a percentage"
	// +kubebuilder:validation:XValidation:rule="!has(self.rollingUpdate) || !has(self.rollingUpdate.maxUnavailable) || (type(self.rollingUpdate.maxUnavailable) == int ? self.rollingUpdate.maxUnavailable >= 0 : self.rollingUpdate.maxUnavailable.matches('^[0-9]%$|^[1-9][0-9]%$|^100%$'))",message="rollingUpdate.maxUnavailable must be a count of at least 0 or a percentage from 0% to 100%"
	// +kubebuilder:validation:XValidation:rule="!has(self.rollingUpdate) || !has(self.rollingUpdate.maxSurge) || !has(self.rollingUpdate.maxUnavailable) || !(string(self.rollingUpdate.maxSurge) in ['0', '0%'] && string(self.rollingUpdate.maxUnavailable) in ['0', '0%'])",message="rollingUpdate.maxSurge and rollingUpdate.maxUnavailable may not both be 0"
	Strategy *appsv1.DeploymentStrategy `json:"strategy,omitempty"`

	// MinReadySeconds is how long a new pod must be ready, with none of
	// its containers crashing, before it counts as available in a member
	// (the Deployment's field; 0 by default).
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinReadySeconds *int32 `json:"minReadySeconds,omitempty"`

	// ProgressDeadlineSeconds is how long a member Deployment may take to
	// make progress before it reports Progressing False (the Deployment's
	// field; 600 by default). It must be greater than minReadySeconds.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ProgressDeadlineSeconds *int32 `json:"progressDeadlineSeconds,omitempty"`

	// RevisionHistoryLimit is how many old ReplicaSets each member keeps
	// for rollback (the Deployment's field; 10 by default).
	// +optional
	// +kubebuilder:validation:Minimum=0
	RevisionHistoryLimit *int32 `json:"revisionHistoryLimit,omitempty"`

	// Service, when set, gives the app a Service in every member it runs
	// in, of the same name and namespace as its Deployment, selecting its
	// pods.
	// +optional
	Service *ServiceSpec `json:"service,omitempty"`

	// RolloutOnConfigChange, on by default, rolls the app's pods when a
	// ConfigMap or Secret they use changes on the hub: the pod template in
	// the members carries a hash of their content
	// (flotilla.dev/config-hash). Off, the members get the new content and
	// the pods keep running until something else rolls them (mounted
	// volumes still see the change; environment variables do not).
	// +optional
	// +kubebuilder:default=true
	RolloutOnConfigChange *bool `json:"rolloutOnConfigChange,omitempty"`

	// TargetNamespace is the namespace in each member that the Deployment is
	// created in; it defaults to the MyApp's own namespace.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// Placement says which clusters may run the app and how replicas are
	// shared among them.
	// +optional
	Placement Placement `json:"placement,omitempty"`

	// Traffic says where the effective traffic weights go besides
	// status.traffic (see spec.placement.healthShift).
	// +optional
	Traffic *TrafficSpec `json:"traffic,omitempty"`

	// Overrides change the rendered Deployment for the clusters they select,
	// applied in list order after scheduling.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Overrides []ClusterOverride `json:"overrides,omitempty"`

	// Failover says what happens to replicas on a cluster that is lost and
	// whether they come back when it recovers.
	// +optional
	Failover *FailoverPolicy `json:"failover,omitempty"`

	// Rollout says how a change to what runs reaches the clusters.
	// +optional
	Rollout *RolloutPolicy `json:"rollout,omitempty"`

	// DeletionPolicy says what happens in the members to the objects of a
	// Work the hub removes (the MyApp deleted, a cluster descheduled):
	// Delete removes them; Orphan leaves them running and takes Flotilla's
	// labels and field ownership off them, so nothing of Flotilla's
	// touches them again.
	// +kubebuilder:default=Delete
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// ServiceSpec is the Service each member gets for the app.
type ServiceSpec struct {
	// Type is ClusterIP (the default), NodePort or LoadBalancer.
	// +kubebuilder:default=ClusterIP
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	// +optional
	Type corev1.ServiceType `json:"type,omitempty"`
	// Ports the Service exposes.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=port
	// +listMapKey=protocol
	Ports []ServicePort `json:"ports"`
	// Annotations are set on the Service, e.g. for a cloud's load
	// balancer.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ServicePort is one port of the app's Service.
// +kubebuilder:validation:XValidation:rule="!has(self.targetPort) || type(self.targetPort) != int || (self.targetPort >= 1 && self.targetPort <= 65535)",message="targetPort must be a port number from 1 to 65535 or a container port's name"
type ServicePort struct {
	// Name of the port; required when the Service has more than one.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`
	// Protocol is TCP (the default), UDP or SCTP.
	// +kubebuilder:default=TCP
	// +kubebuilder:validation:Enum=TCP;UDP;SCTP
	// +optional
	Protocol corev1.Protocol `json:"protocol,omitempty"`
	// Port is the Service's port.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// TargetPort is the pods' port, a number or a container port's name;
	// the same as port when unset.
	// +optional
	// +kubebuilder:validation:XIntOrString
	TargetPort *intstr.IntOrString `json:"targetPort,omitempty"`
}

// DeletionPolicy is what happens to member objects Flotilla stops managing.
// +kubebuilder:validation:Enum=Delete;Orphan
type DeletionPolicy string

const (
	// DeletionPolicyDelete: the member objects are deleted.
	DeletionPolicyDelete DeletionPolicy = "Delete"
	// DeletionPolicyOrphan: the member objects keep running, released
	// (Flotilla's labels, annotation and field ownership removed).
	DeletionPolicyOrphan DeletionPolicy = "Orphan"
)

// PodTemplate is the pod template of the member Deployments: metadata and
// spec have the shape of a Deployment's spec.template. spec.image is
// always the main container's image.
//
// The fields of the first version (labels, annotations, command, args,
// ports, env, resources) still work: without spec they describe one
// container named "app"; with spec, labels and annotations are added to
// the pods and the container fields may not be set (set them on the
// container).
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !(has(self.command) || has(self.args) || has(self.ports) || has(self.env))",message="command, args, ports and env describe the one container of a template without spec; with spec, set them on the container in spec.containers"
type PodTemplate struct {
	// Metadata holds the pods' labels and annotations (the selector
	// labels always win).
	// +optional
	Metadata *PodTemplateMetadata `json:"metadata,omitempty"`
	// Spec is the pods' spec, as in a Deployment: containers (one of them
	// the main container, which runs spec.image and must not name an
	// image of its own), init containers, volumes, probes, security
	// context, service account, node selector, tolerations and the rest.
	// +optional
	Spec *corev1.PodSpec `json:"spec,omitempty"`

	// Labels are added to the pods (first-version field; metadata.labels
	// wins for the same key).
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations are added to the pods (first-version field;
	// metadata.annotations wins for the same key).
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
	// Command overrides the image's entrypoint (first-version field, only
	// without spec).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Command []string `json:"command,omitempty"`
	// Args are the container's arguments (first-version field, only
	// without spec).
	// +optional
	// +kubebuilder:validation:MaxItems=256
	Args []string `json:"args,omitempty"`
	// Ports the container listens on (first-version field, only without
	// spec).
	// +optional
	// +listType=map
	// +listMapKey=containerPort
	// +listMapKey=protocol
	// +kubebuilder:validation:MaxItems=64
	Ports []corev1.ContainerPort `json:"ports,omitempty"`
	// Env sets environment variables (first-version field, only without
	// spec).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Env []corev1.EnvVar `json:"env,omitempty"`
	// Resources are the container's requests and limits (first-version
	// field, only without spec).
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
}

// PodTemplateMetadata is the part of a pod's metadata a template sets.
type PodTemplateMetadata struct {
	// Labels are added to the pods (the selector labels always win).
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations are added to the pods.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ClusterOverride changes the rendered Deployment for some clusters.
// +kubebuilder:validation:XValidation:rule="has(self.image) || has(self.replicas) || has(self.env) || has(self.resources) || has(self.nodeSelector) || has(self.tolerations) || has(self.patches)",message="an override must set at least one of image, replicas, env, resources, nodeSelector, tolerations and patches"
type ClusterOverride struct {
	// Name identifies the override in the list.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// TargetCluster selects the clusters the override applies to.
	TargetCluster ClusterAffinity `json:"targetCluster"`
	// Image replaces parts of the image reference.
	// +optional
	Image *ImageOverride `json:"image,omitempty"`
	// Replicas replaces the number of replicas the scheduler assigned to
	// each selected cluster.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	Replicas *int32 `json:"replicas,omitempty"`
	// Env variables are set (replacing ones of the same name) in the
	// selected clusters.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Env []corev1.EnvVar `json:"env,omitempty"`
	// Resources replace, per resource name, the main container's
	// requests and limits in the selected clusters (a later override's
	// value wins), e.g. more memory where the traffic is. Dynamic
	// weighting divides each cluster's spare capacity by the requests its
	// pods will make there.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// NodeSelector labels are added to the pods' node selector in the
	// selected clusters (a later override's value wins for the same key),
	// e.g. to run on a cluster's GPU nodes.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations are added to the pods' tolerations in the selected
	// clusters, e.g. for a cluster whose nodes are tainted for this team.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// Patches are JSON patch operations (RFC 6902) applied in order to the
	// Deployment rendered for the selected clusters, after the typed
	// fields above: they reach any field, e.g.
	// /spec/template/spec/nodeSelector. Paths must lie in /spec or in
	// /metadata/labels or /metadata/annotations, and not in /spec/selector
	// or /spec/replicas (use replicas); the result must still be a
	// Deployment whose pods carry the labels it selects. The webhook
	// checks each patch against the app's rendered Deployment.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Patches []JSONPatch `json:"patches,omitempty"`
}

// JSONPatchOp is a JSON patch operation Flotilla applies.
// +kubebuilder:validation:Enum=add;remove;replace
type JSONPatchOp string

const (
	JSONPatchAdd     JSONPatchOp = "add"
	JSONPatchRemove  JSONPatchOp = "remove"
	JSONPatchReplace JSONPatchOp = "replace"
)

// JSONPatch is one JSON patch operation on a rendered Deployment. (That
// add and replace need a value and remove takes none is checked by the
// webhook: CEL cannot see a schemaless field.)
type JSONPatch struct {
	// Op is add, remove or replace.
	Op JSONPatchOp `json:"op"`
	// Path is a JSON pointer into the Deployment, e.g.
	// /spec/template/spec/containers/0/livenessProbe.
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^/`
	Path string `json:"path"`
	// Value is what add and replace put at the path; remove takes none.
	// +optional
	Value *apiextensionsv1.JSON `json:"value,omitempty"`
}

// ImageOverride replaces parts of an image reference
// [registry/]repository[:tag].
// +kubebuilder:validation:XValidation:rule="has(self.registry) || has(self.repository) || has(self.tag)",message="an image override must set at least one of registry, repository and tag"
type ImageOverride struct {
	// Registry replaces the registry host (and port), e.g. mirror.example.com.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([-a-zA-Z0-9.]*[a-zA-Z0-9])?(:[0-9]+)?$`
	Registry string `json:"registry,omitempty"`
	// Repository replaces the repository path, e.g. team/web.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:Pattern=`^[a-z0-9]+([._/-][a-z0-9]+)*$`
	Repository string `json:"repository,omitempty"`
	// Tag replaces the tag.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`
	Tag string `json:"tag,omitempty"`
}

// PurgeMode says how an evicted cluster's replicas are removed.
// +kubebuilder:validation:Enum=Immediately;Graciously;Never
type PurgeMode string

// The purge modes.
const (
	// PurgeImmediately deletes the evicted cluster's Work at once.
	PurgeImmediately PurgeMode = "Immediately"
	// PurgeGraciously keeps the evicted cluster's Work until the replacement
	// replicas are available elsewhere, or gracePeriodSeconds pass.
	PurgeGraciously PurgeMode = "Graciously"
	// PurgeNever keeps the evicted cluster's Work; replacements are added
	// elsewhere and a person cleans up.
	PurgeNever PurgeMode = "Never"
)

// FailoverPolicy says what happens to replicas on a lost cluster and
// whether they return when it recovers.
type FailoverPolicy struct {
	// ClusterUnreachable governs clusters whose agent stops heartbeating.
	// +optional
	ClusterUnreachable *ClusterFailover `json:"clusterUnreachable,omitempty"`
	// Failback governs the return of replicas to a recovered cluster.
	// +optional
	Failback *FailbackPolicy `json:"failback,omitempty"`
}

// ClusterFailover governs failover from unreachable clusters.
type ClusterFailover struct {
	// TolerationSeconds is how long replicas stay on a cluster after it is
	// tainted unreachable before they are moved. 0 moves them at once.
	// The hub taints a cluster after its heartbeat grace period (14s by
	// default), so replicas move grace + toleration after the last
	// heartbeat.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	TolerationSeconds *int32 `json:"tolerationSeconds,omitempty"`
	// PurgeMode says how the lost cluster's replicas are removed.
	// +kubebuilder:default=Graciously
	// +optional
	PurgeMode PurgeMode `json:"purgeMode,omitempty"`
	// GracePeriodSeconds bounds how long a Graciously purged Work is kept
	// waiting for its replacements.
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	GracePeriodSeconds *int32 `json:"gracePeriodSeconds,omitempty"`
}

// FailbackPolicy governs the return of replicas to a recovered cluster.
type FailbackPolicy struct {
	// Enabled returns replicas to a cluster they were evicted from once it
	// has been Ready for the stabilization window.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// StabilizationWindowSeconds is how long a recovered cluster must stay
	// Ready before replicas return; a cluster that flaps restarts the wait.
	// +kubebuilder:default=30
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	StabilizationWindowSeconds *int32 `json:"stabilizationWindowSeconds,omitempty"`
}

// RolloutStrategyType names how changes reach the clusters.
// +kubebuilder:validation:Enum=All;Progressive
type RolloutStrategyType string

// The rollout strategies.
const (
	// RolloutAll updates every cluster at once.
	RolloutAll RolloutStrategyType = "All"
	// RolloutProgressive updates clusters in waves, in order, and stops by
	// itself when too many fail.
	RolloutProgressive RolloutStrategyType = "Progressive"
)

// RolloutFailureAction is what a Progressive rollout does when more
// clusters failed than it tolerates.
// +kubebuilder:validation:Enum=Pause;Rollback
type RolloutFailureAction string

// The failure actions.
const (
	// RolloutFailurePause stops the rollout: clusters not yet updated keep
	// the last good revision, updated ones keep the new one.
	RolloutFailurePause RolloutFailureAction = "Pause"
	// RolloutFailureRollback stops the rollout and returns the updated
	// clusters to the last good revision.
	RolloutFailureRollback RolloutFailureAction = "Rollback"
)

// RolloutPolicy says how a change to what runs (the image, the pod
// template, image or env overrides: a new revision) reaches the clusters.
// Replica changes and failover / failback moves are not rollouts: they
// apply at once whatever the policy.
type RolloutPolicy struct {
	// Strategy is All (every cluster at once, the default) or Progressive.
	// +kubebuilder:default=All
	// +optional
	Strategy RolloutStrategyType `json:"strategy,omitempty"`
	// Paused holds a rollout where it stands: no cluster starts updating
	// until it is false again.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// Progressive configures the Progressive strategy; unset means its
	// defaults.
	// +optional
	Progressive *ProgressiveRollout `json:"progressive,omitempty"`
}

// ProgressiveRollout updates clusters in waves.
type ProgressiveRollout struct {
	// MaxConcurrency is how many clusters may update at once: a count, or
	// a percentage of the target clusters (rounded down, at least 1).
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^[1-9][0-9]?%$|^100%$')",message="must be a count of at least 1 or a percentage from 1% to 100%"
	// +optional
	MaxConcurrency *intstr.IntOrString `json:"maxConcurrency,omitempty"`
	// Order lists groups of clusters updated in order: every cluster of a
	// group succeeds before the next group starts, so a canary cluster or
	// region can go first. Clusters in no group come last, by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Order []RolloutGroup `json:"order,omitempty"`
	// MinSuccessTime is how long a cluster must stay updated and
	// available before it counts as succeeded.
	// +kubebuilder:default="0s"
	// +optional
	MinSuccessTime *metav1.Duration `json:"minSuccessTime,omitempty"`
	// ProgressDeadline is how long a cluster may take to succeed before it
	// counts as failed.
	// +kubebuilder:default="10m"
	// +optional
	ProgressDeadline *metav1.Duration `json:"progressDeadline,omitempty"`
	// MaxFailures is how many clusters may fail before the rollout stops:
	// a count or a percentage of the target clusters.
	// +kubebuilder:default=0
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^[0-9][0-9]?%$|^100%$')",message="must be a count of at least 0 or a percentage from 0% to 100%"
	// +optional
	MaxFailures *intstr.IntOrString `json:"maxFailures,omitempty"`
	// OnFailure is what happens when more than maxFailures clusters
	// failed: Pause (the default) or Rollback.
	// +kubebuilder:default=Pause
	// +optional
	OnFailure RolloutFailureAction `json:"onFailure,omitempty"`
}

// RolloutGroup is one group of an ordered rollout.
type RolloutGroup struct {
	// Name of the group, e.g. canary.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Clusters selects the group's clusters (names, labels or fields).
	Clusters ClusterAffinity `json:"clusters"`
}

// RolloutPhase says where a rollout stands.
type RolloutPhase string

// The rollout phases.
const (
	RolloutPhaseProgressing RolloutPhase = "Progressing"
	RolloutPhasePaused      RolloutPhase = "Paused"
	RolloutPhaseFailed      RolloutPhase = "Failed"
	RolloutPhaseRolledBack  RolloutPhase = "RolledBack"
	RolloutPhaseComplete    RolloutPhase = "Complete"
)

// ClusterRolloutPhase says where one cluster stands in a rollout.
type ClusterRolloutPhase string

// The per-cluster rollout phases.
const (
	ClusterRolloutPending   ClusterRolloutPhase = "Pending"
	ClusterRolloutUpdating  ClusterRolloutPhase = "Updating"
	ClusterRolloutSucceeded ClusterRolloutPhase = "Succeeded"
	ClusterRolloutFailed    ClusterRolloutPhase = "Failed"
)

// RolloutStatus is where a Progressive rollout stands. All of its state is
// here, so a hub that restarts mid-rollout continues where it stood.
type RolloutStatus struct {
	// CurrentRevision is the last good revision: what clusters not yet
	// updated run, and what a rollback returns to.
	// +optional
	CurrentRevision string `json:"currentRevision,omitempty"`
	// TargetRevision is the revision being rolled out.
	// +optional
	TargetRevision string `json:"targetRevision,omitempty"`
	// Phase is Progressing, Paused, Failed, RolledBack or Complete.
	// +optional
	Phase RolloutPhase `json:"phase,omitempty"`
	// Message says why, in a sentence.
	// +optional
	Message string `json:"message,omitempty"`
	// Progress is "<succeeded>/<target clusters>", for kubectl get.
	// +optional
	Progress string `json:"progress,omitempty"`
	// Clusters has one entry per target cluster.
	// +optional
	// +listType=map
	// +listMapKey=name
	Clusters []ClusterRolloutStatus `json:"clusters,omitempty"`
	// Revisions hold what each revision in use runs (at most the current
	// and the target), so clusters can be rendered at either.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=3
	Revisions []RevisionTemplate `json:"revisions,omitempty"`
}

// ClusterRolloutStatus is one cluster in a rollout.
type ClusterRolloutStatus struct {
	// Name of the MemberCluster.
	Name string `json:"name"`
	// Revision the cluster's Work renders.
	Revision string `json:"revision"`
	// Phase is Pending, Updating, Succeeded or Failed.
	Phase ClusterRolloutPhase `json:"phase"`
	// Message is the member's message when it failed.
	// +optional
	Message string `json:"message,omitempty"`
	// StartTime is when the cluster started updating.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// AvailableTime is when it was first updated and available.
	// +optional
	AvailableTime *metav1.Time `json:"availableTime,omitempty"`
}

// RevisionTemplate is what one revision runs.
type RevisionTemplate struct {
	// Name is the revision: a hash of what follows.
	Name string `json:"name"`
	// Image, Template and Overrides are the MyApp's at that revision
	// (override replicas are not part of a revision and are ignored here).
	Image string `json:"image"`
	// Template is stored without a schema: the hub reads it back only
	// when the digest verifies.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Template *PodTemplate `json:"template,omitempty"`
	// MainContainer is the MyApp's spec.mainContainer at that revision.
	// +optional
	MainContainer string `json:"mainContainer,omitempty"`
	// +optional
	Overrides []ClusterOverride `json:"overrides,omitempty"`
	// Digest is an HMAC-SHA256 (hex) of the name and content above under
	// the hub's secret revision key. The hub renders a template it reads
	// back from status only when the digest verifies, so whoever may write
	// myapps/status still cannot make the hub run a pod spec of their own.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Digest string `json:"digest,omitempty"`
}

// MyAppStatus is what the hub decided and what the members report.
type MyAppStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Scheduled, Applied, Available, Progressing, Degraded and
	// Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Placement is the scheduler's current decision. It feeds the next one,
	// which keeps decisions stable.
	// +optional
	Placement *PlacementDecision `json:"placement,omitempty"`

	// Clusters has one entry per cluster that runs, or is losing, replicas.
	// +optional
	// +listType=map
	// +listMapKey=name
	Clusters []ClusterAppStatus `json:"clusters,omitempty"`

	// DesiredReplicas is the sum over clusters of the assigned replicas.
	// Written also when 0, so that a MyApp scaled to zero shows 0/0.
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas"`
	// ReadyReplicas is the sum of the members' ready replicas (written also
	// when 0).
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// AvailableReplicas is the sum of the members' available replicas.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// UpdatedReplicas is the sum of the members' updated replicas.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`
	// ClusterCount is the number of clusters the app is placed on.
	// +optional
	ClusterCount int32 `json:"clusterCount,omitempty"`

	// Rollout is where a Progressive rollout stands; unset with All.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`

	// Traffic is the effective split of replicas and traffic under
	// spec.placement.healthShift, and its last shifts. status.placement
	// keeps the scheduler's normal split.
	// +optional
	Traffic *TrafficStatus `json:"traffic,omitempty"`

	// Orphans lists the members that may still run objects of this app
	// although the hub removed its Work there: the member did not confirm
	// the deletion within the hub's --work-cleanup-timeout (it was
	// unreachable, or could not delete). An entry goes when the app runs
	// in that member again (its new Work adopts the objects).
	// +optional
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MaxItems=1000
	Orphans []OrphanedWork `json:"orphans,omitempty"`
}

// OrphanedWork is a member that may still run objects of a removed Work.
type OrphanedWork struct {
	// Cluster is the member.
	Cluster string `json:"cluster"`
	// Work is the removed Work's name.
	Work string `json:"work"`
	// Since is when the hub gave up waiting for the member.
	Since metav1.Time `json:"since"`
	// Message says why, for a person.
	// +optional
	Message string `json:"message,omitempty"`
}

// PlacementDecision is the outcome of scheduling.
type PlacementDecision struct {
	// Clusters are the target clusters and their replicas.
	// +optional
	// +listType=map
	// +listMapKey=name
	Clusters []TargetCluster `json:"clusters,omitempty"`
	// Evicted are clusters replicas were moved away from, kept so failback
	// knows where they belong and graceful eviction knows what to keep.
	// +optional
	// +listType=map
	// +listMapKey=name
	Evicted []EvictedCluster `json:"evicted,omitempty"`
	// AffinityName is the clusterAffinities group in use, if any.
	// +optional
	AffinityName string `json:"affinityName,omitempty"`
	// ScheduledGeneration is the MyApp generation the decision was made for.
	// +optional
	ScheduledGeneration int64 `json:"scheduledGeneration,omitempty"`
	// LastScheduleTime is when the decision last changed.
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
}

// TargetCluster is one cluster and its replicas.
type TargetCluster struct {
	// Name of the MemberCluster.
	Name string `json:"name"`
	// Replicas assigned to it.
	Replicas int32 `json:"replicas"`
	// Reason says why a cluster is a target with 0 replicas: KeptAtZero
	// when the MyApp is scaled to zero and the cluster keeps the app's
	// Work (and Deployment) at 0 replicas. Empty otherwise.
	// +optional
	Reason string `json:"reason,omitempty"`
}

// EvictedCluster is a cluster that replicas were moved away from.
type EvictedCluster struct {
	// Name of the MemberCluster.
	Name string `json:"name"`
	// Replicas it ran when it was evicted.
	Replicas int32 `json:"replicas"`
	// Reason names why, e.g. ClusterUnreachable.
	Reason string `json:"reason"`
	// EvictionTime is when the replicas were moved.
	EvictionTime metav1.Time `json:"evictionTime"`
}

// ClusterAppStatus is the app as one member reports it.
type ClusterAppStatus struct {
	// Name of the MemberCluster.
	Name string `json:"name"`
	// Assigned replicas (after overrides).
	Assigned int32 `json:"assigned"`
	// Replicas, ReadyReplicas, AvailableReplicas and UpdatedReplicas are the
	// member Deployment's own numbers.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// +optional
	AvailableReplicas int32 `json:"availableReplicas,omitempty"`
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`
	// Phase summarises the cluster: Pending, Applied, Progressing, Available,
	// Degraded, Evicting or Lost.
	// +optional
	Phase ClusterAppPhase `json:"phase,omitempty"`
	// Message is the member's own message when something is wrong.
	// +optional
	Message string `json:"message,omitempty"`
	// Endpoints counts the app's Service's endpoints in the cluster (with
	// spec.service), as its member last reported them.
	// +optional
	Endpoints *EndpointsStatus `json:"endpoints,omitempty"`
	// Dependencies are the ConfigMaps, Secrets and ServiceAccount the
	// app's Work carries to the cluster, and how each fared.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Dependencies []DependencyStatus `json:"dependencies,omitempty"`
	// Signals are the health-shift signals as the cluster last evaluated
	// them (with spec.placement.healthShift).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4
	Signals []SignalStatus `json:"signals,omitempty"`
}

// DependencyStatus is one dependency of an app in one cluster.
type DependencyStatus struct {
	// Kind is ConfigMap, Secret or ServiceAccount.
	Kind string `json:"kind"`
	// Name of the object, in the app's target namespace.
	Name string `json:"name"`
	// State is Applied once the member holds the hub's copy; Pending until
	// the member reports it; else the reason it is not applied
	// (NotOwned: an object of that name exists there and is not
	// Flotilla's; ApplyFailed; NamespaceDenied).
	State string `json:"state"`
	// Message says why, when the state is not Applied.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// ClusterAppPhase summarises the app in one cluster.
type ClusterAppPhase string

// The per-cluster phases.
const (
	ClusterAppPending     ClusterAppPhase = "Pending"
	ClusterAppApplied     ClusterAppPhase = "Applied"
	ClusterAppProgressing ClusterAppPhase = "Progressing"
	ClusterAppAvailable   ClusterAppPhase = "Available"
	ClusterAppDegraded    ClusterAppPhase = "Degraded"
	ClusterAppEvicting    ClusterAppPhase = "Evicting"
	ClusterAppLost        ClusterAppPhase = "Lost"
)

// MyApp is an application placed across member clusters by the hub.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=mya,categories=flotilla
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1123 label of at most 63 characters: it names the Deployment in every member"
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredReplicas`
// +kubebuilder:printcolumn:name="Clusters",type=integer,JSONPath=`.status.clusterCount`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Rollout",type=string,JSONPath=`.status.rollout.progress`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.spec.image`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type MyApp struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MyAppSpec   `json:"spec"`
	Status MyAppStatus `json:"status,omitempty"`
}

// MyAppList is a list of MyApps.
// +kubebuilder:object:root=true
type MyAppList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MyApp `json:"items"`
}
