// Package wire encodes and decodes the Kubernetes objects that travel as
// JSON inside the sync protocol's messages, and checks what a peer sent
// before either side acts on it. Hub and agent both use it, so they agree on
// what a valid message is.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/truncate"
)

// Limits on peer input that the message size limit alone does not bound.
const (
	// MaxHeldWorks bounds a hello's list of held Works. It is far above
	// what one cluster's namespace is expected to hold, and keeps a
	// misbehaving agent from making the hub build a huge map.
	MaxHeldWorks = 100_000
	// MaxLabelLength bounds free-form strings such as the agent version.
	MaxLabelLength = 256
	// MaxReasonLength bounds an explanation meant for a person, such as
	// a refusal's reason.
	MaxReasonLength = 1024
	// MaxBlockedWorks bounds the Works a PruneBlocked names; the agent
	// names the first ones and the counts say how many there are.
	MaxBlockedWorks = 100
	// maxUIDLength is generous for a UUID, which is what apiservers use.
	maxUIDLength = 128
)

// ValidateWorkName checks that name can be a Work's name.
func ValidateWorkName(name string) error {
	if name == "" {
		return errors.New("work name is empty")
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("work name %q is not valid: %s", truncate.String(name, maxQuoted), errs[0])
	}
	return nil
}

// ValidateUID checks a Work's uid as a peer sent it.
func ValidateUID(uid string) error {
	if len(uid) > maxUIDLength {
		return fmt.Errorf("uid is longer than %d characters", maxUIDLength)
	}
	return nil
}

// ValidateLabel checks a free-form descriptive string from a peer.
func ValidateLabel(field, s string) error {
	if len(s) > MaxLabelLength {
		return fmt.Errorf("%s is longer than %d characters", field, MaxLabelLength)
	}
	return nil
}

// ValidateFleetID checks a fleet id as a peer sent it: the UID of the
// hub's identity object.
func ValidateFleetID(id string) error {
	if id == "" {
		return errors.New("fleet id is empty")
	}
	if len(id) > maxUIDLength {
		return fmt.Errorf("fleet id is longer than %d characters", maxUIDLength)
	}
	return nil
}

// maxQuoted bounds a peer-chosen string quoted in an error message.
const maxQuoted = 64

// unmarshal decodes JSON the way the Kubernetes apiserver does: field
// names are case-sensitive, so "Replicas" is not mistaken for "replicas".
func unmarshal(data []byte, v any) error {
	return kjson.UnmarshalCaseSensitivePreserveInts(data, v)
}

// EncodeWork is the JSON the hub sends for w: its identity, labels,
// annotations and spec. Status and managedFields are left out because the
// agent has no use for them and they can be most of the object's size.
func EncodeWork(w *v1alpha1.Work) ([]byte, error) {
	out := v1alpha1.Work{Spec: w.Spec}
	out.APIVersion = v1alpha1.GroupVersion.String()
	out.Kind = "Work"
	out.Name = w.Name
	out.Namespace = w.Namespace
	out.UID = w.UID
	out.Generation = w.Generation
	out.ResourceVersion = w.ResourceVersion
	out.Labels = w.Labels
	out.Annotations = w.Annotations
	return marshal(&out)
}

// DecodeWork decodes and checks a Work the hub sent to the agent of
// cluster. A Work for another cluster's namespace is refused: the hub never
// sends one, so one arriving means something is badly wrong.
func DecodeWork(data []byte, cluster string) (*v1alpha1.Work, error) {
	if len(data) == 0 {
		return nil, errors.New("work is empty")
	}
	var w v1alpha1.Work
	if err := unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("decoding work: %w", err)
	}
	if err := ValidateWorkName(w.Name); err != nil {
		return nil, err
	}
	if want := v1alpha1.ClusterNamespace(cluster); w.Namespace != want {
		return nil, fmt.Errorf("work %q is in namespace %q, not this cluster's %q", w.Name, truncate.String(w.Namespace, maxQuoted), want)
	}
	if err := ValidateUID(string(w.UID)); err != nil {
		return nil, err
	}
	if w.Generation < 0 {
		return nil, fmt.Errorf("work %q has negative generation %d", w.Name, w.Generation)
	}
	return &w, nil
}

// DecodeWorkStatus decodes a WorkStatus an agent reported.
func DecodeWorkStatus(data []byte) (*v1alpha1.WorkStatus, error) {
	if len(data) == 0 {
		return nil, errors.New("status is empty")
	}
	var st v1alpha1.WorkStatus
	if err := unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("decoding work status: %w", err)
	}
	if st.ObservedGeneration < 0 {
		return nil, fmt.Errorf("status has negative observedGeneration %d", st.ObservedGeneration)
	}
	return &st, nil
}

// DecodeResourceSummary decodes a ResourceSummary an agent sent. Empty
// data means the agent had none, which is not an error.
func DecodeResourceSummary(data []byte) (*v1alpha1.ResourceSummary, error) {
	if len(data) == 0 {
		return nil, nil
	}
	var rs v1alpha1.ResourceSummary
	if err := unmarshal(data, &rs); err != nil {
		return nil, fmt.Errorf("decoding resource summary: %w", err)
	}
	if rs.Nodes < 0 {
		return nil, fmt.Errorf("resource summary has negative node count %d", rs.Nodes)
	}
	return &rs, nil
}

// EncodeWorkStatus is st as JSON.
func EncodeWorkStatus(st *v1alpha1.WorkStatus) ([]byte, error) { return marshal(st) }

// EncodeResourceSummary is rs as JSON; nil encodes as empty.
func EncodeResourceSummary(rs *v1alpha1.ResourceSummary) ([]byte, error) {
	if rs == nil {
		return nil, nil
	}
	return marshal(rs)
}

func marshal(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %T: %w", v, err)
	}
	return data, nil
}
