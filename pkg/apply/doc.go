// Package apply makes one cluster run one Work: it applies the Work's
// manifests with server-side apply, refuses to take over objects Flotilla
// does not own, records what it applied, deletes and prunes only what it
// recorded, tells a caller when a live object has drifted from what was
// applied, and computes the Work's status from the live objects. The agent
// uses it against its member cluster; a hub push mode can use it against a
// member it reaches directly. Every rule about what may be deleted lives
// here, so both transports follow the same ones.
//
// # Ownership
//
// Every object Apply writes carries the label flotilla.dev/work with
// v1alpha1.WorkLabelValue(work name) and the annotation flotilla.dev/work
// with the full Work name (plus the Work's flotilla.dev/myapp-name and
// flotilla.dev/myapp-namespace labels when it has them), and the labels
// flotilla.dev/fleet and flotilla.dev/cluster with the identity set by
// SetIdentity (a manifest cannot set those itself). An object is owned by
// a Work when it carries the Work's label and annotation and they agree.
// Apply reads an object before it writes it and leaves alone one that
// lacks the Work's label or whose annotation names another Work, reporting
// it with reason NotOwned (it does write an object that carries the label
// but lost the annotation, and puts the annotation back).
//
// # Namespaces
//
// A NamespacePolicy (Options.Namespaces; nil means DefaultNamespacePolicy)
// says where Apply may write: namespaces matching a Denied glob
// (pkg/nspolicy syntax; by default kube-system, kube-public and
// kube-node-lease) never, and, when Allowed is set, only namespaces
// matching one of its globs; a denial wins. Cluster-scoped objects are
// refused unless the policy's ClusterScoped is set: the hub renders only
// namespaced objects, and a cluster-scoped one (a ClusterRoleBinding, a
// webhook configuration) reaches beyond every namespace, so a Work that
// carries one is an escalation. The policy is asked as soon as a
// manifest's scope is known, before its kind is checked against
// Options.Kinds, so such a Work is refused the same way whatever the kind.
// A Namespace object, when allowed at all, is checked by its own name.
//
// Apply refuses a Work whole when the policy refuses any of its objects:
// nothing is applied, recorded or deleted for it, every manifest's Result
// has reason NamespaceDenied (the refused ones naming the namespace and
// the flag, FlagDeniedNamespaces or FlagAllowedNamespaces), and the error
// wraps ErrNamespaceDenied. Applying the allowed part would leave the
// member running half of what the Work's author wrote. What an earlier,
// allowed generation of the Work applied is left exactly as it is (not
// updated, not deleted, still recorded), so a Work moved from team-a into
// kube-system keeps its team-a objects until an allowed generation
// arrives or the Work is deleted, which deletes them by the applied set.
//
// With Options.CreateNamespace, a namespace missing for an object is
// created with the labels flotilla.dev/namespace-created=true,
// flotilla.dev/fleet and flotilla.dev/cluster (so admins see which
// namespaces Flotilla made) and Pod Security Admission's
// pod-security.kubernetes.io/enforce at the Work's spec.podSecurity, else
// Options.DefaultPodSecurity, else baseline, with enforce-version latest.
// A namespace that exists is never relabelled. An Applier never deletes a
// namespace: one it created is not in the applied set and carries no
// Work label, and even a recorded Namespace object (ClusterScoped on,
// Namespace among the kinds) is dropped from the record on deletion, not
// deleted, because deleting a namespace deletes everything in it, whoever
// put it there.
//
// # The applied set
//
// Labels say whose an object claims to be, not that this Applier made it:
// a hub restored from a backup, a re-created Work CRD, a second agent or a
// hand copy all leave objects with the same labels. So the Applier records
// per Work what it applied (group, version, kind, namespace, name, UID) and
// deletes only from that record. With Options.RecordNamespace the record
// is a ConfigMap in that namespace named RecordName(field owner, Work),
// labelled flotilla.dev/applied-set=<field owner> plus the fleet and
// cluster labels, annotated flotilla.dev/work=<Work name>, whose data key
// "objects" holds a JSON list of AppliedObject, and, once an Apply of the
// Work succeeded whole, "workUID" and "workGeneration" name that Work (the
// drift record, below), for example
//
//	objects:        [{"group":"apps","version":"v1","kind":"Deployment","namespace":"shop","name":"web","uid":"6f1c…","generation":3}]
//	workUID:        0b8e…
//	workGeneration: "7"
//
// The records are loaded on first use (or by Load), so a restarted agent
// keeps them. Apply records an object before applying it, without a UID
// when it is new, and writes the UID the apply returned right after: a
// crash in between leaves an entry without UID, which matches a live
// object only by its labels (the Work's, and this fleet's and cluster's).
// Re-applying an unchanged Work writes no record. A record write that
// finds the ConfigMap changed by someone else keeps the union of both, so
// no write loses track of an object.
//
// # Deleting
//
// Delete (one Work), Prune (every Work not in a keep set, after a complete
// snapshot) and Apply (objects a Work no longer names, such as the old
// Deployment after spec.targetNamespace changed, deleted only once every
// manifest of the new version applied) delete a recorded object only when
// the live object still is the recorded one: the same UID (any UID for an
// entry recorded without one), owned by the Work, and carrying this
// Applier's fleet id and cluster name. The delete carries the live UID as
// a precondition. An object that is gone, was replaced, or is no longer
// Flotilla's is left alone and dropped from the record; one whose delete
// failed stays recorded, and the call returns an error to be retried.
//
// Three brakes stand in front of every deletion:
//   - Identity: without a fleet id (SetIdentity) nothing is deleted
//     (ErrNoIdentity).
//   - Fence: Options.Fence is called before each batch of deletions; the
//     agent checks it still holds its leader lease, so a paused old
//     leader cannot delete after a new one took over.
//   - Deletion brake: a Prune that would delete more of the recorded
//     objects than Options.Brake allows (by default more than half AND
//     more than five objects; see Brake and the pure BrakeHolds) deletes
//     nothing and returns a *PruneBlockedError until it is called
//     confirmed. Deletions of one Work at a time are not braked.
//
// # Orphaning
//
// Forget drops one Work's record (its ConfigMap) and deletes nothing else.
// The agent calls it when the hub lost a Work without meaning to delete it
// (WorkOrphan: the Work CRD or namespace deleted, a hand kubectl delete
// work). The objects keep running with Flotilla's labels, annotation and
// field ownership, but since Delete and Prune act only on recorded
// objects, nothing can delete them any more: a later Prune, even
// confirmed, leaves them alone, and so does an agent restart. Applying a
// Work of the same name adopts them again (they carry its label, so Apply
// may write them) and records them anew; removing them otherwise is a
// person's job. A Forget that fails leaves the record, and the Work
// applied, and is to be retried.
//
// # Shared dependencies
//
// A manifest labelled v1alpha1.LabelDependency "true" (a ConfigMap,
// Secret or ServiceAccount a MyApp's pods use) may be named by several
// Works. Apply writes it without the Work's label and annotation (they
// would flip between the Works, each flip looking like drift to the
// others), with the fleet, cluster and LabelMyAppNamespace labels, and
// only over a live object that is a dependency of the same hub namespace
// and, where labelled, of this fleet and cluster (IsShared,
// sharedClaimable); else NotOwned. It does not overwrite a live copy whose
// v1alpha1.AnnotationSourceVersion is a larger number than the manifest's
// (another Work rendered later put it there), and reports it applied.
// Each Work's applied set records it like any object, and the applied
// sets are its reference count (Holders): Delete, Prune, a dropped
// manifest and an Orphan release act on it only when no other Work's
// record holds it. That decision and the deletion run under the write
// side of sharedMu; an Apply records and applies its shared objects under
// the read side, so a deletion never removes an object an Apply just
// counted on. Forget of a Work whose shared object other Works still hold
// marks it v1alpha1.AnnotationKeptForOrphans, and its last holder then
// releases it instead of deleting it, since the orphaned pods may use it.
//
// # Reads and writes
//
// An Applier reads through a kclient.Reader and writes through a
// kclient.Client (pkg/kclient: a narrow client, so that this package links
// neither controller-runtime's client nor client-go's scheme of every API
// group; pkg/kclient/crclient adapts a controller-runtime client or cache to
// it). So a caller can read from a cache that holds only Flotilla's
// labelled objects (records, though, are always read and written through
// the client, as unstructured ConfigMaps). Such a cache cannot see an
// unowned object, so when the reader says an object does not exist Apply
// asks the writer again before creating it: one extra live read per
// create, none per update. All reads and writes use unstructured objects,
// so no scheme registration is needed for the kinds applied, and a
// controller-runtime manager client (which by default does not cache
// unstructured objects) reads live.
//
// # Drift
//
// Server-side apply of an unchanged configuration is a no-op on the server,
// but it is still a request per object. To let a caller skip it, the Applier
// remembers, per Work, the Work's UID and generation and, per object, its
// UID and metadata.generation as the apiserver returned them right after the
// apply. metadata.generation moves only when an object's spec changes, so a
// status update (the Deployment controller's, every few seconds during a
// rollout) does not look like drift while a hand edit of the spec does.
// NeedsApply compares the Work and the live objects (typically from the
// caller's cache) with that record.
//
// The drift record is also kept in the applied set, so that a restarted
// Applier (a new agent process, a new hub leader in push mode) resumes
// without re-applying unchanged Works: each AppliedObject carries its
// generation (its resourceVersion for a kind without one), and the record
// the Work's UID and generation ("workUID", "workGeneration": the mark).
// The mark says that an Apply of that Work succeeded whole and left
// exactly the recorded objects at their recorded versions, so every other
// record write (before an apply, after a partial one, a deletion, the
// union with someone else's record) drops it. A first apply writes the
// mark with the UIDs, in the same request; a later Apply that moved the
// Work's generation or an object's version (an update, a drift repair)
// writes the record once at its end, and re-applying an unchanged Work
// writes nothing. When that write finds objects another writer recorded
// (kept by the union), the Work needs another Apply, also in memory, which
// removes what it no longer names. That last write is best effort: a failure is logged, the
// Apply succeeds, the in-memory drift record stays right and the record
// keeps its objects with the older mark, which proves less, never more (a
// restart applies the Work once more; the next Apply writes it again).
//
// Load restores the drift record for each Work whose record has the mark
// and, for every object, a UID and a version; for any other Work (a record
// written by an older Applier, an apply that did not finish) NeedsApply
// says true until an Apply succeeds, which then upgrades the record. So
// after a restart Applied lists what the records prove was applied, not
// what was applied in this process; pkg/works' Store filters it by the
// Works the hub sent it. Delete, Prune and Forget drop a Work's drift
// record with its applied set, also when their first load restored it.
//
// # Status
//
// WorkStatus is a pure function from the Work, the apply results and the
// live objects (plus, for a Deployment that is not available, its pods) to
// a v1alpha1.WorkStatus. It uses the Deployment controller's own reasons
// (ProgressDeadlineExceeded, FailedCreate) and the kubelet's container
// waiting reasons (ImagePullBackOff, CrashLoopBackOff) where they exist.
// Applier.ReadLive gathers its input with one read per object, and one pod
// list only for a Deployment that is not available. Applier.Status without
// results, for a Work whose drift record a restart restored at its UID and
// generation, takes every recorded object as applied: a caller that skips
// the apply because NeedsApply says false reports the Work as it runs.
package apply
