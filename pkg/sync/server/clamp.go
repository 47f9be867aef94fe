package server

import (
	"encoding/json"
	"math"
	"regexp"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/truncate"
)

// This file decides what of an agent's status report may reach the Work's
// status. clampStatus is pure: the Work as the hub has it and the report in,
// the part the agent may write and what was cut out. A member can lie about
// its own Work (that is what a compromised member does), but it cannot make
// the hub store more than a few kilobytes per Work, claim more replicas than
// the Work could ever run, or write conditions and reasons the hub owns.

// Limits on one status report, beyond the message size limit. The agent
// (pkg/apply.WorkStatus) sends four conditions per manifest and per Work,
// with messages of at most 1024 bytes, so none of these is reached by an
// honest agent.
const (
	// MaxStatusConditions bounds the conditions of a Work and of each of
	// its manifests.
	MaxStatusConditions = 8
	// MaxStatusMessageLength bounds a condition message; a longer one is
	// cut (internal/truncate) rather than dropped.
	MaxStatusMessageLength = 1024
	// MaxStatusReasonLength bounds a condition reason. metav1.Condition
	// allows 1024; the reasons the agent uses are CamelCase words.
	MaxStatusReasonLength = 128
)

// Values of the "what" label of flotilla_sync_status_clamped_total: which
// part of a report was dropped or clamped.
const (
	clampWorkUnknown       = "work_unknown"
	clampGenerationAhead   = "generation_ahead"
	clampConditionType     = "condition_type"
	clampConditionReason   = "condition_reason"
	clampConditionInvalid  = "condition_invalid"
	clampConditionCount    = "condition_count"
	clampMessage           = "message"
	clampManifestUnknown   = "manifest_unknown"
	clampManifestDuplicate = "manifest_duplicate"
	clampWorkload          = "workload"
	clampEndpoints         = "endpoints"
	clampSignal            = "signal"
	clampCountNegative     = "count_negative"
	clampCountAboveBound   = "count_above_bound"
	clampRateBacklogFull   = "rate_backlog_full"
)

// clampWhats are all of them, in the order the metric's help lists them.
var clampWhats = [...]string{
	clampWorkUnknown, clampGenerationAhead, clampConditionType, clampConditionReason,
	clampConditionInvalid, clampConditionCount, clampMessage, clampManifestUnknown,
	clampManifestDuplicate, clampWorkload, clampEndpoints, clampSignal,
	clampCountNegative, clampCountAboveBound, clampRateBacklogFull,
}

// agentConditionTypes is the allow-list of condition types an agent
// writes, on the Work and on each manifest. An allow-list, because the
// hub reads Work conditions by type (pkg/workstatus) and any other type is
// noise at best.
var agentConditionTypes = sets.New(
	v1alpha1.ConditionApplied,
	v1alpha1.ConditionAvailable,
	v1alpha1.ConditionProgressing,
	v1alpha1.ConditionDegraded,
)

// hubReasons is the deny-list of reasons the hub owns: scheduling,
// rollouts, failover, member health and pruning. A deny-list, because
// the agent passes on reasons it does not choose: a Deployment's
// ReplicaFailure reason (FailedCreate, ...), a container's waiting reason
// (ImagePullBackOff, CrashLoopBackOff, ...), the apiserver's refusal of an
// apply. The MyApp controller copies a Work's Degraded reason into the
// MyApp, so a member that could say "Unschedulable" or "RolledBack" there
// would speak for the hub.
var hubReasons = sets.New(
	v1alpha1.ReasonScheduled,
	v1alpha1.ReasonUnschedulable,
	v1alpha1.ReasonSpreadConstraintsNotMet,
	v1alpha1.ReasonWaitingForMember,
	v1alpha1.ReasonPaused,
	v1alpha1.ReasonRolloutFailed,
	v1alpha1.ReasonRolledBack,
	v1alpha1.ReasonClusterLost,
	v1alpha1.ReasonFailedOver,
	v1alpha1.ReasonReady,
	v1alpha1.ReasonNotReady,
	v1alpha1.ReasonScaledToZero,
	v1alpha1.ReasonHeartbeating,
	v1alpha1.ReasonHeartbeatMissed,
	v1alpha1.ReasonPartitionBrake,
	v1alpha1.ReasonEvictionRateLimited,
	v1alpha1.ReasonDraining,
	v1alpha1.ReasonNeverConnected,
	v1alpha1.ReasonStreamOpen,
	v1alpha1.ReasonStreamClosed,
	v1alpha1.ReasonFleetMismatch,
	v1alpha1.ReasonAwaitingPruneConfirmation,
	v1alpha1.ReasonPruned,
	v1alpha1.TargetReasonKeptAtZero,
)

