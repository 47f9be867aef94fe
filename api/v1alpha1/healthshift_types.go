package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HealthShift moves replicas (and traffic) away from a cluster where the
// app is unhealthy or slow, and back once it is well again. Each cluster
// running the app evaluates the signals; a cluster where any signal stays
// above its threshold for `for` is Degraded: its share of the app's
// replicas and traffic drops to degradedPercent (in steps of stepPercent,
// when set), the rest goes to the healthy clusters in proportion to the
// shares the scheduler gave them. A Degraded cluster whose signals stay
// below their thresholds for recoveryWindow gets its share back.
// +kubebuilder:validation:XValidation:rule="!has(self.stepPercent) || self.stepPercent <= 100 - (has(self.degradedPercent) ? self.degradedPercent : 20)",message="stepPercent must not exceed 100 - degradedPercent"
type HealthShift struct {
	// Signals say when a cluster is sick: any one above its threshold for
	// `for` makes it Degraded.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	Signals []HealthSignal `json:"signals"`

	// For is how long a signal must stay above its threshold, at every
	// evaluation, before the cluster is Degraded. Default 30s.
	// +optional
	For *metav1.Duration `json:"for,omitempty"`

	// Interval is how often each cluster evaluates the signals. Default
	// 5s; at least 1s.
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// DegradedPercent is the share, in percent of the app's replicas and
	// traffic, a Degraded cluster keeps: 20 keeps a fifth. A cluster whose
	// normal share is smaller keeps its normal share. Default 20.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=99
	// +optional
	DegradedPercent *int32 `json:"degradedPercent,omitempty"`

	// StepPercent, when set, makes shifts gradual: a Degraded cluster's
	// share drops (and a recovering one's grows back) by at most this many
	// percentage points of the app per stepInterval. Unset: one step.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	StepPercent *int32 `json:"stepPercent,omitempty"`

	// StepInterval is the time between two steps of a gradual shift.
	// Default: `for`.
	// +optional
	StepInterval *metav1.Duration `json:"stepInterval,omitempty"`

	// RecoveryWindow is how long a Degraded cluster's signals must stay
	// below their thresholds before its share grows back, and the least
	// time between a cluster's shift and a shift the other way: an
	// oscillating signal moves a cluster at most once per window.
	// Default 60s.
	// +optional
	RecoveryWindow *metav1.Duration `json:"recoveryWindow,omitempty"`

	// MinReplicas is the floor: a Degraded cluster keeps at least this
	// many replicas (never more than its normal share). Default 1, so the
	// cluster keeps reporting the signals it recovers by; 0 lets a cluster
	// be emptied.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`
}

// HealthSignalType names what a signal measures.
// +kubebuilder:validation:Enum=Prometheus;UnavailableRatio;BackOffPods;RestartRate
type HealthSignalType string

const (
	// SignalPrometheus: the value of a PromQL query, evaluated against the
	// member's Prometheus (the agent's --prometheus-url, or the push
	// MemberCluster's spec.prometheusURL).
	SignalPrometheus HealthSignalType = "Prometheus"
	// SignalUnavailableRatio: the Deployment's unavailable replicas over
	// its desired replicas, 0 to 1.
	SignalUnavailableRatio HealthSignalType = "UnavailableRatio"
	// SignalBackOffPods: the app's pods with a container waiting in
	// CrashLoopBackOff, ImagePullBackOff or ErrImagePull.
	SignalBackOffPods HealthSignalType = "BackOffPods"
	// SignalRestartRate: container restarts of the app's pods per minute,
	// over the last `for` (at least one minute).
	SignalRestartRate HealthSignalType = "RestartRate"
)

// HealthSignal is one measure of a cluster's health for the app.
// +kubebuilder:validation:XValidation:rule="self.type == 'Prometheus' ? has(self.query) && size(self.query) > 0 : !has(self.query)",message="query is required for type Prometheus and not allowed for other types"
type HealthSignal struct {
	// Name of the signal, unique in the list; events and status use it.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// Type is what the signal measures.
	Type HealthSignalType `json:"type"`

	// Query is the PromQL expression of a Prometheus signal. It must
	// return one sample (an instant vector of one series, or a scalar);
	// more than one is an error. ${cluster}, ${namespace} (the member
	// namespace), ${name} (the MyApp's name) and ${label:KEY} (the MyApp's
	// label KEY) are replaced before it is evaluated, e.g.
	// histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket{namespace="${namespace}",app="${name}"}[1m]))).
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Query string `json:"query,omitempty"`

	// Threshold: the signal breaches when its value is above it, e.g. 0.08
	// for a latency of 80 ms in seconds, 0.5 for half the replicas
	// unavailable, 1 for more than one pod in back-off.
	Threshold resource.Quantity `json:"threshold"`
}

