package apply

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// OwnedBy says obj was applied for the Work called workName: it carries the
// flotilla.dev/work label with that Work's label value and the
// flotilla.dev/work annotation with its full name. Both are required, so
// that neither a hand-copied label nor a (vanishingly unlikely) collision of
// shortened label values hands an object to the wrong Work.
func OwnedBy(obj metav1.Object, workName string) bool {
	return obj.GetLabels()[v1alpha1.LabelWork] == v1alpha1.WorkLabelValue(workName) &&
		obj.GetAnnotations()[v1alpha1.AnnotationWork] == workName
}

// IsShared says obj is a shared dependency: it carries
// v1alpha1.LabelDependency "true" (see "Shared dependencies" in the
// package documentation).
func IsShared(obj metav1.Object) bool {
	return obj.GetLabels()[v1alpha1.LabelDependency] == "true"
}

// sharedClaimable says Apply may write live, found where desired (a shared
// dependency) goes: live is a shared dependency too, copied from the same
// hub namespace, and any fleet and cluster labels it has are this
// Applier's.
func sharedClaimable(live, desired metav1.Object, fleet, cluster string) bool {
	l, d := live.GetLabels(), desired.GetLabels()
	ns := d[v1alpha1.LabelMyAppNamespace]
	return IsShared(live) && ns != "" && l[v1alpha1.LabelMyAppNamespace] == ns &&
		(l[v1alpha1.LabelFleet] == "" || l[v1alpha1.LabelFleet] == fleet) &&
		(l[v1alpha1.LabelCluster] == "" || l[v1alpha1.LabelCluster] == cluster)
}

// sharedNotOwnedMessage says that live, found where the shared dependency
// desired goes, is not one Apply may write.
func sharedNotOwnedMessage(id v1alpha1.ResourceIdentifier, live, desired metav1.Object) string {
	l := live.GetLabels()
	var why string
	switch {
	case !IsShared(live):
		why = fmt.Sprintf("it is not a Flotilla dependency (it has no %s=true label)", v1alpha1.LabelDependency)
	case l[v1alpha1.LabelMyAppNamespace] != desired.GetLabels()[v1alpha1.LabelMyAppNamespace]:
		why = fmt.Sprintf("it was copied from hub namespace %q, not %q", l[v1alpha1.LabelMyAppNamespace], desired.GetLabels()[v1alpha1.LabelMyAppNamespace])
	default:
		why = fmt.Sprintf("it belongs to fleet %q, cluster %q", l[v1alpha1.LabelFleet], l[v1alpha1.LabelCluster])
	}
	msg := describe(id) + " exists and " + why
	if managers := fieldManagers(live); len(managers) > 0 {
		msg += "; field managers: " + strings.Join(managers, ", ")
	}
	return msg + "; it was left unchanged"
}

// newerSource says live, a shared dependency, was copied from a newer
// version of its hub object than desired: both carry
// v1alpha1.AnnotationSourceVersion, the hub's resourceVersion, and live's
// is the larger number. Anything that does not parse is not newer, so it
// is overwritten.
func newerSource(live, desired metav1.Object) bool {
	lv, lerr := strconv.ParseUint(live.GetAnnotations()[v1alpha1.AnnotationSourceVersion], 10, 64)
	dv, derr := strconv.ParseUint(desired.GetAnnotations()[v1alpha1.AnnotationSourceVersion], 10, 64)
	return lerr == nil && derr == nil && lv > dv
}

// claimable says Apply may write obj for the Work called workName: it
// carries the Work's label and no annotation naming another Work. An owned
// object is claimable; so is one whose annotation was removed by hand (the
// label alone names the Work, and the apply puts the annotation back). It
// is more lenient than OwnedBy on purpose: writing an object labelled for
// this Work is safe, deleting one is done only on full evidence.
func claimable(obj metav1.Object, workName string) bool {
	other, annotated := obj.GetAnnotations()[v1alpha1.AnnotationWork]
	return obj.GetLabels()[v1alpha1.LabelWork] == v1alpha1.WorkLabelValue(workName) && (!annotated || other == workName)
}

// notOwnedMessage says that obj, found where manifest id of Work workName
// should go, is not that Work's, and who seems to own it instead: the Work
// its labels name, its owner references and the field managers that wrote
// it. People read it in the Work's Degraded condition, far from the member.
func notOwnedMessage(id v1alpha1.ResourceIdentifier, obj metav1.Object, workName string) string {
	var b strings.Builder
	b.WriteString(describe(id))
	label, hasLabel := obj.GetLabels()[v1alpha1.LabelWork]
	other := obj.GetAnnotations()[v1alpha1.AnnotationWork]
	switch {
	case !hasLabel:
		fmt.Fprintf(&b, " exists and is not managed by Flotilla (it has no %s label)", v1alpha1.LabelWork)
	case other != "" && other != workName:
		fmt.Fprintf(&b, " exists and belongs to Work %q, not %q", other, workName)
	default:
		fmt.Fprintf(&b, " exists with label %s=%q and annotation %s=%q, which do not match Work %q",
			v1alpha1.LabelWork, label, v1alpha1.AnnotationWork, other, workName)
	}
	if refs := obj.GetOwnerReferences(); len(refs) > 0 {
		owners := make([]string, 0, len(refs))
		for _, r := range refs {
			owners = append(owners, r.Kind+"/"+r.Name)
		}
		fmt.Fprintf(&b, "; owned by %s", strings.Join(owners, ", "))
	}
	if managers := fieldManagers(obj); len(managers) > 0 {
		fmt.Fprintf(&b, "; field managers: %s", strings.Join(managers, ", "))
	}
	b.WriteString("; it was left unchanged")
	return b.String()
}

// fieldManagers lists the distinct managers in obj's managedFields, in the
// order the apiserver keeps them.
func fieldManagers(obj metav1.Object) []string {
	var managers []string
	for _, e := range obj.GetManagedFields() {
		if e.Manager != "" && !slices.Contains(managers, e.Manager) {
			managers = append(managers, e.Manager)
		}
	}
	return managers
}
