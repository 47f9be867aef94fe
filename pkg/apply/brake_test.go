package apply

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestBrakeHolds(t *testing.T) {
	for _, tc := range []struct {
		name              string
		wouldDelete, held int
		cfg               Brake
		want              bool
	}{
		{"nothing to delete", 0, 10, DefaultBrake, false},
		{"nothing held", 0, 0, DefaultBrake, false},
		{"exactly half of many is not more than half", 6, 12, DefaultBrake, false},
		{"just over half of many", 7, 12, DefaultBrake, true},
		{"five objects is not more than five, even all of them", 5, 5, DefaultBrake, false},
		{"six of six", 6, 6, DefaultBrake, true},
		{"six of eleven is over half", 6, 11, DefaultBrake, true},
		{"six of twelve is half", 6, 12, DefaultBrake, false},
		{"3 of 4 one-object Works is under the count", 3, 4, DefaultBrake, false},
		{"3 of 4 two-object Works", 6, 8, DefaultBrake, true},
		{"a small share of a big member", 40, 1000, DefaultBrake, false},
		{"everything of a big member", 1000, 1000, DefaultBrake, true},
		{"brake off (share 1)", 1000, 1000, Brake{Share: 1, Count: 5}, false},
		{"count zero brakes on share alone", 2, 3, Brake{Share: 0.5}, true},
		{"count zero, half is allowed", 2, 4, Brake{Share: 0.5}, false},
		{"tighter share", 3, 10, Brake{Share: 0.2, Count: 2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := BrakeHolds(tc.wouldDelete, tc.held, tc.cfg); got != tc.want {
				t.Errorf("BrakeHolds(%d, %d, %+v) = %t, want %t", tc.wouldDelete, tc.held, tc.cfg, got, tc.want)
			}
		})
	}
}

func TestPruneBlockedErrorSaysWhat(t *testing.T) {
	works := make([]string, 12)
	for i := range works {
		works[i] = fmt.Sprintf("shop.app%02d", i)
	}
	var err error = fmt.Errorf("pruning: %w", &PruneBlockedError{WouldDelete: 12, Held: 13, Works: works, Brake: DefaultBrake})
	var blocked *PruneBlockedError
	if !errors.As(err, &blocked) || blocked.WouldDelete != 12 {
		t.Fatalf("errors.As(%v) = %v, %+v", err, blocked != nil, blocked)
	}
	for _, part := range []string{"12 of the 13 objects", "more than 50% and more than 5", "12 Works", "shop.app00", "and 2 more", "nothing was deleted"} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("message %q does not say %q", err.Error(), part)
		}
	}
	if strings.Contains(err.Error(), "shop.app10") {
		t.Errorf("message lists more than ten Works: %q", err.Error())
	}
}