// WorkHealth is what a member evaluates for the app's health shift: the
// MyApp's signals with their queries rendered for the member.
type WorkHealth struct {
	// Interval between two evaluations.
	Interval metav1.Duration `json:"interval"`
	// For is how long a signal must stay above its threshold before it is
	// reported as Breaching.
	For metav1.Duration `json:"for"`
	// Signals to evaluate.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=4
	Signals []HealthSignal `json:"signals"`
}

// SignalState is a signal's state as a member reports it.
// +kubebuilder:validation:Enum=OK;Pending;Breaching;Unknown
type SignalState string

const (
	// SignalOK: at or below the threshold.
	SignalOK SignalState = "OK"
	// SignalPending: above the threshold for less than `for`.
	SignalPending SignalState = "Pending"
	// SignalBreaching: above the threshold for at least `for`.
	SignalBreaching SignalState = "Breaching"
	// SignalUnknown: the signal could not be evaluated (the query failed,
	// returned nothing or more than one sample, no Prometheus configured).
	SignalUnknown SignalState = "Unknown"
)

// SignalStatus is one signal's last evaluation in a member.
type SignalStatus struct {
	// Name of the signal.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// State of the signal.
	State SignalState `json:"state"`
	// Value is the last value, formatted (empty when Unknown).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Value string `json:"value,omitempty"`
	// Message says why the state is Unknown (the query error).
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// Since is when the state last changed, by the member's clock.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}

// TrafficSpec says where the app's traffic weights go besides its status.
type TrafficSpec struct {
	// HTTPRoute names a Gateway API HTTPRoute in the MyApp's namespace on
	// the hub whose backendRefs stand for the clusters: the hub writes
	// each listed backendRef's weight (in every rule that has it) to the
	// cluster's traffic share, so a global gateway shifts traffic in step
	// with replicas. The hub changes nothing else in the route.
	// +optional
	HTTPRoute *HTTPRouteTraffic `json:"httpRoute,omitempty"`
}

// HTTPRouteTraffic names the route and which backendRef is which cluster.
type HTTPRouteTraffic struct {
	// Name of the HTTPRoute (gateway.networking.k8s.io/v1).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Backends map each cluster to the backendRef that reaches it.
	// +listType=map
	// +listMapKey=cluster
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Backends []ClusterBackend `json:"backends"`
}

// ClusterBackend is the backendRef that reaches one cluster: a backendRef
// matches when its name equals backendName, its kind (default Service)
// equals backendKind (default Service), and its group matches backendGroup
// (default the core group).
type ClusterBackend struct {
	// Cluster is the MemberCluster's name.
	// +kubebuilder:validation:MinLength=1
	Cluster string `json:"cluster"`
	// BackendName is the backendRef's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BackendName string `json:"backendName"`
	// BackendKind is the backendRef's kind. Default Service.
	// +optional
	BackendKind string `json:"backendKind,omitempty"`
	// BackendGroup is the backendRef's group. Default "" (core).
	// +optional
	BackendGroup string `json:"backendGroup,omitempty"`
}

// ClusterHealthState is a cluster's state under the health shift.
type ClusterHealthState string

const (
	// HealthStateHealthy: the cluster has its normal share.
	HealthStateHealthy ClusterHealthState = "Healthy"
	// HealthStateDegraded: a signal breached and the cluster's share was
	// cut (last shift down).
	HealthStateDegraded ClusterHealthState = "Degraded"
	// HealthStateRecovering: the share is still cut but grows back in
	// steps (last shift up).
	HealthStateRecovering ClusterHealthState = "Recovering"
)

// TrafficStatus is the effective split of the app's replicas and traffic.
type TrafficStatus struct {
	// Clusters are the effective shares, sorted by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	Clusters []ClusterTraffic `json:"clusters,omitempty"`
	// Shifts are the last shifts, newest first (at most 10).
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Shifts []TrafficShift `json:"shifts,omitempty"`
	// HTTPRoute says whether the HTTPRoute has the weights.
	// +optional
	HTTPRoute *HTTPRouteStatus `json:"httpRoute,omitempty"`
}

// ClusterTraffic is one cluster's effective share.
type ClusterTraffic struct {
	// Name of the MemberCluster.
	Name string `json:"name"`
	// Weight is the cluster's share of traffic in percent; the weights of
	// an app sum to 100 (0 when it runs nowhere).
	Weight int32 `json:"weight"`
	// Replicas are the replicas the cluster runs (after the shift), and
	// NormalReplicas those the scheduler gave it.
	Replicas       int32 `json:"replicas"`
	NormalReplicas int32 `json:"normalReplicas"`
	// CapPercent is the most of the app, in percent, the cluster may take:
	// 100 when Healthy, down to degradedPercent when Degraded.
	CapPercent int32 `json:"capPercent"`
	// State of the cluster.
	State ClusterHealthState `json:"state"`
	// Reason names the signal (and value) behind the state.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Since is when the state began.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// HealthySince is when the signals were last seen to turn OK; the
	// recovery window counts from it.
	// +optional
	HealthySince *metav1.Time `json:"healthySince,omitempty"`
	// UnhealthyUntil is when its signals last turned OK after being
	// Breaching, Pending or Unknown: a cluster takes replicas cut from
	// another only `for` after that, so clusters that recover together, a
	// moment apart, are not cut one towards the other.
	// +optional
	UnhealthyUntil *metav1.Time `json:"unhealthyUntil,omitempty"`
	// LastShift is when the cluster's cap last changed.
	// +optional
	LastShift *metav1.Time `json:"lastShift,omitempty"`
}

// TrafficShift is one change of a cluster's share.
type TrafficShift struct {
	// Time of the shift.
	Time metav1.Time `json:"time"`
	// Cluster whose share changed.
	Cluster string `json:"cluster"`
	// FromPercent and ToPercent are its cap before and after.
	FromPercent int32 `json:"fromPercent"`
	ToPercent   int32 `json:"toPercent"`
	// Signal and Value are what caused it (empty on recovery).
	// +optional
	Signal string `json:"signal,omitempty"`
	// +optional
	Value string `json:"value,omitempty"`
	// Reason: Degraded or Recovered.
	Reason string `json:"reason"`
}

// HTTPRouteStatus says whether the route carries the weights.
type HTTPRouteStatus struct {
	// Name of the route.
	Name string `json:"name"`
	// Synced says the route's backendRefs carry the weights of Clusters.
	Synced bool `json:"synced"`
	// Message says why not.
	// +optional
	Message string `json:"message,omitempty"`
}

// The health shift's defaults, applied by the accessors below (the CRD
// leaves the fields unset, so a changed default reaches existing apps).
const (
	DefaultHealthShiftFor            = 30 * time.Second
	DefaultHealthShiftInterval       = 5 * time.Second
	MinHealthShiftInterval           = time.Second
	DefaultHealthShiftRecoveryWindow = 60 * time.Second
	DefaultHealthShiftDegradedPct    = int32(20)
	DefaultHealthShiftMinReplicas    = int32(1)
)

func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil || d.Duration <= 0 {
		return def
	}
	return d.Duration
}

