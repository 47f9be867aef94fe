package setup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/flotilla-dev/flotilla/hub/internal/bootstrap"
	"github.com/flotilla-dev/flotilla/hub/internal/controllers/csr"
	"github.com/flotilla-dev/flotilla/pkg/pki"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// DefaultAgentCertificateLifetime is how long an agent certificate the hub
// signs lasts by default; agents renew at 80 % of it.
const DefaultAgentCertificateLifetime = 30 * 24 * time.Hour

// minAgentCertificateLifetime keeps a lifetime long enough for an agent
// to renew before it ends (tests use a couple of minutes).
const minAgentCertificateLifetime = time.Minute

// agentLifetime is opts' agent certificate lifetime, the default for 0.
func agentLifetime(opts Options) time.Duration {
	if opts.AgentCertificateLifetime == 0 {
		return DefaultAgentCertificateLifetime
	}
	return opts.AgentCertificateLifetime
}

// validateJoinOptions refuses join flags the hub must not take.
func validateJoinOptions(opts Options) error {
	if l := opts.AgentCertificateLifetime; l != 0 && l < minAgentCertificateLifetime {
		return fmt.Errorf("--agent-certificate-lifetime is %s: give at least %s (0 means the default, %s)", l, minAgentCertificateLifetime, DefaultAgentCertificateLifetime)
	}
	if opts.BootstrapBurst < 0 {
		return fmt.Errorf("--bootstrap-burst is %d: it must not be negative (0 means the default)", opts.BootstrapBurst)
	}
	if math.IsNaN(opts.BootstrapRate) {
		return errors.New("--bootstrap-rate is NaN: give join requests per second per address (0 means the default, a negative value turns the limit off)")
	}
	return nil
}

// setupJoin builds what joining needs when the hub has a CA to sign with
// (ca not nil): the Bootstrap service the sync server serves, and the
// controller that approves and signs the agents' certificate requests.
// Without a CA it returns nil and the hub serves no Bootstrap.
func setupJoin(ctx context.Context, mgr ctrl.Manager, opts Options, ca *pki.KeyPair) (syncv1.BootstrapServer, error) {
	if ca == nil {
		opts.Logger.Info("no CA key to sign agent certificates with: joining is off (agents need certificates from flotilla-pki)")
		return nil, nil
	}
	lifetime := agentLifetime(opts)
	user, err := csr.HubUsername(ctx, mgr.GetClient())
	if err != nil {
		return nil, err
	}
	if err := (&csr.Reconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		CA:          ca,
		Lifetime:    lifetime,
		HubUsername: user,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("setting up the agent certificate controller: %w", err)
	}
	return &bootstrap.Service{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Cache:     mgr.GetClient(),
		Namespace: hubNamespace(opts),
		CA:        ca,
		Lifetime:  lifetime,
		Log:       opts.Logger.WithName("bootstrap"),
	}, nil
}