// reasonPattern is metav1.Condition's reason pattern: a reason that does
// not match would make the apiserver refuse the whole status write.
var reasonPattern = regexp.MustCompile(`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`)

// clamped counts what clampStatus cut out of one report, by the "what"
// label value.
type clamped map[string]int

func (c clamped) add(what string) { c[what]++ }

// manifestBound is what the hub knows about one of the Work's manifests:
// whether it is a Deployment and, if so, the most replicas it can have.
type manifestBound struct {
	deployment bool
	// service: a Service, whose endpoints are the pods of the Work's
	// Deployments, so at most the sum of their maxReplicas are ready (and
	// twice that not ready: pods of an old template still terminating).
	service bool
	// maxReplicas is the Deployment's desired replicas plus its surge:
	// during a rolling update the Deployment controller runs up to
	// replicas + maxSurge pods (old and new together), so status.replicas,
	// readyReplicas, availableReplicas and updatedReplicas may honestly
	// reach it; nothing above it is physically meaningful.
	maxReplicas int32
}

// workBounds reads the Work's manifests: their identifiers, as the agent
// computes them (pkg/apply: group, version and kind from apiVersion and
// kind, namespace and name as written), and the replica bound of each
// Deployment. A manifest the hub cannot read gets no entry, so nothing
// can be reported on it.
func workBounds(work *v1alpha1.Work) map[v1alpha1.ResourceIdentifier]manifestBound {
	out := make(map[v1alpha1.ResourceIdentifier]manifestBound, len(work.Spec.Manifests))
	for _, m := range work.Spec.Manifests {
		var obj struct {
			metav1.TypeMeta   `json:",inline"`
			metav1.ObjectMeta `json:"metadata"`
		}
		if err := json.Unmarshal(m.Raw, &obj); err != nil {
			continue
		}
		gv, err := schema.ParseGroupVersion(obj.APIVersion)
		if err != nil {
			continue
		}
		id := v1alpha1.ResourceIdentifier{Group: gv.Group, Version: gv.Version, Kind: obj.Kind, Namespace: obj.Namespace, Name: obj.Name}
		b := manifestBound{}
		if gv.Group == appsv1.GroupName && obj.Kind == "Deployment" {
			var d appsv1.Deployment
			if err := json.Unmarshal(m.Raw, &d); err != nil {
				continue
			}
			b = manifestBound{deployment: true, maxReplicas: deploymentBound(&d.Spec)}
		}
		if gv.Group == "" && obj.Kind == "Service" {
			b.service = true
		}
		out[id] = b
	}
	return out
}

// podBound is the most pods the Work's Deployments can run together.
func podBound(bounds map[v1alpha1.ResourceIdentifier]manifestBound) int32 {
	var n int64
	for _, b := range bounds {
		if b.deployment {
			n += int64(b.maxReplicas)
		}
	}
	return int32(min(n, math.MaxInt32/2))
}

// deploymentBound is spec.replicas (1 when unset, as the apiserver
// defaults it) plus the surge the strategy allows: maxSurge (25% by
// default, a percentage rounded up, as the Deployment controller does) for
// RollingUpdate, none for Recreate.
func deploymentBound(spec *appsv1.DeploymentSpec) int32 {
	desired := int64(1)
	if spec.Replicas != nil {
		desired = max(int64(*spec.Replicas), 0)
	}
	surge := int64(0)
	if spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		maxSurge := intstr.FromString("25%")
		if ru := spec.Strategy.RollingUpdate; ru != nil && ru.MaxSurge != nil {
			maxSurge = *ru.MaxSurge
		}
		if v, err := intstr.GetScaledValueFromIntOrPercent(&maxSurge, int(desired), true); err == nil && v > 0 {
			surge = int64(v)
		}
	}
	return int32(min(desired+surge, math.MaxInt32))
}

