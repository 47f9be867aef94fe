package apply

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
)

// recordObjectsKey is the ConfigMap data key holding a record's objects as
// a JSON array of AppliedObject.
const recordObjectsKey = "objects"

// recordPolicyKey is the ConfigMap data key holding the Work's deletion
// policy when it is not Delete.
const recordPolicyKey = "deletionPolicy"

// recordWorkUIDKey and recordWorkGenerationKey are the ConfigMap data keys
// holding the UID and generation (decimal) of the Work whose Apply last
// succeeded whole, with the objects' versions the record holds: the drift
// record a restarted Applier resumes from. A record without them (written
// before an apply finished, or by an older Applier) proves nothing.
const (
	recordWorkUIDKey        = "workUID"
	recordWorkGenerationKey = "workGeneration"
)

// AppliedObject is one object in a Work's applied set: what the Applier
// applied (or is about to apply) for the Work. UID is empty for an object
// recorded before its first apply returned; such an entry matches a live
// object only by Flotilla's labels (the Work's, the fleet's and the
// cluster's).
//
// Generation, or ResourceVersion for a kind without a generation, is the
// object's version as an apply of the Work returned it: what NeedsApply
// compares after a restart. Both are empty for an object not applied yet
// and in records written before they existed.
type AppliedObject struct {
	v1alpha1.ResourceIdentifier `json:",inline"`
	UID                         types.UID `json:"uid,omitempty"`
	Generation                  int64     `json:"generation,omitempty"`
	ResourceVersion             string    `json:"resourceVersion,omitempty"`
}

// version is o's recorded version, as NeedsApply compares it; ok is false
// when none was recorded.
func (o AppliedObject) version() (v objectVersion, ok bool) {
	switch {
	case o.Generation != 0:
		return objectVersion{generation: o.Generation}, true
	case o.ResourceVersion != "":
		return objectVersion{resourceVersion: o.ResourceVersion}, true
	default:
		return objectVersion{}, false
	}
}

// withVersion is o carrying v.
func (o AppliedObject) withVersion(v objectVersion) AppliedObject {
	o.Generation, o.ResourceVersion = v.generation, v.resourceVersion
	return o
}

// appliedMark names the Work whose Apply last succeeded whole: its UID
// (empty: no mark) and generation.
type appliedMark struct {
	uid        types.UID
	generation int64
}

// record is one Work's applied set as the Applier last read or wrote it.
// Records are replaced, never changed in place, so a copy taken under
// appliedSet.mu stays valid after it is released.
type record struct {
	work    string
	objects []AppliedObject
	// policy is the Work's spec.deletionPolicy as last applied: what
	// Delete and Prune do with the objects (delete or release them).
	policy v1alpha1.DeletionPolicy
	// mark, when set, says that an Apply of that Work UID and generation
	// succeeded whole and left exactly objects, at their recorded
	// versions. Every write that is not such an Apply's clears it.
	mark appliedMark
	// resourceVersion is that of the record's ConfigMap; empty when it has
	// none yet.
	resourceVersion string
}

// drift is the drift record r proves: ok only when r carries a mark and
// every object a UID and a version.
func (r *record) drift() (appliedWork, bool) {
	if r.mark.uid == "" {
		return appliedWork{}, false
	}
	w := appliedWork{uid: r.mark.uid, generation: r.mark.generation, objects: make(map[types.UID]objectVersion, len(r.objects))}
	for _, o := range r.objects {
		v, ok := o.version()
		if o.UID == "" || !ok {
			return appliedWork{}, false
		}
		w.objects[o.UID] = v
	}
	return w, true
}

func (r *record) find(id v1alpha1.ResourceIdentifier) int {
	return slices.IndexFunc(r.objects, func(o AppliedObject) bool { return o.ResourceIdentifier == id })
}

// appliedSet holds every Work's record.
type appliedSet struct {
	mu      sync.Mutex
	loaded  bool
	records map[string]*record
}

func (s *appliedSet) get(work string) *record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records[work]
}

func (s *appliedSet) put(r *record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(r.objects) == 0 && r.resourceVersion == "" {
		delete(s.records, r.work)
		return
	}
	s.records[r.work] = r
}

// holders lists, sorted, the Works other than work whose records hold id.
func (s *appliedSet) holders(id v1alpha1.ResourceIdentifier, work string) []string {
	var out []string
	for _, r := range s.all() {
		if r.work != work && r.find(id) >= 0 {
			out = append(out, r.work)
		}
	}
	slices.Sort(out)
	return out
}

