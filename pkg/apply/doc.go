// Package apply makes one cluster run one Work: it applies the Work's
// manifests with server-side apply, refuses to take over objects Flotilla
// does not own, deletes and prunes what it applied, tells a caller when a
// live object has drifted from what was applied, and computes the Work's
// status from the live objects. The agent uses it against its member
// cluster; a hub push mode can use it against a member it reaches directly.
//
// # Ownership
//
// Every object Apply writes carries the label flotilla.dev/work with
// v1alpha1.WorkLabelValue(work name) and the annotation flotilla.dev/work
// with the full Work name (plus the Work's flotilla.dev/myapp-name and
// flotilla.dev/myapp-namespace labels when it has them). An object is owned
// by a Work when it carries both and they agree. Apply reads an object
// before it writes it and leaves alone one that lacks the Work's label or
// whose annotation names another Work, reporting it with reason NotOwned
// (it does write an object that carries the label but lost the annotation,
// and puts the annotation back). Delete and Prune only ever touch owned
// objects, so an unlabelled object is never deleted.
//
// # Reads and writes
//
// An Applier reads through a client.Reader and writes through a
// client.Client, so a caller can read from a cache that holds only
// Flotilla's labelled objects. Such a cache cannot see an unowned object, so
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
