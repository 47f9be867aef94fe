package server

import (
	"context"
	"time"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// WorkSource is where the server reads the Works each cluster should run.
// The hub backs it with an informer on Works; the server only reads it, and
// learns of changes through Server.WorkChanged.
//
// Implementations must be safe for concurrent use and should answer from
// memory: they are called on every agent's send path.
type WorkSource interface {
	// HasSynced reports whether the source has seen every Work at least
	// once. Until it has, the server sends no snapshot, because a snapshot
	// from a cold cache would tell agents to delete everything they run.
	HasSynced() bool
	// ListWorks returns the Works cluster should run, that is those in the
	// hub namespace flotilla-cluster-<cluster>. Works being deleted should
	// be left out. The server does not modify what it is given.
	ListWorks(cluster string) ([]*v1alpha1.Work, error)
	// GetWork returns one Work of cluster, or nil and no error when there
	// is none (or it is being deleted).
	GetWork(cluster, name string) (*v1alpha1.Work, error)
	// DeletionIntent says how Work name of cluster last disappeared (was
	// deleted, or marked for deletion): known is false when the source saw
	// no such thing, or no longer remembers it; reason is the value of the
	// Work's annotation flotilla.dev/deletion-intent then, empty when it
	// had none. The source must record it before it tells the server the
	// Work changed. The server sends WorkDelete only for a reason that is
	// not empty, and WorkOrphan otherwise.
	DeletionIntent(cluster, name string) (reason string, known bool)
}

// ClusterRegistry says which clusters the hub knows. The hub answers from
// its MemberCluster cache.
type ClusterRegistry interface {
	// ClusterKnown reports whether a MemberCluster named cluster exists.
	// An error is a failure to find out, not a "no".
	ClusterKnown(ctx context.Context, cluster string) (bool, error)
}

// RevocationChecker is implemented by a ClusterRegistry that knows which
// agent certificates are revoked. The hub's answers from the
// MemberCluster cache (spec.revokedCertificates). The server asks on
// every RPC, and again for a live stream whenever ClusterChanged is
// called; a registry without it revokes nothing.
type RevocationChecker interface {
	// Revoked reports whether the certificate with this SHA-256
	// fingerprint (lower-case hex of the DER) is revoked for cluster. An
	// unknown cluster revokes nothing (ClusterKnown refuses it). An error
	// is a failure to find out, not a "no".
	Revoked(ctx context.Context, cluster, fingerprint string) (bool, error)
}

// AdmissionChecker is implemented by a ClusterRegistry that decides
// whether the member a verified certificate names may be served at all.
// The hub's admits a MemberCluster that is Accepted and, when the
// certificate carries a member UID (a join-issued one), whose UID it is:
// a MemberCluster deleted and created again under the same name refuses
// the old certificates. The server asks on every authenticated RPC, and
// again for a live stream whenever ClusterChanged is called; a registry
// without it admits every known cluster.
type AdmissionChecker interface {
	// Admitted reports whether cluster's agent, presenting a certificate
	// that carries memberUID ("" for none), may be served; when it may
	// not, why says so for a person, naming what to do (it becomes the
	// PERMISSION_DENIED status's message). An unknown cluster is
	// admitted (ClusterKnown refuses it). An error is a failure to find
	// out, not a "no".
	Admitted(ctx context.Context, cluster, memberUID string) (admitted bool, why string, err error)
}

// StatusSink receives the status agents report for their Works. It is
// called on the reporting agent's stream, one report at a time, so a slow
// sink slows that agent's reports (which the agent coalesces) and no one
// else's. The hub batches these into Work status patches.
type StatusSink interface {
	// WorkStatus records status as cluster's agent reported it for the Work
	// name in cluster's namespace. The server has already checked that the
	// agent may report on it.
	WorkStatus(ctx context.Context, cluster, name string, status *v1alpha1.WorkStatus)
}

// DeletionSink completes the deletion of Works their agent is done with.
// The hub's Works carry a finalizer (flotilla.dev/member-cleanup) that
// holds a deleted Work until its member confirms.
type DeletionSink interface {
	// WorkGone says cluster's agent holds nothing of Work name in
	// cluster's namespace: it deleted or released the Work's objects,
	// forgot them, or never held the Work. It is called on that agent's
	// stream. A Work of that name that is not being deleted is left
	// alone (it is a new one).
	WorkGone(ctx context.Context, cluster, name string)
}

// TerminatingLister is implemented by a WorkSource that can also list the
// Works of a cluster that are being deleted (held by their finalizer):
// after an agent's hello, the server confirms those the agent does not
// hold.
type TerminatingLister interface {
	TerminatingWorks(cluster string) ([]string, error)
}

// AgentSink learns when agents come and go and when they heartbeat, so the
// hub can keep the MemberCluster Connected and Ready conditions, last
// heartbeat time, agent info and resource summary up to date.
//
// AgentConnected and AgentDisconnected are called in order for each
// cluster and must return quickly: they are serialised across all clusters.
// When a newer stream replaces an older one, the hub sees AgentConnected
// for the newer one and no AgentDisconnected for the older one, since the
// cluster never stopped being connected.
type AgentSink interface {
	// AgentConnected says an agent of cluster holds the stream now.
	AgentConnected(cluster string, info AgentInfo)
	// AgentHeartbeat says cluster's agent is alive. It is called on that
	// agent's stream, so a slow sink slows only that agent.
	AgentHeartbeat(cluster string, hb Heartbeat)
	// AgentDisconnected says cluster has no stream any more; reason is why
	// the last one ended.
	AgentDisconnected(cluster string, reason error)
	// AgentRefused says an agent with cluster's certificate refused this
	// hub: it serves another fleet, or the same fleet under another
	// cluster name. It applied nothing. Its stream ends at once; it was
	// never connected, so no AgentConnected came before and no
	// AgentDisconnected follows, and a connected agent of cluster (if
	// any) keeps its stream.
	AgentRefused(cluster string, r Refusal)
	// AgentPruneBlocked says cluster's agent did not prune after the
	// snapshot of b.Epoch because its deletion brake held the prune.
	AgentPruneBlocked(cluster string, b PruneBlocked)
	// AgentPruned says cluster's agent pruned to the snapshot of epoch
	// (confirmed: after an admin's confirmation), so no prune is held.
	AgentPruned(cluster string, epoch uint64, confirmed bool)
}

// Refusal is an agent's refusal of this hub, as it sent it.
type Refusal struct {
	// Reason is the agent's explanation, for a person.
	Reason string
	// RecordedFleetID and RecordedCluster are the fleet id and cluster
	// name the agent serves.
	RecordedFleetID string
	RecordedCluster string
	// Peer is the agent's network address as the hub sees it.
	Peer string
}

// PruneBlocked is an agent's report of a prune its deletion brake held.
type PruneBlocked struct {
	// Epoch is the snapshot's epoch; ConfirmPrune(cluster, Epoch)
	// releases the prune.
	Epoch uint64
	// WouldDelete and Held count applied objects: how many the prune
	// would delete, and how many the agent holds.
	WouldDelete int64
	Held        int64
	// Works names the Works whose objects the prune would delete (maybe
	// only the first of them; the counts are complete).
	Works []string
}

// AgentInfo describes a connected agent.
type AgentInfo struct {
	// Identity is what the agent's certificate proved, the URI SAN
	// flotilla://cluster/<name>.
	Identity string
	// Version, Instance and KubernetesVersion are as the agent said in its
	// hello; they are descriptive only and nothing is decided on them.
	Version           string
	Instance          string
	KubernetesVersion string
	// Resources is the resource summary from the hello, if any.
	Resources *v1alpha1.ResourceSummary
	// Peer is the agent's network address as the hub sees it.
	Peer string
	// ConnectedAt is when the hub accepted the stream.
	ConnectedAt time.Time
}

// Heartbeat is one heartbeat from an agent.
type Heartbeat struct {
	// Time is when the hub received it; the hub uses its own clock so a
	// member's clock skew cannot make it look alive or dead.
	Time time.Time
	// Resources is the agent's resource summary, nil when it had none.
	Resources *v1alpha1.ResourceSummary
}