// Holders lists, sorted, the Works whose applied sets hold id: for a shared
// dependency, the Works that use it.
func (a *Applier) Holders(id v1alpha1.ResourceIdentifier) []string {
	return a.set.holders(id, "")
}

// all returns the records, sorted by Work name.
func (s *appliedSet) all() []*record {
	s.mu.Lock()
	out := make([]*record, 0, len(s.records))
	for _, r := range s.records {
		out = append(out, r)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(x, y *record) int { return strings.Compare(x.work, y.work) })
	return out
}

// AppliedSet returns the objects recorded for Work workName, sorted; nil
// when the Applier holds none for it.
func (a *Applier) AppliedSet(workName string) []AppliedObject {
	r := a.set.get(workName)
	if r == nil {
		return nil
	}
	return slices.Clone(r.objects)
}

// RecordedWorks lists, sorted, the Works the applied set holds a record
// of, loading the records from the member on first use: every Work whose
// objects this member may still run, whether or not this process applied
// it (after a restart, or a Delete that failed). Prune acts on exactly
// these.
func (a *Applier) RecordedWorks(ctx context.Context) ([]string, error) {
	if err := a.ensureLoaded(quiet(ctx)); err != nil {
		return nil, err
	}
	recs := a.set.all()
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.work
	}
	return out, nil
}

// HeldObjects is the number of objects recorded for all Works: what the
// deletion brake weighs a prune against.
func (a *Applier) HeldObjects() int {
	n := 0
	for _, r := range a.set.all() {
		n += len(r.objects)
	}
	return n
}

// RecordName is the name of the ConfigMap in which the Applier with field
// owner owner records the applied set of Work workName:
// "<owner>.<work name>", or, when that is too long (or otherwise not a
// valid name), its first 200 characters and a hash of the whole.
func RecordName(owner, workName string) string {
	name := owner + "." + workName
	if len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(owner + "/" + workName))
	hash := hex.EncodeToString(sum[:])
	// A name part must end with a letter or digit; the hash after the dash
	// ends the name with one.
	short := strings.TrimRight(name[:min(len(name), 200)], ".-") + "-" + hash[:10]
	if len(validation.IsDNS1123Subdomain(short)) == 0 {
		return short
	}
	return "flotilla-applied-" + hash[:20]
}

// Load reads the Applier's records from RecordNamespace, replacing what it
// holds in memory. Apply, Delete and Prune call it on first use, so calling
// it is optional; an agent calls it at start to fail early when it cannot
// read its records. Without a RecordNamespace it does nothing.
//
// Load also restores the drift record NeedsApply and Applied use, for
// each Work whose record proves what its last successful Apply left: the
// Work's UID and generation, and a UID and version for every recorded
// object. A record short of any of that (an apply that did not finish, a
// record written by an older Applier) restores nothing, so NeedsApply says
// true for its Work until an Apply succeeds. Works this Applier already
// tracks keep what it tracks.
func (a *Applier) Load(ctx context.Context) error {
	ctx = quiet(ctx)
	a.loadMu.Lock()
	defer a.loadMu.Unlock()
	return a.loadLocked(ctx)
}

// ensureLoaded loads the records once; a failed load is tried again on the
// next call.
func (a *Applier) ensureLoaded(ctx context.Context) error {
	a.loadMu.Lock()
	defer a.loadMu.Unlock()
	a.set.mu.Lock()
	loaded := a.set.loaded
	a.set.mu.Unlock()
	if loaded {
		return nil
	}
	return a.loadLocked(ctx)
}

func (a *Applier) loadLocked(ctx context.Context) error {
	records := map[string]*record{}
	if a.recordNamespace != "" {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("v1")
		list.SetKind("ConfigMapList")
		if err := a.writer.List(ctx, list, kclient.MatchingLabels(a.recordNamespace, map[string]string{v1alpha1.LabelAppliedSet: a.owner})); err != nil {
			return fmt.Errorf("listing the applied-set records in namespace %s: %w", a.recordNamespace, err)
		}
		for i := range list.Items {
			r, err := decodeRecord(&list.Items[i])
			if err != nil {
				// Skipping a record can only leave objects running, never
				// delete one; the next write of the Work's record replaces it.
				log.FromContext(ctx).Error(err, "skipping an unreadable applied-set record", "configMap", a.recordNamespace+"/"+list.Items[i].GetName())
				continue
			}
			records[r.work] = r
		}
	}
	a.set.mu.Lock()
	a.set.records = records
	a.set.loaded = true
	a.set.mu.Unlock()
	a.tracker.restore(records)
	return nil
}

