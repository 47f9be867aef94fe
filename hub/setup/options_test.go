package setup

import (
	"context"
	"math"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

// TestMemberDeleteFlagsValidated checks that New refuses a negative
// --member-delete-burst and a NaN --member-delete-rate with an error
// naming the flag, before it builds anything, and accepts the zero values
// (the defaults) and a negative rate (no limit).
func TestMemberDeleteFlagsValidated(t *testing.T) {
	for _, tt := range []struct {
		rate  float64
		burst int
		want  string // "" means valid
	}{
		{},
		{rate: 2, burst: 50},
		{rate: -1},
		{rate: 0.5, burst: 1},
		{rate: 2, burst: -1, want: "--member-delete-burst"},
		{rate: math.NaN(), burst: 50, want: "--member-delete-rate"},
	} {
		opts := Options{MemberDeleteRate: tt.rate, MemberDeleteBurst: tt.burst}
		err := validateOptions(opts)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("rate %v burst %d: %v, want no error", tt.rate, tt.burst, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("rate %v burst %d: err = %v, want one naming %s", tt.rate, tt.burst, err, tt.want)
		}
		if tt.want == "" {
			continue
		}
		// New refuses it before it touches the apiserver.
		opts.Config = &rest.Config{Host: "https://127.0.0.1:1"}
		if _, err := New(context.Background(), opts); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New with rate %v burst %d: err = %v, want one naming %s", tt.rate, tt.burst, err, tt.want)
		}
	}
}
