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
// "objects" holds a JSON list of AppliedObject, for example
//
//	[{"group":"apps","version":"v1","kind":"Deployment","namespace":"shop","name":"web","uid":"6f1c…"}]
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
// # Reads and writes
//
// An Applier reads through a client.Reader and writes through a
// client.Client, so a caller can read from a cache that holds only
// Flotilla's labelled objects (records, though, are always read and
// written through the client, as unstructured ConfigMaps). Such a cache cannot see an unowned object, so
// when the reader says an object does not exist Apply asks the writer again
// before creating it: one extra live read per create, none per update. All
// reads and writes use unstructured objects, so no scheme registration is
// needed for the kinds applied, and a controller-runtime manager client
// (which by default does not cache unstructured objects) reads live.
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
// caller's cache) with that record. The record lives in memory: after a
// restart every Work needs one apply, which is a no-op for unchanged
// objects.
//
// # Status
//
// WorkStatus is a pure function from the Work, the apply results and the
// live objects (plus, for a Deployment that is not available, its pods) to
// a v1alpha1.WorkStatus. It uses the Deployment controller's own reasons
// (ProgressDeadlineExceeded, FailedCreate) and the kubelet's container
// waiting reasons (ImagePullBackOff, CrashLoopBackOff) where they exist.
// Applier.ReadLive gathers its input with one read per object, and one pod
// list only for a Deployment that is not available.
package apply