// decodeRecord reads a record from its ConfigMap.
func decodeRecord(cm *unstructured.Unstructured) (*record, error) {
	work := cm.GetAnnotations()[v1alpha1.AnnotationWork]
	if work == "" {
		return nil, fmt.Errorf("no %s annotation naming the Work", v1alpha1.AnnotationWork)
	}
	data, _, err := unstructured.NestedStringMap(cm.Object, "data")
	if err != nil {
		return nil, fmt.Errorf("reading the data: %w", err)
	}
	r := &record{work: work, resourceVersion: cm.GetResourceVersion(), policy: v1alpha1.DeletionPolicy(data[recordPolicyKey])}
	if raw := data[recordObjectsKey]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &r.objects); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", recordObjectsKey, err)
		}
	}
	sortObjects(r.objects)
	r.mark = decodeMark(data)
	return r, nil
}

// decodeMark reads a record's mark from its data; a missing or unreadable
// one is no mark. It proves nothing then, which costs one apply, and the
// objects stay recorded.
func decodeMark(data map[string]string) appliedMark {
	uid, gen := data[recordWorkUIDKey], data[recordWorkGenerationKey]
	if uid == "" || gen == "" {
		return appliedMark{}
	}
	g, err := strconv.ParseInt(gen, 10, 64)
	if err != nil || g < 0 {
		return appliedMark{}
	}
	return appliedMark{uid: types.UID(uid), generation: g}
}

func sortObjects(objs []AppliedObject) {
	slices.SortFunc(objs, func(x, y AppliedObject) int {
		return cmp.Or(strings.Compare(x.Group, y.Group), strings.Compare(x.Kind, y.Kind), strings.Compare(x.Version, y.Version),
			strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Name, y.Name))
	})
}

// encodeRecord is r as its ConfigMap.
func (a *Applier) encodeRecord(r *record) (*unstructured.Unstructured, error) {
	objects := r.objects
	if objects == nil {
		objects = []AppliedObject{}
	}
	raw, err := json.Marshal(objects)
	if err != nil {
		return nil, err
	}
	fleet, cluster := a.Identity()
	cm := &unstructured.Unstructured{}
	cm.SetAPIVersion("v1")
	cm.SetKind("ConfigMap")
	cm.SetNamespace(a.recordNamespace)
	cm.SetName(RecordName(a.owner, r.work))
	labels := map[string]string{v1alpha1.LabelAppliedSet: a.owner}
	if fleet != "" {
		labels[v1alpha1.LabelFleet] = fleet
	}
	if cluster != "" {
		labels[v1alpha1.LabelCluster] = cluster
	}
	cm.SetLabels(labels)
	cm.SetAnnotations(map[string]string{v1alpha1.AnnotationWork: r.work})
	cm.SetResourceVersion(r.resourceVersion)
	data := map[string]string{recordObjectsKey: string(raw)}
	if r.policy != "" && r.policy != v1alpha1.DeletionPolicyDelete {
		data[recordPolicyKey] = string(r.policy)
	}
	if r.mark.uid != "" {
		data[recordWorkUIDKey] = string(r.mark.uid)
		data[recordWorkGenerationKey] = strconv.FormatInt(r.mark.generation, 10)
	}
	if err := unstructured.SetNestedStringMap(cm.Object, data, "data"); err != nil {
		return nil, err
	}
	return cm, nil
}

// writeRecord stores objects as Work work's record, in memory and, with a
// RecordNamespace, in its ConfigMap; an empty list deletes the ConfigMap.
// The caller holds the Work's lock. When the ConfigMap changed behind the
// Applier's back (another writer, or a person), the stored record becomes
// the union of both, so a write can never make the Applier lose track of
// an object: at worst it remembers one that is gone, which the next
// deletion finds NotFound and forgets. The record written carries no mark
// (see writeRecordMarked).
func (a *Applier) writeRecord(ctx context.Context, work string, objects []AppliedObject) error {
	var policy v1alpha1.DeletionPolicy
	if prev := a.set.get(work); prev != nil {
		policy = prev.policy
	}
	return a.writeRecordMarked(ctx, work, objects, policy, appliedMark{})
}

