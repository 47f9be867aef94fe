package setup

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/flotilla-dev/flotilla/agent/join"
	"github.com/flotilla-dev/flotilla/internal/startup"
	"github.com/flotilla-dev/flotilla/pkg/kclient"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// The agent's identity lives in two Secrets in its namespace: the
// bootstrap Secret `kubectl flotilla join` writes (which the agent deletes
// once it holds a certificate) and the credentials Secret it keeps its key
// and certificate in. It reads them by name, never lists or watches them
// (a new leader reads them afresh), so the Role grants get, update and
// delete of those two names only; RBAC cannot limit create to a name, so
// create is granted in the agent's namespace. Agents run with other
// --credentials-secret or --bootstrap-secret names need the Role changed
// to match.
//
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;update;delete,resourceNames=flotilla-agent-credentials;flotilla-agent-bootstrap,namespace=flotilla-system
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create,namespace=flotilla-system
// +kubebuilder:rbac:groups="",resources=events,verbs=create,namespace=flotilla-system

// agentIdentity is where the agent's client certificate comes from and
// the hub it dials.
type agentIdentity struct {
	plan       join.Plan
	tls        *tls.Config
	target     string
	serverName string
	// cluster is the name the Secrets gave ("" with files: the
	// certificate's).
	cluster string
	// source is nil with files.
	source *join.Source
}

// loadPlan is join.Load, tried again while the member's apiserver cannot
// be reached (startup.Retry): the read is the agent's first call to its
// apiserver, so it meets what a node that just started has not set up
// yet. Any other error (refused credentials, a Secret that does not
// parse) is returned at once.
func loadPlan(ctx context.Context, log logr.Logger, c kclient.Reader, namespace, credentialsSecret, bootstrapSecret string) (join.Plan, error) {
	return startup.Retry(ctx, log, "reading the agent's Secrets", func(ctx context.Context) (join.Plan, error) {
		return join.Load(ctx, c, namespace, credentialsSecret, bootstrapSecret, time.Now())
	})
}

// resolveIdentity decides (join.Decide) where the agent's identity comes
// from: its Secrets (a certificate, a pending request or a bootstrap
// token), else --cert-file, --key-file and --ca-file.
func resolveIdentity(opts Options, c kclient.Reader) (agentIdentity, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startup.Timeout)
	defer cancel()
	plan, err := loadPlan(ctx, opts.Logger, c, agentNamespace(opts), opts.CredentialsSecret, opts.BootstrapSecret)
	if err != nil {
		return agentIdentity{}, fmt.Errorf("agent: deciding where its identity comes from: %w", err)
	}
	if plan.Mode == join.UseFiles {
		if opts.HubAddress == "" {
			return agentIdentity{}, fmt.Errorf("agent: no identity in its Secrets (%s), and no --hub-address for --cert-file", plan.Why)
		}
		target, serverName, err := hubTarget(opts.HubAddress)
		if err != nil {
			return agentIdentity{}, err
		}
		tlsCfg, err := pki.ClientTLSConfig(opts.CertFile, opts.KeyFile, opts.CAFile, serverName)
		if err != nil {
			return agentIdentity{}, fmt.Errorf("loading the agent's certificates from --cert-file, --key-file and --ca-file, since %s: %w", plan.Why, err)
		}
		return agentIdentity{plan: plan, tls: tlsCfg, target: target, serverName: serverName, cluster: opts.ClusterName}, nil
	}
	addr := plan.HubAddress
	if opts.HubAddress != "" {
		// The flag wins: the hub may be reached by another address from
		// inside this member than the one the join command was given.
		addr = opts.HubAddress
	}
	if addr == "" {
		return agentIdentity{}, errors.New("agent: its Secrets name no hub address, and --hub-address is empty")
	}
	if opts.ClusterName != "" && opts.ClusterName != plan.ClusterName {
		return agentIdentity{}, fmt.Errorf("agent: --cluster-name is %q but its Secrets are for cluster %q", opts.ClusterName, plan.ClusterName)
	}
	target, serverName, err := hubTarget(addr)
	if err != nil {
		return agentIdentity{}, err
	}
	source := join.NewSource()
	return agentIdentity{plan: plan, tls: source.TLSConfig(serverName), target: target, serverName: serverName, cluster: plan.ClusterName, source: source}, nil
}

// waitForCertificate runs run once source holds a certificate: the
// stream waits for the join.
func waitForCertificate(source *join.Source, run streamRunner) streamRunner {
	return func(ctx context.Context) error {
		select {
		case <-source.Ready():
		case <-ctx.Done():
			return nil
		}
		return run(ctx)
	}
}
