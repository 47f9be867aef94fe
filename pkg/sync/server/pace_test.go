package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"math"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/api/v1alpha1"
)

func TestDeletePacerOff(t *testing.T) {
	for _, r := range []float64{-1, math.Inf(1), math.Inf(-1)} {
		if p := newDeletePacer(r, 5); p != nil {
			t.Errorf("rate %v: got a pacer, want none (no limit)", r)
		}
	}
	var p *deletePacer
	if p.ready() != nil {
		t.Error("a nil pacer's ready channel is not nil")
	}
	p.stop() // must not panic
}

func TestDeletePacerBucketAndOrder(t *testing.T) {
	p := newDeletePacer(2, 3)
	defer p.stop()
	now := time.Unix(1000, 0)
	for i := range 3 {
		if !p.allow(now) {
			t.Fatalf("delete %d of the burst refused", i)
		}
	}
	if p.allow(now) {
		t.Fatal("a fourth delete at the same instant allowed with burst 3")
	}
	if !p.allow(now.Add(500 * time.Millisecond)) {
		t.Fatal("no token after 1/rate")
	}

	for _, n := range []string{"a", "b", "c"} {
		p.push(n)
	}
	if !p.remove("b") || p.remove("b") || p.has("b") {
		t.Fatal("remove: b should be removed exactly once")
	}
	if f, _ := p.front(); f != "a" || p.len() != 2 {
		t.Fatalf("front = %s, len %d; want a, 2", f, p.len())
	}
	p.remove("a")
	if f, _ := p.front(); f != "c" {
		t.Fatalf("front = %s, want c", f)
	}
	p.remove("c")
	if _, ok := p.front(); ok {
		t.Fatal("front of an empty list")
	}
}

// TestDeletePacerArm checks that the timer fires once a token is there,
// and not once per arm call.
func TestDeletePacerArm(t *testing.T) {
	p := newDeletePacer(20, 1) // a token every 50ms
	defer p.stop()
	now := time.Now()
	if !p.allow(now) {
		t.Fatal("burst refused")
	}
	p.arm(now)
	p.arm(now) // no second timer
	select {
	case at := <-p.ready():
		p.fired()
		if !p.allow(at) {
			t.Fatalf("the timer fired at %s with no token", at.Sub(now))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the timer never fired")
	}
	select {
	case <-p.ready():
		t.Fatal("the timer fired twice for one arm")
	case <-time.After(100 * time.Millisecond):
	}
}

func TestConfigDeleteDefaults(t *testing.T) {
	c := Config{Works: nopWorks{}, Clusters: nopClusters{}, TLS: tlsWithCAs()}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.DeleteRate != DefaultDeleteRate || c.DeleteBurst != DefaultDeleteBurst {
		t.Errorf("defaults: rate %v burst %d, want %v, %d", c.DeleteRate, c.DeleteBurst, DefaultDeleteRate, DefaultDeleteBurst)
	}
	c = Config{Works: nopWorks{}, Clusters: nopClusters{}, TLS: tlsWithCAs(), DeleteRate: -1}
	if err := c.defaults(); err != nil || c.DeleteRate != -1 {
		t.Errorf("a negative rate (no limit) became %v, err %v", c.DeleteRate, err)
	}
}

type nopWorks struct{}

func (nopWorks) HasSynced() bool                                { return true }
func (nopWorks) ListWorks(string) ([]*v1alpha1.Work, error)     { return nil, nil }
func (nopWorks) GetWork(string, string) (*v1alpha1.Work, error) { return nil, nil }
func (nopWorks) DeletionIntent(string, string) (string, bool)   { return "", false }

type nopClusters struct{}

func (nopClusters) ClusterKnown(context.Context, string) (bool, error) { return true, nil }

func tlsWithCAs() *tls.Config { return &tls.Config{ClientCAs: x509.NewCertPool()} }