// ForDuration is spec.placement.healthShift.for with its default.
func (h *HealthShift) ForDuration() time.Duration { return durationOr(h.For, DefaultHealthShiftFor) }

// IntervalDuration is the evaluation interval with its default and floor.
func (h *HealthShift) IntervalDuration() time.Duration {
	return max(durationOr(h.Interval, DefaultHealthShiftInterval), MinHealthShiftInterval)
}

// RecoveryDuration is the recovery window with its default.
func (h *HealthShift) RecoveryDuration() time.Duration {
	return durationOr(h.RecoveryWindow, DefaultHealthShiftRecoveryWindow)
}

// StepDuration is the step interval: stepInterval, else `for`.
func (h *HealthShift) StepDuration() time.Duration {
	return durationOr(h.StepInterval, h.ForDuration())
}

// DegradedShare is degradedPercent with its default.
func (h *HealthShift) DegradedShare() int32 {
	if h.DegradedPercent == nil {
		return DefaultHealthShiftDegradedPct
	}
	return *h.DegradedPercent
}

// Step is stepPercent, or 100 (one step) when unset.
func (h *HealthShift) Step() int32 {
	if h.StepPercent == nil || *h.StepPercent <= 0 {
		return 100
	}
	return *h.StepPercent
}

// Floor is minReplicas with its default.
func (h *HealthShift) Floor() int32 {
	if h.MinReplicas == nil {
		return DefaultHealthShiftMinReplicas
	}
	return *h.MinReplicas
}
