package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
)

// Labels, annotations, taints, finalizers, namespaces and field owners that
// Flotilla's components agree on. They are part of the API: agents, the hub
// and users' tooling select on them.
const (
	// LabelWork is set on every object an agent applies; its value is the
	// Work's name. Agents prune and delete only objects carrying it.
	LabelWork = "flotilla.dev/work"
	// AnnotationWork holds the full name of the Work an applied object came
	// from (LabelWork's value is shortened when the name is too long for a
	// label).
	AnnotationWork = "flotilla.dev/work"
	// LabelMyAppName and LabelMyAppNamespace tie a Work (on the hub) and the
	// objects rendered from it (in members) to the MyApp they came from.
	LabelMyAppName      = "flotilla.dev/myapp-name"
	LabelMyAppNamespace = "flotilla.dev/myapp-namespace"
	// LabelDependency, set to "true" on a manifest, marks an object that
	// several Works may share: a ConfigMap, Secret or ServiceAccount a
	// MyApp's pods reference, copied from the MyApp's hub namespace. Such
	// an object carries no LabelWork or AnnotationWork (which would flip
	// between the Works applying it); it belongs to the fleet, the
	// cluster and the hub namespace its LabelMyAppNamespace names, and an
	// applier deletes it only when no other Work's applied set holds it.
	LabelDependency = "flotilla.dev/dependency"
	// AnnotationSourceVersion, on a dependency, is the resourceVersion of
	// the hub object it was copied from. An applier does not overwrite a
	// dependency whose live copy came from a newer version (another
	// MyApp's Work was rendered after this one), so Works rendered a
	// moment apart do not take the object from each other.
	AnnotationSourceVersion = "flotilla.dev/source-version"
	// AnnotationKeptForOrphans, "true" on a shared dependency, says a Work
	// that used it was orphaned (forgotten, its objects left running):
	// when the last Work that still holds it goes, the dependency is
	// released (left running without Flotilla's labels), not deleted, since
	// the orphaned pods may still use it.
	AnnotationKeptForOrphans = "flotilla.dev/kept-for-orphans"
	// AnnotationConfigHash, on a MyApp's pod template in the members, is a
	// hash of the ConfigMaps and Secrets its pods use (when
	// spec.rolloutOnConfigChange is on): a change of their content
	// changes the pod template, so the pods roll.
	AnnotationConfigHash = "flotilla.dev/config-hash"
	// LabelCluster names the member cluster a Work is for.
	LabelCluster = "flotilla.dev/cluster"
	// LabelRevision is set on a Progressive MyApp's Works (on the hub) to
	// the rollout revision they render, so the rollout knows whether a
	// Work's reported status is about the revision it waits for.
	LabelRevision = "flotilla.dev/revision"
	// LabelNamespaceCreated marks a member namespace that an applier
	// created (with LabelFleet and LabelCluster beside it). Appliers never
	// delete a namespace; the label tells admins which ones Flotilla made.
	LabelNamespaceCreated = "flotilla.dev/namespace-created"

	// TaintClusterUnreachable is put on a MemberCluster, with effect
	// NoExecute and the time it was added, when its heartbeats stop for
	// longer than the hub's grace period. It is removed when they resume.
	TaintClusterUnreachable = "flotilla.dev/unreachable"

	// AnnotationConfirmPrune, on a MemberCluster, confirms the prune its
	// agent's deletion brake held: its value is the epoch the PruneBlocked
	// condition names. The hub sends the confirmation to the agent, which
	// then prunes to what the hub wants at that time.
	AnnotationConfirmPrune = "flotilla.dev/confirm-prune"
	// AnnotationAcceptFleetID, on an agent's identity ConfigMap, re-points
	// the agent on purpose: when a hub with this fleet id connects, the
	// agent serves it and records it instead of refusing it. The agent
	// removes the annotation once used; its flag --accept-fleet-id does
	// the same for as long as it is set.
	AnnotationAcceptFleetID = "flotilla.dev/accept-fleet-id"
	// AnnotationDeletionIntent, on a Work, says the hub means to delete
	// it and why (DeletionIntentMyAppDeleted, DeletionIntentDescheduled).
	// The MyApp controller sets it right before it deletes a Work. Only
	// the deletion of a Work that carries it makes the agent delete the
	// member objects; a Work that vanishes without it (its CRD or
	// namespace deleted, a hand kubectl delete work, the hub uninstalled)
	// orphans them instead: the agent forgets the Work and the objects
	// keep running.
	AnnotationDeletionIntent = "flotilla.dev/deletion-intent"
	// FleetConfigMapName is the ConfigMap the hub creates once in its own
	// namespace; its UID is the fleet id. A hub restored from a backup or
	// installed again creates a new one, and so has a new fleet id.
	FleetConfigMapName = "flotilla-fleet"
	// AgentIdentityConfigMapName is the ConfigMap in the agent's namespace
	// in the member that records which fleet id and cluster name the agent
	// serves (keys fleetID and clusterName).
	AgentIdentityConfigMapName = "flotilla-agent-identity"
	// HubStatusConfigMapName is the ConfigMap in the hub's namespace where
	// the hub reports fleet-wide health decisions: whether the partition
	// brake holds (keys partitionBrake, message, since, heldClusters, and
	// conditions with the PartitionBrake condition as JSON).
	HubStatusConfigMapName = "flotilla-hub-status"

	// MyAppFinalizer holds a MyApp until its Works are gone from the hub.
	MyAppFinalizer = "flotilla.dev/cleanup"
	// MemberClusterFinalizer holds a deleted MemberCluster until the hub
	// drained it: its replicas moved to other members and its Works gone.
	MemberClusterFinalizer = "flotilla.dev/drain"
	// WorkFinalizer holds a deleted Work until its member's agent confirms
	// it holds nothing of it any more (WorkGone), or the hub's
	// --work-cleanup-timeout ends (the MyApp's status.orphans then names
	// the member).
	WorkFinalizer = "flotilla.dev/member-cleanup"

	// ClusterNamespacePrefix prefixes the hub namespace that holds one
	// member's Works: flotilla-cluster-<member name>.
	ClusterNamespacePrefix = "flotilla-cluster-"

	// MaxClusterNameLength keeps flotilla-cluster-<name> a valid namespace
	// name (63 characters at most).
	MaxClusterNameLength = 63 - len(ClusterNamespacePrefix)

	// SystemNamespace is the namespace the hub and the agents run in
	// unless told otherwise (deploy/ installs them there); it holds their
	// leader election Leases.
	SystemNamespace = "flotilla-system"

	// FieldOwnerHub is the server-side apply field manager of the Works the
	// hub writes for MyApps.
	FieldOwnerHub = "flotilla-hub"
	// FieldOwnerHubStatus is the field manager of the Work status the hub
	// writes from its agents' reports. It differs from FieldOwnerHub so
	// that spec and status writes never take each other's fields.
	FieldOwnerHubStatus = "flotilla-hub-status"
	// FieldOwnerAgent is the field manager an agent applies a Work's
	// objects with in its member (pkg/apply's default field owner).
	FieldOwnerAgent = "flotilla-agent"

	// LabelFleet holds the fleet identity of the hub that an applied object
	// (or an applier's record of it) came from. Together with LabelCluster,
	// which on an applied object names the member it was applied to, it is
	// what an applier checks before deleting anything: an object of another
	// fleet or another cluster name is never deleted.
	LabelFleet = "flotilla.dev/fleet"
	// LabelAppliedSet marks the ConfigMaps in which an applier records, per
	// Work, the objects it applied (its applied set); the value is the
	// applier's field owner, so the agent and a hub push applier keep
	// separate records.
	LabelAppliedSet = "flotilla.dev/applied-set"

	// AgentSignerName is the signerName of the Kubernetes
	// CertificateSigningRequests through which agents get their client
	// certificates. The hub creates them (for a Register or Renew call
	// it authenticated), approves them when the MemberCluster is
	// Accepted, and signs them with its agent CA.
	AgentSignerName = "flotilla.dev/agent"
	// BootstrapTokenSecretType is the type of the Secrets in the hub's
	// namespace that hold bootstrap tokens (`kubectl flotilla token`).
	BootstrapTokenSecretType = "flotilla.dev/bootstrap-token"
	// BootstrapTokenSecretPrefix prefixes a token Secret's name; the
	// token id follows: flotilla-token-<id>.
	BootstrapTokenSecretPrefix = "flotilla-token-"
	// LabelJoinToken, on a MemberCluster and its CertificateSigningRequests,
	// is the id of the bootstrap token the member joined with.
	LabelJoinToken = "flotilla.dev/join-token"
	// LabelCertificateRequest, on a CertificateSigningRequest, says what
	// the hub created it for: "register" (first certificate, with a
	// token) or "renew" (authenticated by the current certificate).
	LabelCertificateRequest = "flotilla.dev/certificate-request"
	// HubCASecretName is the Secret in the hub's namespace holding the
	// hub's CA (tls.crt, tls.key): it signs agent certificates, the sync
	// server's and the webhook's serving certificates. Agents pin it by
	// the hash of its public key.
	HubCASecretName = "flotilla-hub-ca"
	// AgentCredentialsSecretName is the Secret in the agent's namespace in
	// the member holding its key, its certificate (once issued), the hub
	// CA it pinned, the hub address and a pending request's name.
	AgentCredentialsSecretName = "flotilla-agent-credentials"
	// AgentBootstrapSecretName is the Secret in the agent's namespace that
	// `kubectl flotilla join` writes: hub address, token, CA hash, cluster
	// name and labels. The agent deletes it once it holds a certificate.
	AgentBootstrapSecretName = "flotilla-agent-bootstrap"
)