// clampStatus returns the part of st, a report from the agent of work's
// cluster, that may be written to work's status, and what it cut out. The
// result is nil when nothing of the report may be written: the Work is
// unknown (nil) or the report is about a generation the Work never had.
//
// It keeps:
//   - observedGeneration, unless above the Work's generation (the whole
//     report is dropped then: it describes some other Work);
//   - at most MaxStatusConditions conditions, of the types the agent owns
//     (agentConditionTypes), each once, with a valid status, a reason of
//     the metav1 pattern that the hub does not own (hubReasons), a
//     lastTransitionTime, an observedGeneration clamped into
//     [0, generation] and a message cut to MaxStatusMessageLength;
//   - manifests that name one of the Work's own manifests, each once, so
//     there are never more than the Work has, with their conditions
//     checked as above and, for a Deployment only, replica counts clamped
//     into [0, replicas + maxSurge] and generations of at least 0.
//
// Each cut is counted once in the result, by what was cut. Counts are
// clamped independently: a report may still say more pods are ready than
// exist (the hub's aggregation takes each number at face value within its
// bound), but never more than the Work could run. The bound is the Work's
// current one: during a scale-down, a report about the previous
// generation, which may honestly count more pods, is clamped to the new
// bound; it is about an old spec (its observedGeneration says so) and the
// next report, on the new generation, counts what runs.
//
// A report of 1 MiB (the receive limit) costs one pass over its
// conditions and manifests, and what is kept is bounded by the Work: at
// most 4 conditions on the Work and on each of at most 32 manifests, each
// message at most MaxStatusMessageLength bytes.
func clampStatus(work *v1alpha1.Work, st *v1alpha1.WorkStatus) (*v1alpha1.WorkStatus, clamped) {
	cut := clamped{}
	if work == nil || st == nil {
		cut.add(clampWorkUnknown)
		return nil, cut
	}
	if st.ObservedGeneration > work.Generation || st.ObservedGeneration < 0 {
		cut.add(clampGenerationAhead)
		return nil, cut
	}
	out := &v1alpha1.WorkStatus{ObservedGeneration: st.ObservedGeneration}
	out.Conditions = clampConditions(st.Conditions, work.Generation, cut)
	bounds := workBounds(work)
	seen := make(map[v1alpha1.ResourceIdentifier]bool, len(bounds))
	for _, m := range st.Manifests {
		b, ok := bounds[m.ResourceIdentifier]
		if !ok {
			cut.add(clampManifestUnknown)
			continue
		}
		if seen[m.ResourceIdentifier] {
			cut.add(clampManifestDuplicate)
			continue
		}
		seen[m.ResourceIdentifier] = true
		ms := v1alpha1.ManifestStatus{
			ResourceIdentifier: m.ResourceIdentifier,
			Conditions:         clampConditions(m.Conditions, work.Generation, cut),
		}
		if m.Workload != nil {
			if b.deployment {
				ms.Workload = clampWorkloadStatus(m.Workload, b.maxReplicas, cut)
			} else {
				cut.add(clampWorkload)
			}
		}
		if m.Endpoints != nil {
			if b.service {
				pods := podBound(bounds)
				ms.Endpoints = &v1alpha1.EndpointsStatus{
					Ready:    clampCount(m.Endpoints.Ready, pods, cut),
					NotReady: clampCount(m.Endpoints.NotReady, 2*pods, cut),
				}
			} else {
				cut.add(clampEndpoints)
			}
		}
		out.Manifests = append(out.Manifests, ms)
	}
	out.Health = clampHealth(work.Spec.Health, st.Health, cut)
	return out, cut
}

// MaxSignalValueLength bounds a signal's formatted value (the CRD's).
const MaxSignalValueLength = 64

