package idlemem

import (
	"context"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

// fakeHeap is a runtime a test drives: what it allocated and retains,
// and what a release leaves retained.
type fakeHeap struct {
	heap     Heap
	after    uint64 // Retained after a release
	released int
}

func (f *fakeHeap) releaser(quiet, minGain uint64) *Releaser {
	return &Releaser{Quiet: quiet, MinGain: minGain,
		read:    func() Heap { return f.heap },
		release: func() { f.released++; f.heap.Retained = f.after }}
}

func TestReleaserReleasesOnlyAtRestAndWhenWorthIt(t *testing.T) {
	const mib = 1 << 20
	f := &fakeHeap{heap: Heap{Allocated: 100 * mib, Retained: 20 * mib}, after: mib}
	r := f.releaser(16*mib, 2*mib)
	last := f.heap.Allocated

	// Busy: 40 MiB allocated since the last look, 20 MiB retained: a
	// busy process keeps its headroom.
	f.heap.Allocated += 40 * mib
	last = r.look(last)
	if f.released != 0 {
		t.Fatalf("released while the process allocated 40 MiB in an interval (quiet is 16 MiB)")
	}
	if last != f.heap.Allocated {
		t.Fatalf("look returned %d allocated, want the current %d", last, f.heap.Allocated)
	}

	// Exactly at the quiet line is busy.
	f.heap.Allocated += 16 * mib
	last = r.look(last)
	if f.released != 0 {
		t.Fatalf("released with 16 MiB allocated in an interval, which is not below quiet (16 MiB)")
	}

	// At rest, with 20 MiB to gain: one release.
	f.heap.Allocated += 3 * mib
	last = r.look(last)
	if f.released != 1 {
		t.Fatalf("at rest (3 MiB allocated) with 20 MiB retained: %d releases, want 1", f.released)
	}

	// Still at rest, but only 1 MiB retained since: not worth a
	// collection.
	f.heap.Allocated += mib
	last = r.look(last)
	if f.released != 1 {
		t.Fatalf("released with 1 MiB retained (min gain 2 MiB): %d releases, want 1", f.released)
	}

	// Garbage accumulates at rest until the gain is worth it again.
	f.heap.Allocated += 2 * mib
	f.heap.Retained = 3 * mib
	r.look(last)
	if f.released != 2 {
		t.Fatalf("at rest with 3 MiB retained: %d releases, want 2", f.released)
	}
}

func TestReleaserDefaults(t *testing.T) {
	r := &Releaser{}
	if r.interval() != DefaultInterval || r.quiet() != DefaultQuiet || r.minGain() != DefaultMinGain {
		t.Fatalf("zero Releaser: interval %v quiet %d minGain %d, want the defaults %v %d %d",
			r.interval(), r.quiet(), r.minGain(), DefaultInterval, DefaultQuiet, DefaultMinGain)
	}
	if r.NeedLeaderElection() {
		t.Fatal("a standby replica's memory counts too: the Releaser must not need leader election")
	}
}

// sink keeps the test's garbage reachable until the test drops it.
var sink [][]byte

// TestReleaserReturnsTheRuntimesFreeHeap runs a real look on this test
// process: 64 MiB of garbage made and dropped, then one look must return
// it to the operating system (the runtime's released heap grows by at
// least half of it).
func TestReleaserReturnsTheRuntimesFreeHeap(t *testing.T) {
	released := func() uint64 {
		s := []metrics.Sample{{Name: "/memory/classes/heap/released:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	for range 64 {
		sink = append(sink, make([]byte, 1<<20))
	}
	sink = nil
	runtime.GC() // the garbage is now free heap, not yet returned
	before, h := released(), ReadHeap()
	if h.Retained < 32<<20 {
		t.Fatalf("after 64 MiB of garbage was collected, ReadHeap says %d bytes retained, want at least 32 MiB", h.Retained)
	}
	r := &Releaser{Quiet: 1 << 40} // whatever the test process allocated counts as rest
	r.look(h.Allocated)
	after := released()
	if after < before+32<<20 {
		t.Fatalf("one look at rest returned %d bytes to the OS (released %d -> %d), want at least 32 MiB of the 64 MiB garbage", int64(after)-int64(before), before, after)
	}
	if h2 := ReadHeap(); h2.Retained >= h.Retained {
		t.Fatalf("retained heap %d -> %d after a release: nothing came back", h.Retained, h2.Retained)
	}
}

func TestReleaserStartStopsWithItsContext(t *testing.T) {
	releasedc := make(chan struct{}, 1)
	r := &Releaser{Quiet: 1 << 40, MinGain: 1, Interval: 5 * time.Millisecond,
		read: func() Heap { return Heap{Retained: 8 << 20} },
		release: func() {
			select {
			case releasedc <- struct{}{}:
			default:
			}
		}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	select {
	case <-releasedc:
	case <-time.After(10 * time.Second):
		t.Fatal("Start made no release within 10 s at a 5 ms interval with 8 MiB retained")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Start returned %v after its context ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return within 10 s of its context ending")
	}
}
