// Package idlemem hands the free heap of a process at rest back to the
// operating system.
//
// Go's collector lets the heap grow to twice what survived the last
// collection (GOGC=100) before it collects again, and keeps what it freed
// mapped until its background scavenger returns it, slowly, down to about
// that goal. A busy process needs that headroom: collecting more often
// costs CPU in proportion to what it allocates. A process at rest (the
// hub between changes: heartbeats, lease renewals, scrapes) allocates
// little, so the headroom is resident memory that buys nothing. The hub
// runs a Releaser (the agent, with GOGC=50, measured no gain). It looks
// every Interval at what the process allocated since its last look; when
// that was less than Quiet (at rest) and at least MinGain bytes of heap
// would come back, it collects and returns the heap's free memory to the
// operating system at once (debug.FreeOSMemory). A busy process is never
// touched: its collector keeps Go's own pacing, whatever GOGC says.
package idlemem

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of a Releaser's fields.
const (
	// DefaultInterval: a look every 20 s costs a read of five runtime
	// metrics; a release (at most one per look) a collection of the live
	// heap (about 22 MiB for the hub at rest in the bench).
	DefaultInterval = 20 * time.Second
	// DefaultQuiet: fewer than 16 MiB allocated in an Interval (0.8 MiB/s
	// at 20 s) is at rest. The hub with 100 MyApps, 300 Works and three
	// members allocated about 0.4 MiB/s at rest in the bench (8 MiB per
	// look), and 6 MiB/s while the bench created and changed MyApps.
	// A hub whose rest allocates more than the line is never released:
	// it keeps Go's pacing, as before there was a Releaser.
	DefaultQuiet = 16 << 20
	// DefaultMinGain: a release that would return less than 2 MiB is not
	// worth its collection.
	DefaultMinGain = 2 << 20
)

// Releaser returns a quiet process's free heap to the operating system
// (see the package doc). It is a controller-runtime Runnable that every
// hub replica runs, leading or not. The zero value uses the defaults.
type Releaser struct {
	// Interval between looks; 0 means DefaultInterval.
	Interval time.Duration
	// Quiet: a process that allocated fewer bytes than this since the
	// last look is at rest; 0 means DefaultQuiet.
	Quiet uint64
	// MinGain: release only when at least this many bytes would come
	// back; 0 means DefaultMinGain.
	MinGain uint64
	// Log, if set, gets a line at V(1) for each release.
	Log logr.Logger

	// Tests set these; nil means the runtime's own.
	read    func() Heap
	release func()
}

// Heap is what a Releaser reads of the runtime at each look.
type Heap struct {
	// Allocated is every byte ever allocated on the heap
	// (/gc/heap/allocs:bytes).
	Allocated uint64
	// Retained is heap memory the process holds that is neither live
	// nor returned: objects the last collection did not find live or
	// that were allocated since, free spans and reserved, unused room.
	Retained uint64
}

// The runtime metrics a look reads.
var heapSamples = []string{
	"/gc/heap/allocs:bytes",
	"/gc/heap/live:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/unused:bytes",
}

// ReadHeap reads Heap from the runtime.
func ReadHeap() Heap {
	s := make([]metrics.Sample, len(heapSamples))
	for i, name := range heapSamples {
		s[i].Name = name
	}
	metrics.Read(s)
	v := func(i int) uint64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return s[i].Value.Uint64()
	}
	allocated, live, objects, free, unused := v(0), v(1), v(2), v(3), v(4)
	held := objects + free + unused
	retained := uint64(0)
	if held > live {
		retained = held - live
	}
	return Heap{Allocated: allocated, Retained: retained}
}

var (
	releases = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flotilla_idle_memory_releases_total",
		Help: "Times the process, at rest, collected and returned its free heap to the operating system.",
	})
	releasedBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "flotilla_idle_memory_released_bytes_total",
		Help: "Heap bytes the process held (garbage, free and unused room) before its releases at rest, less what it held after them.",
	})
)

// Collectors are the Releaser's metrics (one pair per process, whatever
// the number of Releasers), for the caller to register.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{releases, releasedBytes}
}

// NeedLeaderElection is false: a standby replica's memory counts too.
func (r *Releaser) NeedLeaderElection() bool { return false }

// Start looks every Interval until ctx ends.
func (r *Releaser) Start(ctx context.Context) error {
	t := time.NewTicker(r.interval())
	defer t.Stop()
	last := r.readHeap().Allocated
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			last = r.look(last)
		}
	}
}

// look is one look: last is what the process had allocated at the one
// before. It releases if the process is at rest and enough would come
// back, and returns what the process has allocated now (after the
// release, whose collection allocates a little itself).
func (r *Releaser) look(last uint64) uint64 {
	h := r.readHeap()
	if h.Allocated-last >= r.quiet() || h.Retained < r.minGain() {
		return h.Allocated
	}
	r.releaseHeap()
	after := r.readHeap()
	releases.Inc()
	gain := uint64(0)
	if h.Retained > after.Retained {
		gain = h.Retained - after.Retained
	}
	releasedBytes.Add(float64(gain))
	r.Log.V(1).Info("released the free heap at rest", "allocatedSinceLastLook", h.Allocated-last, "retainedBefore", h.Retained, "retainedAfter", after.Retained)
	return after.Allocated
}

func (r *Releaser) interval() time.Duration {
	if r.Interval > 0 {
		return r.Interval
	}
	return DefaultInterval
}

func (r *Releaser) quiet() uint64 {
	if r.Quiet > 0 {
		return r.Quiet
	}
	return DefaultQuiet
}

func (r *Releaser) minGain() uint64 {
	if r.MinGain > 0 {
		return r.MinGain
	}
	return DefaultMinGain
}

func (r *Releaser) readHeap() Heap {
	if r.read != nil {
		return r.read()
	}
	return ReadHeap()
}

func (r *Releaser) releaseHeap() {
	if r.release != nil {
		r.release()
		return
	}
	debug.FreeOSMemory()
}
