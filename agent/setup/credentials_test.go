package setup

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flotilla-dev/flotilla/pkg/kclient/direct"
	"github.com/go-logr/logr/testr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/flotilla-dev/flotilla/agent/join"
	"github.com/flotilla-dev/flotilla/internal/startup"
	"github.com/flotilla-dev/flotilla/internal/testutil"
)

// TestIdentityReadWaitsForTheAPIServer: the agent's first read of its
// Secrets (a controller-runtime client, as the agent builds it), against
// a real apiserver whose address refuses connections for its first
// second, is tried again until it gets through, and decides from what the
// apiserver holds; a refusal that is an answer (401) is returned at once;
// an address that never answers ends with ctx, naming the last error.
func TestIdentityReadWaitsForTheAPIServer(t *testing.T) {
	cfg := startEnv(t)
	scheme, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	const ns = "identity-read"
	log := testr.New(t)

	t.Run("refused connections are tried again", func(t *testing.T) {
		p := testutil.NewLateAddr(t, cfg)
		var requests atomic.Int32
		c, err := direct.New(p.Config(&requests), scheme)
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(time.Second, p.Open)
		ctx, cancel := context.WithTimeout(context.Background(), startup.Timeout)
		defer cancel()
		plan, err := loadPlan(ctx, log, c, ns, "", "")
		if err != nil {
			t.Fatalf("loadPlan through an address that refused for its first second: %v", err)
		}
		// Nothing in the namespace: the agent falls back to its files.
		if plan.Mode != join.UseFiles {
			t.Errorf("plan.Mode = %v (%s), want %v: no Secret exists", plan.Mode, plan.Why, join.UseFiles)
		}
		if n := p.Accepted(); n == 0 {
			t.Errorf("the proxy accepted no connection: the read did not go through it")
		}
		if n := requests.Load(); n < 3 {
			t.Errorf("%d requests sent, want at least 3 (refused at least once, then the two Secret reads)", n)
		}
	})

	t.Run("an answer is not tried again", func(t *testing.T) {
		p := testutil.NewLateAddr(t, cfg)
		p.Open()
		var requests atomic.Int32
		bad := p.Config(&requests)
		bad.CertData, bad.KeyData, bad.CertFile, bad.KeyFile = nil, nil, "", ""
		bad.BearerToken = "not-a-token-this-apiserver-knows"
		c, err := direct.New(bad, scheme)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), startup.Timeout)
		defer cancel()
		_, err = loadPlan(ctx, log, c, ns, "", "")
		if !apierrors.IsUnauthorized(err) || strings.Contains(err.Error(), "tried") {
			t.Fatalf("loadPlan with an unknown token: err = %v, want 401 Unauthorized at once", err)
		}
		if n := requests.Load(); n > 2 {
			t.Errorf("%d requests sent for a 401, want at most 2 (discovery, the read): an answer is not tried again", n)
		}
	})

	t.Run("an address that never answers ends with ctx", func(t *testing.T) {
		p := testutil.NewLateAddr(t, cfg)
		var requests atomic.Int32
		c, err := direct.New(p.Config(&requests), scheme)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = loadPlan(ctx, log, c, ns, "", "")
		if err == nil || !strings.Contains(err.Error(), "tried") || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("loadPlan against a closed port: err = %v, want the refusal and the number of tries", err)
		}
		if n := requests.Load(); n < 2 {
			t.Errorf("%d requests sent in 2 s of refusals, want several", n)
		}
	})
}
