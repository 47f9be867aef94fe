package v1alpha1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The API's defaults, written once. The CRD applies them through
// +kubebuilder:default markers (a marker cannot name a Go constant, so
// defaults_test.go fails when the generated CRD and these constants
// differ); the MyApp webhook fills them in, and the controllers and the
// scheduler assume them for fields a client left unset.
const (
	// DefaultReplicas is spec.replicas when unset.
	DefaultReplicas int32 = 1

	// DefaultReplicaSchedulingType is
	// spec.placement.replicaScheduling.replicaSchedulingType when unset.
	DefaultReplicaSchedulingType = ReplicaSchedulingDuplicated
	// DefaultReplicaDivisionPreference is the division preference of a
	// Divided MyApp that sets none. The webhook and the scheduler apply it;
	// the CRD cannot, since it depends on replicaSchedulingType.
	DefaultReplicaDivisionPreference = ReplicaDivisionWeighted

	// DefaultUnreachableTolerationSeconds is how long replicas stay on a
	// cluster tainted unreachable before they are moved
	// (spec.failover.clusterUnreachable.tolerationSeconds). With the hub's
	// default 14s heartbeat grace, replicas move 19s after the last
	// heartbeat: long enough that no hub or agent restart moves them, short
	// enough that a lost member's replicas run elsewhere within 30s (the
	// timing budget in docs/architecture.md).
	DefaultUnreachableTolerationSeconds int32 = 5
	// DefaultPurgeMode is spec.failover.clusterUnreachable.purgeMode when
	// unset.
	DefaultPurgeMode = PurgeGraciously
	// DefaultGracePeriodSeconds bounds how long a Graciously purged Work
	// waits for its replacements
	// (spec.failover.clusterUnreachable.gracePeriodSeconds).
	DefaultGracePeriodSeconds int32 = 600

	// DefaultFailbackEnabled is spec.failover.failback.enabled when unset.
	DefaultFailbackEnabled = true
	// DefaultFailbackWindowSeconds is how long a recovered cluster must stay
	// Ready before replicas return
	// (spec.failover.failback.stabilizationWindowSeconds).
	DefaultFailbackWindowSeconds int32 = 30

	// DefaultDeletionPolicy is a MyApp's and a Work's spec.deletionPolicy
	// when unset: what Flotilla stops managing is deleted.
	DefaultDeletionPolicy = DeletionPolicyDelete

	// DefaultRolloutOnConfigChange is spec.rolloutOnConfigChange when
	// unset: a changed ConfigMap or Secret rolls the pods that use it.
	DefaultRolloutOnConfigChange = true

	// DefaultServiceType is spec.service.type when unset.
	DefaultServiceType = corev1.ServiceTypeClusterIP
	// DefaultServiceProtocol is spec.service.ports[].protocol when unset.
	DefaultServiceProtocol = corev1.ProtocolTCP
	// DefaultMemberClusterDeletionPolicy is a MemberCluster's
	// spec.deletionPolicy when unset: removing a cluster from the fleet
	// leaves its workloads running.
	DefaultMemberClusterDeletionPolicy = DeletionPolicyOrphan
	// DefaultAcceptance is a MemberCluster's spec.acceptance when unset:
	// an admin who creates a MemberCluster has accepted it; a join sets
	// Pending itself unless its token auto-accepts.
	DefaultAcceptance = AcceptanceAccepted

	// DefaultRolloutStrategy is spec.rollout.strategy when unset.
	DefaultRolloutStrategy = RolloutAll
	// DefaultMaxConcurrency is spec.rollout.progressive.maxConcurrency
	// when unset: one cluster at a time.
	DefaultMaxConcurrency int32 = 1
	// DefaultMaxFailures is spec.rollout.progressive.maxFailures when
	// unset: the first failed cluster stops the rollout.
	DefaultMaxFailures int32 = 0
	// DefaultMinSuccessTime is spec.rollout.progressive.minSuccessTime when
	// unset: a cluster succeeds as soon as it is updated and available.
	DefaultMinSuccessTime time.Duration = 0
	// DefaultProgressDeadline is spec.rollout.progressive.progressDeadline
	// when unset.
	DefaultProgressDeadline = 10 * time.Minute
	// DefaultOnFailure is spec.rollout.progressive.onFailure when unset.
	DefaultOnFailure = RolloutFailurePause

	// DefaultSyncMode is a MemberCluster's spec.syncMode when unset.
	DefaultSyncMode = SyncModePull
	// DefaultKubeconfigKey is the key of a Push member's kubeconfig Secret
	// (spec.push.kubeconfigSecretRef.key) when unset.
	DefaultKubeconfigKey = "kubeconfig"
)

// RollsOnConfigChange is spec.rolloutOnConfigChange with its default.
func (s *MyAppSpec) RollsOnConfigChange() bool {
	if s.RolloutOnConfigChange == nil {
		return DefaultRolloutOnConfigChange
	}
	return *s.RolloutOnConfigChange
}
