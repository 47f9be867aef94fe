package syncbridge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func sized(msg string) *flotillav1.WorkStatus {
	return &flotillav1.WorkStatus{Conditions: []metav1.Condition{{Type: "Applied", Status: "True", Reason: "Applied", Message: msg}}}
}

// TestStatusWriterPendingBound: the latest report per Work replaces the
// pending one; a new Work beyond a cluster's byte bound is dropped; one
// cluster's full buffer does not refuse another cluster's reports.
func TestStatusWriterPendingBound(t *testing.T) {
	one := statusSize(sized(strings.Repeat("x", 100)))
	w := &StatusWriter{MaxPendingBytes: 3 * one}
	ctx := context.Background()
	for i := range 5 {
		w.WorkStatus(ctx, "noisy", fmt.Sprintf("work-%d", i), sized(strings.Repeat("x", 100)))
	}
	// Latest wins for a Work that waits, within the bound.
	w.WorkStatus(ctx, "noisy", "work-0", sized(strings.Repeat("y", 100)))
	w.WorkStatus(ctx, "quiet", "work-0", sized("fine"))

	key := func(cluster, name string) client.ObjectKey {
		return client.ObjectKey{Namespace: flotillav1.ClusterNamespace(cluster), Name: name}
	}
	for i := range 5 {
		_, ok := w.pending[key("noisy", fmt.Sprintf("work-%d", i))]
		if want := i < 3; ok != want {
			t.Errorf("noisy work-%d pending %v, want %v", i, ok, want)
		}
	}
	if got := w.pending[key("noisy", "work-0")].status.Conditions[0].Message; !strings.HasPrefix(got, "y") {
		t.Errorf("work-0's pending report is not the latest: %q", got)
	}
	if w.pendingBytes["noisy"] != 3*one {
		t.Errorf("noisy has %d pending bytes, want %d", w.pendingBytes["noisy"], 3*one)
	}
	if _, ok := w.pending[key("quiet", "work-0")]; !ok {
		t.Error("another cluster's report was refused")
	}
	// A replacement that would pass the bound is dropped; the older one
	// stays.
	w.WorkStatus(ctx, "noisy", "work-1", sized(strings.Repeat("z", 1000)))
	if got := w.pending[key("noisy", "work-1")].status.Conditions[0].Message; !strings.HasPrefix(got, "x") {
		t.Errorf("an oversized replacement was taken: %q", got[:1])
	}
	// Taking a report frees its bytes.
	if p := w.takePending(key("noisy", "work-2")); p == nil {
		t.Fatal("work-2 not pending")
	}
	w.WorkStatus(ctx, "noisy", "work-4", sized(strings.Repeat("x", 100)))
	if _, ok := w.pending[key("noisy", "work-4")]; !ok {
		t.Error("a report was refused after room was made")
	}
}

func TestRejected(t *testing.T) {
	gr := schema.GroupResource{Group: "flotilla.dev", Resource: "works"}
	tests := []struct {
		err  error
		want bool
	}{
		{apierrors.NewInvalid(schema.GroupKind{Group: "flotilla.dev", Kind: "Work"}, "w", nil), true},
		{apierrors.NewBadRequest("no"), true},
		{apierrors.NewForbidden(gr, "w", errors.New("no")), true},
		{apierrors.NewRequestEntityTooLargeError("too large"), true},
		{apierrors.NewConflict(gr, "w", errors.New("conflict")), false},
		{apierrors.NewTooManyRequests("slow down", 1), false},
		{apierrors.NewInternalError(errors.New("boom")), false},
		{apierrors.NewServiceUnavailable("later"), false},
		{errors.New("connection refused"), false},
		{fmt.Errorf("wrapped: %w", apierrors.NewBadRequest("no")), true},
	}
	for _, tt := range tests {
		if got := rejected(tt.err); got != tt.want {
			t.Errorf("rejected(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