// clampHealth keeps the signal reports that answer spec: one per signal
// the Work asks for, in a known state, with a bounded value and message.
// A report of a signal the Work does not have, a second report of one,
// or an unknown state is dropped (the hub then sees the signal as not
// reported: nothing shifts on it).
func clampHealth(spec *v1alpha1.WorkHealth, in []v1alpha1.SignalStatus, cut clamped) []v1alpha1.SignalStatus {
	if len(in) == 0 {
		return nil
	}
	asked := sets.New[string]()
	if spec != nil {
		for _, s := range spec.Signals {
			asked.Insert(s.Name)
		}
	}
	var out []v1alpha1.SignalStatus
	seen := sets.New[string]()
	for _, s := range in {
		switch {
		case !asked.Has(s.Name) || seen.Has(s.Name):
			cut.add(clampSignal)
			continue
		case s.State != v1alpha1.SignalOK && s.State != v1alpha1.SignalPending && s.State != v1alpha1.SignalBreaching && s.State != v1alpha1.SignalUnknown,
			len(s.Value) > MaxSignalValueLength:
			cut.add(clampSignal)
			continue
		}
		seen.Insert(s.Name)
		c := *s.DeepCopy()
		if len(c.Message) > MaxStatusMessageLength {
			c.Message = truncate.String(c.Message, MaxStatusMessageLength)
			cut.add(clampMessage)
		}
		out = append(out, c)
	}
	return out
}

// clampConditions keeps the conditions an agent may write; see
// clampStatus.
func clampConditions(in []metav1.Condition, generation int64, cut clamped) []metav1.Condition {
	var out []metav1.Condition
	types := sets.New[string]()
	for _, c := range in {
		switch {
		case !agentConditionTypes.Has(c.Type):
			cut.add(clampConditionType)
			continue
		case types.Has(c.Type):
			// A list map keyed by type: the apiserver refuses a
			// duplicate, and with it the whole write.
			cut.add(clampConditionInvalid)
			continue
		case c.Status != metav1.ConditionTrue && c.Status != metav1.ConditionFalse && c.Status != metav1.ConditionUnknown,
			c.LastTransitionTime.IsZero(),
			len(c.Reason) > MaxStatusReasonLength || !reasonPattern.MatchString(c.Reason):
			cut.add(clampConditionInvalid)
			continue
		case hubReasons.Has(c.Reason):
			cut.add(clampConditionReason)
			continue
		case len(out) == MaxStatusConditions:
			// Unreachable while the allow-list is shorter than the
			// limit; kept so that a longer list stays bounded.
			cut.add(clampConditionCount)
			continue
		}
		types.Insert(c.Type)
		if len(c.Message) > MaxStatusMessageLength {
			c.Message = truncate.String(c.Message, MaxStatusMessageLength)
			cut.add(clampMessage)
		}
		if c.ObservedGeneration < 0 || c.ObservedGeneration > generation {
			c.ObservedGeneration = min(max(c.ObservedGeneration, 0), generation)
			cut.add(clampCountAboveBound)
		}
		out = append(out, c)
	}
	return out
}

// clampCount clamps n into [0, bound].
func clampCount(n, bound int32, cut clamped) int32 {
	switch {
	case n < 0:
		cut.add(clampCountNegative)
		return 0
	case n > bound:
		cut.add(clampCountAboveBound)
		return bound
	}
	return n
}

// clampWorkloadStatus clamps a Deployment's numbers into [0, bound] and its
// generations to at least 0.
func clampWorkloadStatus(in *v1alpha1.WorkloadStatus, bound int32, cut clamped) *v1alpha1.WorkloadStatus {
	out := *in
	for _, n := range []*int32{&out.Replicas, &out.ReadyReplicas, &out.AvailableReplicas, &out.UpdatedReplicas, &out.UnavailableReplicas} {
		switch {
		case *n < 0:
			*n = 0
			cut.add(clampCountNegative)
		case *n > bound:
			*n = bound
			cut.add(clampCountAboveBound)
		}
	}
	for _, g := range []*int64{&out.ObservedGeneration, &out.Generation} {
		if *g < 0 {
			*g = 0
			cut.add(clampCountNegative)
		}
	}
	return &out
}
