package webhook

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// TestSetCABundle checks the decision behind InjectCABundle's writes:
// it changes (and reports) only configurations whose bundle differs, so
// a current configuration is never written.
func TestSetCABundle(t *testing.T) {
	ca := []byte("ca-1")
	for _, tt := range []struct {
		name        string
		have        [][]byte
		wantChanged bool
	}{
		{name: "none", have: nil, wantChanged: false},
		{name: "all current", have: [][]byte{[]byte("ca-1"), []byte("ca-1")}, wantChanged: false},
		{name: "placeholder", have: [][]byte{[]byte("PLACEHOLDER")}, wantChanged: true},
		{name: "empty", have: [][]byte{nil}, wantChanged: true},
		{name: "one of two stale", have: [][]byte{[]byte("ca-1"), []byte("ca-0")}, wantChanged: true},
	} {
		configs := make([]*admissionregistrationv1.WebhookClientConfig, len(tt.have))
		for i, b := range tt.have {
			configs[i] = &admissionregistrationv1.WebhookClientConfig{CABundle: b}
		}
		if got := SetCABundle(configs, ca); got != tt.wantChanged {
			t.Errorf("%s: changed = %v, want %v", tt.name, got, tt.wantChanged)
		}
		for i, cc := range configs {
			if string(cc.CABundle) != "ca-1" {
				t.Errorf("%s: config %d has caBundle %q, want ca-1", tt.name, i, cc.CABundle)
			}
		}
	}
	// The bundle is copied, not shared: changing the caller's slice later
	// must not change the configuration.
	cc := &admissionregistrationv1.WebhookClientConfig{}
	buf := []byte("ca-2")
	SetCABundle([]*admissionregistrationv1.WebhookClientConfig{cc}, buf)
	buf[0] = 'X'
	if string(cc.CABundle) != "ca-2" {
		t.Errorf("caBundle shares the caller's slice: %q", cc.CABundle)
	}
}
