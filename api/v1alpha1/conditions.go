package v1alpha1

// Condition types. Every condition is a metav1.Condition whose
// ObservedGeneration says which generation it describes.
const (
	// ConditionScheduled (MyApp): the scheduler placed every replica.
	ConditionScheduled = "Scheduled"
	// ConditionApplied (MyApp, Work): the member applied the desired
	// objects (for a MyApp: every target member did).
	ConditionApplied = "Applied"
	// ConditionAvailable (MyApp, Work): at least the desired replicas are
	// available.
	ConditionAvailable = "Available"
	// ConditionProgressing (MyApp, Work): a change is still rolling out.
	ConditionProgressing = "Progressing"
	// ConditionDegraded (MyApp, Work): something is wrong that waiting alone
	// may not fix; the message says what and where.
	ConditionDegraded = "Degraded"
	// ConditionReady (MyApp): scheduled, applied everywhere, and every
	// desired replica ready. (MemberCluster): the cluster is healthy and
	// its agent heartbeats.
	ConditionReady = "Ready"
	// ConditionConnected (MemberCluster): an agent holds a stream now.
	ConditionConnected = "Connected"
	// ConditionPruneBlocked (MemberCluster): the agent's deletion brake
	// holds the prune after a snapshot, because it would delete more of
	// what the member runs than the brake allows. The message has the
	// counts, the epoch and how to confirm (the annotation
	// flotilla.dev/confirm-prune); nothing is deleted until then.
	ConditionPruneBlocked = "PruneBlocked"
	// ConditionDraining (MemberCluster): the MemberCluster is being
	// deleted and the hub drains it: replicas move to other members, then
	// its Works go (their member objects deleted or released as
	// spec.deletionPolicy says), then the MemberCluster. The message counts
	// the Works left.
	ConditionDraining = "Draining"
	// ConditionPartitionBrake (the hub's status ConfigMap
	// flotilla-hub-status): True while more than the brake's share of the
	// members fell silent at once, so the hub taints none of them.
	ConditionPartitionBrake = "PartitionBrake"
	// ConditionHealthShifted (MyApp, with spec.placement.healthShift):
	// True while some cluster's share is cut, False while every cluster
	// has its normal share, Unknown when a signal cannot be evaluated
	// (reason SignalUnknown, the message naming the cluster, signal and
	// error). The reason otherwise: AllClustersDegraded when a sick
	// cluster cannot be cut because no healthy uncut cluster is left
	// (nothing moves), else Degraded (True) or AllHealthy (False).
	ConditionHealthShifted = "HealthShifted"
)

