package health

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Prometheus queries one Prometheus server's HTTP API.
type Prometheus struct {
	api promv1.API
	now func() time.Time
}

// NewPrometheus returns a Querier for the Prometheus at url; rt, when not
// nil, carries the requests (TLS, auth).
func NewPrometheus(url string, rt http.RoundTripper) (*Prometheus, error) {
	c, err := api.NewClient(api.Config{Address: url, RoundTripper: rt})
	if err != nil {
		return nil, fmt.Errorf("the Prometheus URL %q: %w", url, err)
	}
	return &Prometheus{api: promv1.NewAPI(c), now: time.Now}, nil
}

// Query evaluates query at the current time. It must yield exactly one
// sample (a one-series vector or a scalar) with a finite value.
func (p *Prometheus) Query(ctx context.Context, query string) (float64, error) {
	v, _, _, err := p.api.Query(ctx, query, p.now())
	if err != nil {
		return 0, fmt.Errorf("query %q: %w", query, err)
	}
	var f float64
	switch v := v.(type) {
	case model.Vector:
		switch len(v) {
		case 0:
			return 0, fmt.Errorf("query %q returned no sample", query)
		case 1:
			f = float64(v[0].Value)
		default:
			return 0, fmt.Errorf("query %q returned %d series, want one (aggregate it, e.g. max(...))", query, len(v))
		}
	case *model.Scalar:
		f = float64(v.Value)
	default:
		return 0, fmt.Errorf("query %q returned a %s, want an instant vector of one series or a scalar", query, v.Type())
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("query %q returned %v", query, f)
	}
	return f, nil
}

// URLQuerier queries the Prometheus whose URL lookup gives at each query,
// reusing the client while the URL stays the same: a push member's URL
// (spec.push.prometheusURL) may change while the hub runs.
type URLQuerier struct {
	// Lookup returns the URL; "" means none is configured.
	Lookup func(ctx context.Context) (string, error)
	// None is the error's text when no URL is configured.
	None string

	mu   sync.Mutex
	url  string
	prom *Prometheus
}

// Query implements Querier.
func (q *URLQuerier) Query(ctx context.Context, query string) (float64, error) {
	url, err := q.Lookup(ctx)
	if err != nil {
		return 0, err
	}
	if url == "" {
		return 0, errors.New(q.None)
	}
	q.mu.Lock()
	if q.prom == nil || q.url != url {
		p, err := NewPrometheus(url, nil)
		if err != nil {
			q.mu.Unlock()
			return 0, err
		}
		q.prom, q.url = p, url
	}
	p := q.prom
	q.mu.Unlock()
	return p.Query(ctx, query)
}