// writeRecordMarked is writeRecord with the Work's deletion policy and the
// mark of the Apply that left objects (none: the zero mark). A union with
// a stored record that holds objects this one lacks drops the mark: the
// Apply it names did not leave those.
func (a *Applier) writeRecordMarked(ctx context.Context, work string, objects []AppliedObject, policy v1alpha1.DeletionPolicy, mark appliedMark) error {
	sortObjects(objects)
	prev := a.set.get(work)
	r := &record{work: work, objects: objects, policy: policy, mark: mark}
	if prev != nil {
		r.resourceVersion = prev.resourceVersion
	}
	if a.recordNamespace == "" {
		r.resourceVersion = ""
		a.set.put(r)
		return nil
	}
	if len(objects) == 0 {
		return a.deleteRecord(ctx, r)
	}
	for attempt := 0; ; attempt++ {
		cm, err := a.encodeRecord(r)
		if err != nil {
			return fmt.Errorf("encoding the applied-set record of Work %s: %w", work, err)
		}
		if r.resourceVersion == "" {
			err = a.writer.Create(ctx, cm, a.owner)
		} else {
			err = a.writer.Update(ctx, cm, a.owner)
		}
		if err == nil {
			r.resourceVersion = cm.GetResourceVersion()
			a.set.put(r)
			return nil
		}
		stale := apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || (apierrors.IsNotFound(err) && r.resourceVersion != "")
		if !stale || attempt == 2 {
			return fmt.Errorf("writing the applied-set record of Work %s (ConfigMap %s/%s): %w", work, a.recordNamespace, cm.GetName(), err)
		}
		if r, err = a.mergeStored(ctx, r); err != nil {
			return err
		}
	}
}

// mergeStored reads r's ConfigMap and returns r with the objects only the
// stored record has added and the stored resourceVersion.
func (a *Applier) mergeStored(ctx context.Context, r *record) (*record, error) {
	stored, err := a.readRecord(ctx, r.work)
	if err != nil {
		return nil, err
	}
	merged := &record{work: r.work, objects: slices.Clone(r.objects), policy: r.policy, mark: r.mark}
	if stored != nil {
		merged.resourceVersion = stored.resourceVersion
		for _, o := range stored.objects {
			if merged.find(o.ResourceIdentifier) < 0 {
				merged.objects = append(merged.objects, o)
				merged.mark = appliedMark{}
			}
		}
	}
	sortObjects(merged.objects)
	return merged, nil
}

// readRecord reads Work work's record from its ConfigMap: nil when there is
// none. An unreadable record counts as empty, with its resourceVersion, so
// that the next write replaces it.
func (a *Applier) readRecord(ctx context.Context, work string) (*record, error) {
	cm := &unstructured.Unstructured{}
	cm.SetAPIVersion("v1")
	cm.SetKind("ConfigMap")
	name := RecordName(a.owner, work)
	if err := a.writer.Get(ctx, kclient.Key{Namespace: a.recordNamespace, Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the applied-set record of Work %s (ConfigMap %s/%s): %w", work, a.recordNamespace, name, err)
	}
	r, err := decodeRecord(cm)
	if err != nil {
		log.FromContext(ctx).Error(err, "replacing an unreadable applied-set record", "configMap", a.recordNamespace+"/"+name)
		return &record{work: work, resourceVersion: cm.GetResourceVersion()}, nil
	}
	r.work = work
	return r, nil
}

// deleteRecord deletes r's ConfigMap, only if it is still the version the
// Applier knows: a record that gained objects meanwhile is read back
// instead, and kept.
func (a *Applier) deleteRecord(ctx context.Context, r *record) error {
	if r.resourceVersion == "" {
		a.set.put(&record{work: r.work})
		return nil
	}
	cm, err := a.encodeRecord(r)
	if err != nil {
		return err
	}
	err = a.writer.Delete(ctx, cm, kclient.DeleteOptions{Preconditions: metav1.Preconditions{ResourceVersion: &r.resourceVersion}})
	switch {
	case err == nil || apierrors.IsNotFound(err):
		a.set.put(&record{work: r.work})
		return nil
	case apierrors.IsConflict(err):
		stored, err := a.readRecord(ctx, r.work)
		if err != nil {
			return err
		}
		if stored == nil {
			stored = &record{work: r.work}
		}
		a.set.put(stored)
		if len(stored.objects) > 0 {
			return fmt.Errorf("the applied-set record of Work %s gained objects while it was being deleted; it is kept", r.work)
		}
		return nil
	default:
		return fmt.Errorf("deleting the applied-set record of Work %s: %w", r.work, err)
	}
}