// Condition reasons.
const (
	// ReasonScheduled: every replica has a cluster.
	ReasonScheduled = "Scheduled"
	// ReasonUnschedulable: no cluster fits; the message names, cluster by
	// cluster, the filter that removed it.
	ReasonUnschedulable = "Unschedulable"
	// ReasonSpreadConstraintsNotMet: too few groups are eligible.
	ReasonSpreadConstraintsNotMet = "SpreadConstraintsNotMet"
	// ReasonNamespaceNotAllowed (MyApp Scheduled False, Degraded True,
	// Ready False): the FleetNamespacePolicies do not allow the MyApp's
	// target namespace (a grant was withdrawn after admission, or the
	// webhook was bypassed). The hub writes no new or updated Work for it
	// and deletes none: what runs keeps running until the MyApp is moved
	// to an allowed namespace, the grant comes back, or it is deleted. The
	// message names spec.targetNamespace and the policies considered.
	ReasonNamespaceNotAllowed = "NamespaceNotAllowed"
	// ReasonRenderFailed (MyApp Degraded True): the hub could not render
	// a cluster's Work from the spec (an override selector that does not
	// parse, override patches that do not apply together to a cluster's
	// Deployment). It wrote nothing, so every cluster keeps its last Work,
	// until the spec or the fleet changes.
	ReasonRenderFailed = "RenderFailed"
	// ReasonWorkTooLarge (MyApp Degraded True): the Work rendered for a
	// cluster is larger than the hub's --max-work-bytes. As with
	// RenderFailed nothing was written; the message names the MyApp, the
	// cluster, the size and the limit.
	ReasonWorkTooLarge = "WorkTooLarge"
	// ReasonDependencyMissing (MyApp Degraded True): a ConfigMap, Secret
	// or ServiceAccount the pod template needs (not marked optional) does
	// not exist in the MyApp's hub namespace. As with RenderFailed nothing
	// was written, so no member runs the app half-configured; the message
	// names each missing object and where it is referenced.
	ReasonDependencyMissing = "DependencyMissing"

	// Reasons of the HealthShifted condition and of shift events.
	ReasonHealthDegraded      = "Degraded"
	ReasonHealthRecovered     = "Recovered"
	ReasonAllHealthy          = "AllHealthy"
	ReasonAllClustersDegraded = "AllClustersDegraded"
	ReasonSignalUnknown       = "SignalUnknown"
	ReasonHTTPRouteSyncFailed = "HTTPRouteSyncFailed"

	// ReasonApplied: the member applied the objects.
	ReasonApplied = "Applied"
	// ReasonApplyFailed: applying failed; the message is the member's.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonNotOwned: an object of the same name exists in the member and
	// Flotilla does not own it, so it was left alone.
	ReasonNotOwned = "NotOwned"
	// ReasonNamespaceDenied: the Work's objects go to a member namespace the
	// agent's own namespace policy (--denied-namespaces,
	// --allowed-namespaces) refuses, so nothing was applied.
	ReasonNamespaceDenied = "NamespaceDenied"
	// ReasonWaitingForMember: the Work is written but the member has not
	// reported on this generation yet.
	ReasonWaitingForMember = "WaitingForMember"

	// ReasonAvailable: the desired replicas are available.
	ReasonAvailable = "Available"
	// ReasonUnavailable: fewer replicas are available than desired.
	ReasonUnavailable = "Unavailable"
	// ReasonRollingOut: replicas of the new template are being rolled out.
	ReasonRollingOut = "RollingOut"
	// ReasonComplete: the last change rolled out everywhere.
	ReasonComplete = "Complete"
	// ReasonPaused: a Progressive rollout is held by spec.rollout.paused.
	ReasonPaused = "Paused"
	// ReasonRolloutFailed: more clusters failed than the rollout tolerates
	// and it stopped.
	ReasonRolloutFailed = "Failed"
	// ReasonRolledBack: the rollout failed and the updated clusters were
	// returned to the last good revision.
	ReasonRolledBack = "RolledBack"
	// ReasonRevisionRejected: a revision template read back from MyApp
	// status did not verify (its digest is not this hub's) and was ignored.
	ReasonRevisionRejected = "RevisionRejected"
	// ReasonProgressDeadlineExceeded: a member Deployment stopped making
	// progress (the Deployment controller's own reason).
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// ReasonClusterLost: a target cluster is unreachable.
	ReasonClusterLost = "ClusterLost"
	// ReasonFailedOver: replicas were moved away from a lost cluster.
	ReasonFailedOver = "FailedOver"
	// ReasonAsExpected: nothing is wrong.
	ReasonAsExpected = "AsExpected"
	// ReasonReady and ReasonNotReady describe the Ready condition.
	ReasonReady    = "Ready"
	ReasonNotReady = "NotReady"
	// ReasonScaledToZero (Ready True): the MyApp asks for 0 replicas and
	// every cluster that keeps its Work confirmed it runs none; the
	// message is "0/0 replicas". Scaling to zero is a healthy state.
	ReasonScaledToZero = "ScaledToZero"

	// ReasonHeartbeating: the agent heartbeats (MemberCluster Ready).
	ReasonHeartbeating = "Heartbeating"
	// ReasonHeartbeatMissed: no heartbeat within the grace period.
	ReasonHeartbeatMissed = "HeartbeatMissed"
	// ReasonPartitionBrake (MemberCluster Ready Unknown, and the hub's
	// PartitionBrake condition): the member is past the grace period but
	// not tainted unreachable, because more than the brake's share of the
	// fleet fell silent at once and the hub assumes it is the one cut off.
	ReasonPartitionBrake = "PartitionBrake"
	// ReasonEvictionRateLimited (MemberCluster Ready Unknown): the member
	// is past the grace period and waits for the eviction rate limit
	// before it is tainted unreachable.
	ReasonEvictionRateLimited = "EvictionRateLimited"
	// ReasonDraining (MemberCluster Draining True): Works are left.
	ReasonDraining = "Draining"
	// ReasonNeverConnected: no agent has connected yet.
	ReasonNeverConnected = "NeverConnected"
	// ReasonStreamOpen and ReasonStreamClosed describe Connected.
	ReasonStreamOpen   = "StreamOpen"
	ReasonStreamClosed = "StreamClosed"
	// ReasonFleetMismatch (Connected False): the member's agent refused
	// this hub because it serves another fleet (hub) or cluster name, and
	// applies nothing from it; the message says what differs and how to
	// re-point the agent on purpose.
	ReasonFleetMismatch = "FleetMismatch"

	// ReasonAwaitingPruneConfirmation (PruneBlocked True): the prune waits
	// for an admin's confirmation.
	ReasonAwaitingPruneConfirmation = "AwaitingConfirmation"
	// ReasonPruned (PruneBlocked False): the agent pruned to its latest
	// snapshot, with or without a confirmation.
	ReasonPruned = "Pruned"
	// ReasonNotAccepted (Connected False): the member joined but waits for
	// an admin's `kubectl flotilla accept`, or was denied.
	ReasonNotAccepted = "NotAccepted"
	// ReasonKubeconfigInvalid: a Push member's kubeconfig Secret is
	// missing, lacks its key, or holds no usable kubeconfig (Ready False).
	ReasonKubeconfigInvalid = "KubeconfigInvalid"
	// ReasonPushing: the hub reaches a Push member's apiserver itself
	// (Connected True).
	ReasonPushing = "Pushing"
	// ReasonPushUnreachable: the hub cannot reach a Push member's
	// apiserver (Connected False).
	ReasonPushUnreachable = "Unreachable"
)

// Reasons a placement decision gives a target cluster (TargetCluster.Reason).
const (
	// TargetReasonKeptAtZero: the MyApp is scaled to zero, and the cluster
	// keeps the app's Work and Deployment at 0 replicas — Divided: where
	// the app last ran; Duplicated: every selected cluster — so that
	// scaling back reuses them.
	TargetReasonKeptAtZero = "KeptAtZero"
)
