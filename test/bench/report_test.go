package main

import (
	"testing"
	"time"
)

func TestPushVsPull(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		push, pull []time.Duration
		want       string
	}{
		{"no push samples", nil, ms(10, 20), ""},
		{"no pull samples", ms(10), nil, ""},
		{"push slower", ms(30, 40, 50), ms(10, 20, 20, 30),
			"push vs pull: propagation p50 40 ms to the Push members against 20 ms to the Pull members (+20 ms, 2.00x); p99 50 ms against 30 ms; 3 and 4 samples"},
		{"push faster", ms(5, 5), ms(10, 10),
			"push vs pull: propagation p50 5.0 ms to the Push members against 10 ms to the Pull members (-5.0 ms, 0.50x); p99 5.0 ms against 10 ms; 2 and 2 samples"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pushVsPull(tc.push, tc.pull); got != tc.want {
				t.Errorf("pushVsPull:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}
