package server

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

func report(name, body string) *syncv1.StatusReport {
	return &syncv1.StatusReport{Namespace: "flotilla-cluster-east", Name: name, Status: []byte(body)}
}

// TestStatusPacer: the burst passes at once; then reports wait, the latest
// per Work in its place, oldest Work first; a Work beyond the byte bound is
// dropped, and so is a replacement that would pass it; tokens release the
// backlog in order.
func TestStatusPacer(t *testing.T) {
	now := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	small := report("a", "{}")
	// Room for three small reports in the backlog.
	p := newStatusPacer(1, 2, 3*proto.Size(small))
	defer p.stop()
	for i := range 2 {
		if h, kept := p.admit("a", small, now); !h || !kept {
			t.Fatalf("report %d of the burst: handle now %v, kept %v", i, h, kept)
		}
	}
	admit := func(name, body string, wantKept bool) {
		t.Helper()
		h, kept := p.admit(name, report(name, body), now)
		if h || kept != wantKept {
			t.Fatalf("admit %s %s: handle now %v, kept %v; want waiting, kept %v", name, body, h, kept, wantKept)
		}
	}
	admit("a", "{}", true)
	admit("b", "{}", true)
	admit("a", "{12", true)                            // replaces a's report, one byte more
	admit("c", "{}", false)                            // a new Work: the backlog is one byte short
	admit("b", "{"+strings.Repeat("1", 40)+"}", false) // a replacement that does not fit
	if n := p.backlogLen(); n != 2 {
		t.Fatalf("backlog %d, want 2", n)
	}
	if _, ok := p.next(now); ok {
		t.Fatal("a waiting report was released without a token")
	}
	later := now.Add(time.Second)
	m, ok := p.next(later)
	if !ok || m.GetName() != "a" || string(m.GetStatus()) != "{12" {
		t.Fatalf("first released %v %v, want a's latest report", m, ok)
	}
	if _, ok := p.next(later); ok {
		t.Fatal("two reports released for one token")
	}
	m, ok = p.next(later.Add(time.Second))
	if !ok || m.GetName() != "b" || string(m.GetStatus()) != "{}" {
		t.Fatalf("second released %v %v, want b's report", m, ok)
	}
	if p.backlogLen() != 0 || p.bytes != 0 {
		t.Fatalf("backlog %d reports, %d bytes after releasing all", p.backlogLen(), p.bytes)
	}
	// A report that finds nothing waiting and a token is handled at once.
	if h, kept := p.admit("d", small, later.Add(3*time.Second)); !h || !kept {
		t.Fatalf("after the backlog: handle now %v, kept %v", h, kept)
	}
}

func TestStatusPacerOff(t *testing.T) {
	p := newStatusPacer(-1, 1, 1)
	for range 100 {
		if h, kept := p.admit("a", report("a", "{}"), time.Now()); !h || !kept {
			t.Fatal("no pacing, yet a report waits")
		}
	}
	if p.ready() != nil {
		t.Fatal("no pacing, yet a timer")
	}
}

// TestConnectLimiter: each cluster has its own bucket, so one cluster's
// reconnect loop does not refuse another; idle buckets are forgotten.
func TestConnectLimiter(t *testing.T) {
	now := time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)
	l := newConnectLimiter(0.5, 2)
	for i := range 2 {
		if ok, _ := l.allow("noisy", now); !ok {
			t.Fatalf("connect %d of the burst refused", i)
		}
	}
	ok, wait := l.allow("noisy", now)
	if ok || wait != 2*time.Second {
		t.Fatalf("third connect: allowed %v, wait %s; want refused, wait 2s", ok, wait)
	}
	if ok, _ := l.allow("quiet", now); !ok {
		t.Fatal("another cluster refused")
	}
	if ok, _ := l.allow("noisy", now.Add(2*time.Second)); !ok {
		t.Fatal("connect after the wait refused")
	}
	for i := range maxIdleBuckets + 10 {
		l.allow(fmt.Sprintf("member-%d", i), now)
	}
	// An hour later every bucket is full again: the next new cluster
	// finds more than maxIdleBuckets and forgets the idle ones.
	l.allow("late", now.Add(time.Hour))
	if n := len(l.buckets); n != 1 {
		t.Fatalf("%d buckets kept, want only the new one", n)
	}
	if newConnectLimiter(-1, 0) != nil {
		t.Fatal("a negative rate should turn the limit off")
	}
}

// TestInputLimitConfig: bad limits are refused with an error naming the
// field; zero values become the defaults.
func TestInputLimitConfig(t *testing.T) {
	for _, tt := range []struct {
		name   string
		mutate func(*Config)
		want   string // "" means valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"no limits", func(c *Config) { c.StatusRate, c.ConnectRate = -1, math.Inf(1) }, ""},
		{"negative receive size", func(c *Config) { c.MaxRecvMessageBytes = -1 }, "Config.MaxRecvMessageBytes"},
		{"NaN status rate", func(c *Config) { c.StatusRate = math.NaN() }, "Config.StatusRate"},
		{"negative status burst", func(c *Config) { c.StatusBurst = -1 }, "Config.StatusBurst"},
		{"negative backlog", func(c *Config) { c.StatusBacklogBytes = -1 }, "Config.StatusBacklogBytes"},
		{"NaN connect rate", func(c *Config) { c.ConnectRate = math.NaN() }, "Config.ConnectRate"},
		{"negative connect burst", func(c *Config) { c.ConnectBurst = -2 }, "Config.ConnectBurst"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			tt.mutate(&c)
			err := c.inputLimitDefaults()
			if tt.want != "" {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want one naming %s", err, tt.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.MaxRecvMessageBytes != DefaultMaxRecvMessageBytes || c.StatusBurst != DefaultStatusBurst ||
				c.StatusBacklogBytes != DefaultStatusBacklogBytes || c.ConnectBurst != DefaultConnectBurst {
				t.Errorf("defaults not filled in: %+v", c)
			}
		})
	}
}
