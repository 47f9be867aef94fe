package server

import (
	"container/list"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// statusPacer paces one stream's status reports with a token bucket:
// Burst at once, then Rate per second. A report that finds no token is not
// decoded and not passed on: it waits in a backlog that holds the latest
// report per Work (a newer report of the same Work replaces the waiting
// one in place, latest wins), oldest Work first. The stream's handler
// takes reports from the backlog as tokens come, between the messages it
// receives, so heartbeats and every other message never wait behind a
// status flood; only that member's status is late.
//
// The backlog is bounded in bytes (the reports' wire sizes). When a report
// of a Work that does not wait yet would pass the bound, it is dropped and
// counted (flotilla_sync_status_clamped_total{what="rate_backlog_full"}),
// and so is a replacement that would: the agent sends the Work's status
// again when it changes, and on every reconnect. Only the stream's handler
// goroutine uses a statusPacer.
type statusPacer struct {
	tokenTimer
	waiting  *list.List // *backlogged, oldest first
	index    map[string]*list.Element
	bytes    int
	maxBytes int
}

// backlogged is one Work's waiting report.
type backlogged struct {
	name   string
	report *syncv1.StatusReport
	size   int
}

// newStatusPacer returns a pacer of r reports per second after burst at
// once, with a backlog of at most maxBytes, or nil (no pacing) for a
// negative or infinite r.
func newStatusPacer(r float64, burst, maxBytes int) *statusPacer {
	if r < 0 || math.IsInf(r, 1) {
		return nil
	}
	return &statusPacer{
		tokenTimer: newTokenTimer(r, burst),
		waiting:    list.New(),
		index:      make(map[string]*list.Element),
		maxBytes:   maxBytes,
	}
}

// ready fires when the oldest waiting report may have a token; nil (never
// fires) without pacing.
func (p *statusPacer) ready() <-chan time.Time {
	if p == nil {
		return nil
	}
	return p.timer.C
}

// admit says whether the report of Work name may be handled now. It may
// when nothing waits and a token is there; otherwise the report joins the
// backlog (or replaces the waiting one of the same Work) and admit reports
// whether it fit.
func (p *statusPacer) admit(name string, m *syncv1.StatusReport, now time.Time) (handleNow, kept bool) {
	if p == nil {
		return true, true
	}
	if p.waiting.Len() == 0 && p.limiter.AllowN(now, 1) {
		return true, true
	}
	size := proto.Size(m)
	if e, ok := p.index[name]; ok {
		b := e.Value.(*backlogged)
		if p.bytes-b.size+size > p.maxBytes {
			p.arm(now)
			return false, false
		}
		p.bytes += size - b.size
		b.report, b.size = m, size
		p.arm(now)
		return false, true
	}
	if p.bytes+size > p.maxBytes {
		p.arm(now)
		return false, false
	}
	p.index[name] = p.waiting.PushBack(&backlogged{name: name, report: m, size: size})
	p.bytes += size
	p.arm(now)
	return false, true
}

// next takes the oldest waiting report if a token is there; ok is false
// when none waits or no token is left (the timer is armed then).
func (p *statusPacer) next(now time.Time) (*syncv1.StatusReport, bool) {
	e := p.waiting.Front()
	if e == nil {
		return nil, false
	}
	if !p.limiter.AllowN(now, 1) {
		p.arm(now)
		return nil, false
	}
	b := p.waiting.Remove(e).(*backlogged)
	delete(p.index, b.name)
	p.bytes -= b.size
	return b.report, true
}

func (p *statusPacer) stop() {
	if p != nil {
		p.timer.Stop()
	}
}

// backlogLen is how many Works' reports wait.
func (p *statusPacer) backlogLen() int {
	if p == nil {
		return 0
	}
	return p.waiting.Len()
}

// connectLimiter limits how often each cluster may open a stream, with a
// token bucket per cluster. A connect costs the hub a registry lookup, a
// snapshot (every Work of the cluster, when the hello says it holds none)
// and connect and disconnect writes to the MemberCluster, so an agent in a
// reconnect loop must not run it at the agent's pace.
//
// Buckets are kept per cluster name a valid certificate proved, so their
// number is bounded by the certificates the hub's CA issued; buckets that
// are full again (idle clusters) are forgotten once there are more than
// maxIdleBuckets, so the map does not grow with clusters long gone.
type connectLimiter struct {
	rate  rate.Limit
	burst int

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

const maxIdleBuckets = 1024

// newConnectLimiter returns a limiter of r connects per second per
// cluster after burst, or nil (no limit) for a negative or infinite r.
func newConnectLimiter(r float64, burst int) *connectLimiter {
	if r < 0 || math.IsInf(r, 1) {
		return nil
	}
	return &connectLimiter{rate: rate.Limit(r), burst: burst, buckets: map[string]*rate.Limiter{}}
}

// allow takes a token of cluster's bucket if one is there, and otherwise
// says how long until one is.
func (l *connectLimiter) allow(cluster string, now time.Time) (bool, time.Duration) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[cluster]
	if !ok {
		if len(l.buckets) >= maxIdleBuckets {
			for name, other := range l.buckets {
				if other.TokensAt(now) >= float64(l.burst) {
					delete(l.buckets, name)
				}
			}
		}
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets[cluster] = b
	}
	if b.AllowN(now, 1) {
		return true, 0
	}
	wait := time.Second
	if l.rate > 0 {
		wait = time.Duration((1 - b.TokensAt(now)) / float64(l.rate) * float64(time.Second))
	}
	return false, wait
}