// ClusterNamespace is the hub namespace that holds the Works of cluster name.
func ClusterNamespace(cluster string) string { return ClusterNamespacePrefix + cluster }

// WorkName is the name of the Work that carries MyApp namespace/name to a
// member: "<namespace>.<name>". Namespaces cannot contain dots, so the name
// is unique per cluster namespace and can be split back.
func WorkName(namespace, name string) string { return namespace + "." + name }

// WorkLabelValue is LabelWork's value for the Work called name: the name
// itself when it fits a label value (63 characters), otherwise a prefix and
// a hash of the whole name, so the value stays unique and readable.
func WorkLabelValue(name string) string {
	if len(name) <= 63 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	prefix := name[:52]
	// A label value must end with an alphanumeric character; the hash does.
	return prefix + "-" + hex.EncodeToString(sum[:])[:10]
}

// Values of AnnotationDeletionIntent: why the hub deletes a Work.
const (
	// DeletionIntentMyAppDeleted: the Work's MyApp was deleted (or is
	// gone and its Works are cleaned up).
	DeletionIntentMyAppDeleted = "MyAppDeleted"
	// DeletionIntentDescheduled: the scheduler no longer places the MyApp
	// on the Work's cluster (moved away, evicted, the placement changed,
	// the MemberCluster drained for its deletion).
	DeletionIntentDescheduled = "Descheduled"
)
