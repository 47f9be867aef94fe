package serving

import (
	"crypto/tls"
	"slices"
	"testing"
)

// TestWebhookTLSOpts checks that the webhook's TLS options, applied to
// the config controller-runtime starts from (which offers "h2"), leave
// TLS 1.3 as the minimum and HTTP/1.1 as the only protocol.
func TestWebhookTLSOpts(t *testing.T) {
	c := &tls.Config{NextProtos: []string{"h2"}}
	for _, o := range WebhookTLSOpts() {
		o(c)
	}
	if c.MinVersion != tls.VersionTLS13 {
		t.Errorf("MinVersion = %#x, want TLS 1.3 (%#x)", c.MinVersion, tls.VersionTLS13)
	}
	if !slices.Equal(c.NextProtos, []string{"http/1.1"}) {
		t.Errorf("NextProtos = %q, want only http/1.1", c.NextProtos)
	}
}

// TestMetricsOptions checks both modes: secure serves HTTPS behind the
// authentication and authorization filter, insecure is plain HTTP with no
// filter; neither offers HTTP/2.
func TestMetricsOptions(t *testing.T) {
	for _, tt := range []struct {
		secure bool
	}{{secure: true}, {secure: false}} {
		o := MetricsOptions(":8080", tt.secure)
		if o.BindAddress != ":8080" {
			t.Errorf("secure=%v: BindAddress = %q, want :8080", tt.secure, o.BindAddress)
		}
		if o.SecureServing != tt.secure {
			t.Errorf("secure=%v: SecureServing = %v", tt.secure, o.SecureServing)
		}
		if (o.FilterProvider != nil) != tt.secure {
			t.Errorf("secure=%v: FilterProvider set = %v, want %v", tt.secure, o.FilterProvider != nil, tt.secure)
		}
		c := &tls.Config{NextProtos: []string{"h2"}}
		for _, f := range o.TLSOpts {
			f(c)
		}
		if slices.Contains(c.NextProtos, "h2") {
			t.Errorf("secure=%v: NextProtos = %q, want no h2", tt.secure, c.NextProtos)
		}
	}
}
