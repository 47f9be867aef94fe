package works

import (
	"reflect"
	"strings"
	"testing"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// TestWorkOfLabel maps the flotilla.dev/work label value an EndpointSlice
// carries (copied from its Service) back to the held Work. It needs no
// apiserver: the Store's entries are added directly.
func TestWorkOfLabel(t *testing.T) {
	short := flotillav1.WorkName("shop", "web")
	long := flotillav1.WorkName("a-namespace-with-a-rather-long-name", "and-an-app-whose-name-is-long-too")
	exactly63 := strings.Repeat("b", 63)
	// Same 52-character prefix as long, so its label value differs from
	// long's in the hash only.
	sibling := long[:52] + "-another-tail-making-it-long-enough"
	if len(long) <= 63 || len(sibling) <= 63 {
		t.Fatalf("test names too short: %d and %d characters", len(long), len(sibling))
	}
	longValue := flotillav1.WorkLabelValue(long)
	if longValue == long || len(longValue) != 63 {
		t.Fatalf("WorkLabelValue(%q) = %q: want a hashed value of 63 characters", long, longValue)
	}
	if flotillav1.WorkLabelValue(sibling) == longValue {
		t.Fatalf("test names collide")
	}

	s := NewStore(nil)
	for _, n := range []string{short, long, exactly63} {
		s.entryFor(n)
	}

	req := func(name string) []string {
		return []string{name}
	}
	tests := []struct {
		name  string
		value string
		want  []string
	}{
		{"a short name is its own label value", short, req(short)},
		{"the label value of a 63-character name is the name", flotillav1.WorkLabelValue(exactly63), req(exactly63)},
		{"the hashed label value of a long name", longValue, req(long)},
		{"a long name itself (not a valid label value, but held)", long, req(long)},
		{"empty", "", nil},
		{"an unknown short value", "shop-api", nil},
		{"a prefix of a held name", short[:len(short)-1], nil},
		{"the hashed value of a Work not held", flotillav1.WorkLabelValue(sibling), nil},
		{"a 63-character value that is no Work's", strings.Repeat("c", 63), nil},
		{"a long value that is no Work's", strings.Repeat("d", 80), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.WorkOfLabel(tt.value); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("WorkOfLabel(%q) = %v, want %v", tt.value, got, tt.want)
			}
		})
	}
}

// TestWorkOfLabelEmptyStore: a Store that holds nothing maps no value.
func TestWorkOfLabelEmptyStore(t *testing.T) {
	s := NewStore(nil)
	for _, v := range []string{"", "shop-web", flotillav1.WorkLabelValue(strings.Repeat("x", 100))} {
		if got := s.WorkOfLabel(v); got != nil {
			t.Errorf("WorkOfLabel(%q) = %v on an empty Store, want nil", v, got)
		}
	}
}

// TestWorkOfLabelAfterForget: once the Work is no longer held, its label
// value maps to nothing.
func TestWorkOfLabelAfterForget(t *testing.T) {
	long := strings.Repeat("w", 70)
	s := NewStore(nil)
	s.entryFor(long)
	if got := s.WorkOfLabel(flotillav1.WorkLabelValue(long)); len(got) != 1 || got[0] != long {
		t.Fatalf("WorkOfLabel = %v, want %s", got, long)
	}
	s.forget(long)
	if got := s.WorkOfLabel(flotillav1.WorkLabelValue(long)); got != nil {
		t.Errorf("WorkOfLabel = %v after the Work was dropped, want nil", got)
	}
}
