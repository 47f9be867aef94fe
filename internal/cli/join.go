package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/deploy"
	"github.com/flotilla-dev/flotilla/internal/ssa/ssacr"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/sync/syncv1"
)

// LabelJoinCreated, on the member's flotilla-system namespace, says that
// `kubectl flotilla join` created it, so `unjoin` deletes it; a namespace
// that was there before join is left.
const LabelJoinCreated = "flotilla.dev/created-by-join"

// Keys of the bootstrap Secret (flotilla-agent-bootstrap) join writes for
// the agent.
const (
	BootstrapKeyHubAddress  = "hub-address"
	BootstrapKeyToken       = "token"
	BootstrapKeyCAHash      = "ca-hash"
	BootstrapKeyClusterName = "cluster-name"
	BootstrapKeyLabels      = "labels"
	BootstrapKeyRegion      = "region"
	BootstrapKeyZone        = "zone"
	BootstrapKeyProvider    = "provider"
)

// Keys of the agent's credentials Secret (flotilla-agent-credentials)
// that join's wait reads.
const (
	credentialsKeyCert    = corev1.TLSCertKey
	credentialsKeyRequest = "request"
)

// JoinOptions say how to join a member.
type JoinOptions struct {
	// HubAddress is host:port of the hub's sync endpoint (several,
	// comma-separated, for hub replicas; the first is checked).
	HubAddress string
	// Token is the bootstrap token, <id>.<secret>.
	Token string
	// CAHash pins the hub CA: sha256:<hex>.
	CAHash string
	// ClusterName is the MemberCluster's name.
	ClusterName string
	// Labels, Region, Zone and Provider describe the new MemberCluster.
	Labels                 map[string]string
	Region, Zone, Provider string
	// Image replaces the agent image (empty: the base's).
	Image string
	// Namespace is the agent's namespace in the member.
	Namespace string
	// DialTimeout bounds each call to the hub.
	DialTimeout time.Duration
	// Wait until the hub lets the member in or says it is pending, up
	// to Timeout. Hub, when set, is read for the MemberCluster;
	// otherwise the member's agent credentials and the hub's answer
	// about its certificate request tell.
	Wait    bool
	Timeout time.Duration
	Hub     client.Reader
	// Out receives progress lines.
	Out io.Writer
}

// check validates the options, naming the flag at fault.
func (o *JoinOptions) check() (bootstrap.Token, error) {
	if o.HubAddress == "" {
		return bootstrap.Token{}, errors.New("--hub: required (HOST:PORT of the hub, as `kubectl flotilla init` printed it)")
	}
	for _, a := range strings.Split(o.HubAddress, ",") {
		if err := checkHostPort(a); err != nil {
			return bootstrap.Token{}, fmt.Errorf("--hub: %w", err)
		}
	}
	t, err := bootstrap.ParseToken(o.Token)
	if err != nil {
		return bootstrap.Token{}, fmt.Errorf("--token: %w", err)
	}
	if o.CAHash, err = bootstrap.ParseCAHash(o.CAHash); err != nil {
		return bootstrap.Token{}, fmt.Errorf("--ca-hash: %w", err)
	}
	if err := checkClusterName(o.ClusterName); err != nil {
		return bootstrap.Token{}, fmt.Errorf("--cluster-name: %w", err)
	}
	if err := checkLabels(o.Labels); err != nil {
		return bootstrap.Token{}, fmt.Errorf("--labels: %w", err)
	}
	if o.Namespace == "" {
		o.Namespace = flotillav1.SystemNamespace
	}
	if o.Namespace != flotillav1.SystemNamespace {
		return bootstrap.Token{}, fmt.Errorf("--flotilla-namespace %q: join installs deploy/agent, which lives in %s", o.Namespace, flotillav1.SystemNamespace)
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 10 * time.Second
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return t, nil
}

// checkClusterName says whether name can name a MemberCluster.
func checkClusterName(name string) error {
	if name == "" {
		return errors.New("is required")
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("%q: %s", name, strings.Join(errs, "; "))
	}
	if len(name) > flotillav1.MaxClusterNameLength {
		return fmt.Errorf("%q: at most %d characters (the hub keeps its Works in namespace %s<name>)", name, flotillav1.MaxClusterNameLength, flotillav1.ClusterNamespacePrefix)
	}
	return nil
}

// checkLabels says whether labels are valid Kubernetes labels.
func checkLabels(labels map[string]string) error {
	for k, v := range labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("value %q of %s: %s", v, k, strings.Join(errs, "; "))
		}
	}
	return nil
}

// Join joins the member that member talks to: it checks the hub (its CA
// against the pin, then the token and the name with a dry-run Register),
// installs the agent with the bootstrap Secret, and, with Wait, waits
// for the hub's verdict. Nothing is created anywhere when a check fails.
func Join(ctx context.Context, member client.Client, opts JoinOptions) error {
	t, err := opts.check()
	if err != nil {
		return err
	}
	if err := Preflight(ctx, opts, t); err != nil {
		return err
	}
	fmt.Fprintf(opts.Out, "The hub at %s holds the pinned CA and accepts token %s for %s.\n", firstAddress(opts.HubAddress), t.ID, opts.ClusterName)
	if err := InstallAgent(ctx, member, opts); err != nil {
		return err
	}
	fmt.Fprintf(opts.Out, "Installed the agent in %s; it registers %s with the hub.\n", opts.Namespace, opts.ClusterName)
	if !opts.Wait {
		return nil
	}
	return waitJoined(ctx, member, opts)
}

func firstAddress(addrs string) string {
	a, _, _ := strings.Cut(addrs, ",")
	return a
}

// pinnedTLS is a TLS client configuration that trusts only the CA the
// pin names, found among the certificates the hub sends.
func pinnedTLS(pin, address string) *tls.Config {
	host, _, _ := net.SplitHostPort(address)
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: host,
		NextProtos: []string{"h2"},
		// The chain is verified below, against the pinned CA only, which
		// no system pool holds.
		InsecureSkipVerify: true, //nolint:gosec // VerifyPeerCertificate verifies.
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			_, err := bootstrap.VerifyPinned(raw, pin, host)
			return err
		},
	}
}

// dialHub returns a Bootstrap client of the hub at address, trusting the
// pinned CA only.
func dialHub(pin, address string) (syncv1.BootstrapClient, func(), error) {
	cc, err := grpc.NewClient(address, grpc.WithTransportCredentials(credentials.NewTLS(pinnedTLS(pin, address))))
	if err != nil {
		return nil, nil, fmt.Errorf("--hub %s: %w", address, err)
	}
	return syncv1.NewBootstrapClient(cc), func() { _ = cc.Close() }, nil
}

// Preflight checks the hub before anything is installed: a TLS handshake
// that must find the pinned CA in the hub's chain, then a dry-run
// Register that checks the token and the cluster name as the agent's real
// one will, consuming and creating nothing.
func Preflight(ctx context.Context, opts JoinOptions, t bootstrap.Token) error {
	addr := firstAddress(opts.HubAddress)
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: opts.DialTimeout}, Config: pinnedTLS(opts.CAHash, addr)}
	dctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("checking the hub at %s: %w", addr, err)
	}
	_ = conn.Close()

	bc, done, err := dialHub(opts.CAHash, addr)
	if err != nil {
		return err
	}
	defer done()
	rctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	_, err = bc.Register(rctx, &syncv1.RegisterRequest{
		Token: t.String(), ClusterName: opts.ClusterName, Labels: opts.Labels,
		Region: opts.Region, Zone: opts.Zone, Provider: opts.Provider, DryRun: true,
	})
	if err != nil {
		return hubRefusal(addr, opts.ClusterName, err)
	}
	return nil
}

// hubRefusal turns the hub's gRPC error into one that says what to do.
func hubRefusal(addr, cluster string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("asking the hub at %s: %w", addr, err)
	}
	switch st.Code() {
	case codes.Unauthenticated:
		return fmt.Errorf("the hub refused the token: %s", st.Message())
	case codes.AlreadyExists:
		return fmt.Errorf("the hub refused cluster name %s: %s", cluster, st.Message())
	case codes.InvalidArgument, codes.PermissionDenied, codes.FailedPrecondition:
		return fmt.Errorf("the hub refused the join of %s: %s", cluster, st.Message())
	case codes.Unavailable, codes.DeadlineExceeded:
		return fmt.Errorf("cannot reach the hub at %s: %s", addr, st.Message())
	case codes.Unimplemented:
		return fmt.Errorf("the hub at %s does not serve joins (an older hub, or not a Flotilla hub): %s", addr, st.Message())
	}
	return fmt.Errorf("the hub at %s: %s: %s", addr, st.Code(), st.Message())
}

// InstallAgent applies deploy/agent into the member and writes the
// bootstrap Secret the agent registers with. A namespace join creates is
// labelled LabelJoinCreated, so unjoin removes it.
func InstallAgent(ctx context.Context, member client.Client, opts JoinOptions) error {
	objs, err := deploy.Objects(deploy.Agent, opts.Image)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{}
	err = member.Get(ctx, client.ObjectKey{Name: opts.Namespace}, ns)
	switch {
	case apierrors.IsNotFound(err):
		ns = nil
	case err != nil:
		return fmt.Errorf("reading namespace %s in the member: %w", opts.Namespace, err)
	}
	created := claimNamespace(ns)
	for _, o := range objs {
		if o.GetKind() == "Namespace" && o.GetName() == opts.Namespace && created {
			labels := o.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			labels[LabelJoinCreated] = "true"
			o.SetLabels(labels)
		}
	}
	if err := applyObjects(ctx, member, objs); err != nil {
		return err
	}
	secret := BootstrapSecret(opts)
	ac, err := ssacr.ApplyConfiguration(secret)
	if err != nil {
		return err
	}
	if err := member.Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing Secret %s/%s: %w", secret.Namespace, secret.Name, err)
	}
	return nil
}

// claimNamespace says whether join labels the agent's namespace as its
// own: when join creates it (existing is nil), and on every later join of
// a namespace it created, since an apply that left the label out would
// remove it. A namespace that was there before join is never claimed.
func claimNamespace(existing *corev1.Namespace) bool {
	return existing == nil || existing.Labels[LabelJoinCreated] == "true"
}

// BootstrapSecret is the Secret the agent registers with.
func BootstrapSecret(opts JoinOptions) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name: flotillav1.AgentBootstrapSecretName, Namespace: opts.Namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "flotilla-agent", "app.kubernetes.io/part-of": "flotilla"},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			BootstrapKeyHubAddress:  []byte(opts.HubAddress),
			BootstrapKeyToken:       []byte(opts.Token),
			BootstrapKeyCAHash:      []byte(opts.CAHash),
			BootstrapKeyClusterName: []byte(opts.ClusterName),
			BootstrapKeyLabels:      []byte(bootstrap.FormatLabels(opts.Labels)),
			BootstrapKeyRegion:      []byte(opts.Region),
			BootstrapKeyZone:        []byte(opts.Zone),
			BootstrapKeyProvider:    []byte(opts.Provider),
		},
	}
}

// JoinState is where a join stands, as its wait sees it.
type JoinState int

const (
	// JoinWaiting: the agent has not registered (or connected) yet.
	JoinWaiting JoinState = iota
	// JoinPending: the hub waits for `kubectl flotilla accept`.
	JoinPending
	// JoinJoined: the member is in the fleet.
	JoinJoined
	// JoinDenied: the hub refused the member.
	JoinDenied
)

// HubJoinState is where the join of the cluster whose MemberCluster is mc
// (nil: none yet) stands, and why.
func HubJoinState(name string, mc *flotillav1.MemberCluster) (JoinState, string) {
	switch {
	case mc == nil:
		return JoinWaiting, fmt.Sprintf("MemberCluster %s does not exist yet: the agent has not registered", name)
	case mc.DeletionTimestamp != nil:
		return JoinDenied, fmt.Sprintf("MemberCluster %s is being deleted", name)
	case mc.Spec.Acceptance == flotillav1.AcceptanceDenied:
		return JoinDenied, fmt.Sprintf("the hub denied %s (spec.acceptance Denied); `kubectl flotilla accept %s` lets it in", name, name)
	case mc.Spec.Acceptance == flotillav1.AcceptancePending:
		return JoinPending, pendingMessage(name)
	}
	if c := meta.FindStatusCondition(mc.Status.Conditions, flotillav1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue {
		return JoinJoined, fmt.Sprintf("joined: %s is Ready", name)
	}
	return JoinWaiting, fmt.Sprintf("%s is accepted; waiting for its agent to connect and report Ready", name)
}

func pendingMessage(name string) string {
	return fmt.Sprintf("pending: run `kubectl flotilla accept %s` on the hub", name)
}

// MemberJoinState is where the join stands as the member sees it: the
// agent's credentials Secret (nil: none yet), its identity ConfigMap
// (nil: it never connected) and the hub's answer about the pending
// certificate request (nil: not asked).
func MemberJoinState(name string, creds *corev1.Secret, identity *corev1.ConfigMap, cert *syncv1.CertificateResponse) (JoinState, string) {
	switch {
	case creds == nil:
		return JoinWaiting, "the agent has not registered yet (no Secret " + flotillav1.AgentCredentialsSecretName + ")"
	case len(creds.Data[credentialsKeyCert]) > 0:
		if identity != nil && identity.Data["clusterName"] == name {
			return JoinJoined, fmt.Sprintf("joined: %s holds its certificate and its agent connected to the hub", name)
		}
		return JoinWaiting, fmt.Sprintf("%s holds its certificate; waiting for its agent to connect", name)
	case cert == nil:
		return JoinWaiting, "the agent registered; waiting for the hub's answer"
	}
	switch cert.State {
	case syncv1.CertificateResponse_DENIED:
		return JoinDenied, fmt.Sprintf("the hub denied %s's certificate: %s", name, cert.Message)
	case syncv1.CertificateResponse_ISSUED:
		return JoinWaiting, "the hub issued the certificate; waiting for the agent to store it"
	}
	return JoinPending, pendingMessage(name)
}

// waitJoined polls until the join is pending, joined or denied.
func waitJoined(ctx context.Context, member client.Client, opts JoinOptions) error {
	var state JoinState
	var msg string
	last := ""
	err := poll(ctx, opts.Timeout, "the hub to accept or hold "+opts.ClusterName, func() error {
		if opts.Hub != nil {
			state, msg = hubState(ctx, opts.Hub, opts.ClusterName)
		} else {
			state, msg = memberState(ctx, member, opts)
		}
		if msg != last && state == JoinWaiting {
			fmt.Fprintln(opts.Out, msg)
			last = msg
		}
		if state == JoinWaiting {
			return errors.New(msg)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if state == JoinDenied {
		return errors.New(msg)
	}
	fmt.Fprintln(opts.Out, msg)
	return nil
}

func hubState(ctx context.Context, hub client.Reader, name string) (JoinState, string) {
	mc := &flotillav1.MemberCluster{}
	if err := hub.Get(ctx, client.ObjectKey{Name: name}, mc); err != nil {
		if apierrors.IsNotFound(err) {
			return HubJoinState(name, nil)
		}
		return JoinWaiting, fmt.Sprintf("reading MemberCluster %s on the hub: %v", name, err)
	}
	return HubJoinState(name, mc)
}

func memberState(ctx context.Context, member client.Reader, opts JoinOptions) (JoinState, string) {
	creds := &corev1.Secret{}
	if err := member.Get(ctx, client.ObjectKey{Namespace: opts.Namespace, Name: flotillav1.AgentCredentialsSecretName}, creds); err != nil {
		if !apierrors.IsNotFound(err) {
			return JoinWaiting, fmt.Sprintf("reading the agent's credentials: %v", err)
		}
		creds = nil
	}
	identity := &corev1.ConfigMap{}
	if err := member.Get(ctx, client.ObjectKey{Namespace: opts.Namespace, Name: flotillav1.AgentIdentityConfigMapName}, identity); err != nil {
		identity = nil
	}
	var cert *syncv1.CertificateResponse
	if creds != nil && len(creds.Data[credentialsKeyCert]) == 0 && len(creds.Data[credentialsKeyRequest]) > 0 {
		if bc, done, err := dialHub(opts.CAHash, firstAddress(opts.HubAddress)); err == nil {
			cctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
			cert, _ = bc.Certificate(cctx, &syncv1.CertificateRequest{Request: string(creds.Data[credentialsKeyRequest])})
			cancel()
			done()
		}
	}
	return MemberJoinState(opts.ClusterName, creds, identity, cert)
}

func newJoinCommand(g *Globals) *cobra.Command {
	var (
		opts                  JoinOptions
		labels                string
		hubKubeconfig, hubCtx string
		mode                  string
		push                  PushJoinOptions
	)
	cmd := &cobra.Command{
		Use:   "join (--hub HOST:PORT --token T --ca-hash sha256:... | --mode push --hub-context HUB) --cluster-name NAME",
		Short: "Join the cluster of the current context (the member) to a hub",
		Long: `join checks the hub first (its CA against --ca-hash, then the token and the
name, without using them up), installs the agent into the member named by
--context / --kubeconfig with a bootstrap Secret, and waits for the hub's
verdict: joined, or pending until an admin runs kubectl flotilla accept.
The agent makes its own key and registers; the key never leaves the member.
With --hub-kubeconfig or --hub-context the wait reads the MemberCluster on
the hub; otherwise it reads the agent's progress in the member.

With --mode push no agent is installed: join creates the ServiceAccount
flotilla-push in the member, binds it to the agent's RBAC, waits for its
long-lived token, checks the member with it, and writes the kubeconfig as
Secret flotilla-push-NAME and a MemberCluster NAME with spec.syncMode Push on
the hub (--hub-context / --hub-kubeconfig); the hub then applies the
member's Works itself. An existing Pull MemberCluster is switched to Push.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if opts.Labels, err = parseLabelsFlag("--labels", labels); err != nil {
				return err
			}
			switch strings.ToLower(mode) {
			case ModePull:
				for _, f := range []string{"member-server", "overwrite", "rotate-token", "dry-run"} {
					if cmd.Flags().Changed(f) {
						return fmt.Errorf("--%s is for --mode push", f)
					}
				}
			case ModePush:
				for _, f := range []string{"hub", "token", "ca-hash", "image", "wait"} {
					if cmd.Flags().Changed(f) {
						return fmt.Errorf("--%s is for --mode pull: a push member has no agent (give the hub with --hub-context or --hub-kubeconfig)", f)
					}
				}
				if hubKubeconfig == "" && hubCtx == "" {
					return errors.New("--mode push: --hub-context or --hub-kubeconfig is required (join writes the MemberCluster and its kubeconfig Secret on the hub)")
				}
				memberCfg, err := g.Kube.ToRESTConfig()
				if err != nil {
					return err
				}
				member, err := NewClient(memberCfg)
				if err != nil {
					return err
				}
				hubCfg, err := g.restConfigFor(hubKubeconfig, hubCtx)
				if err != nil {
					return fmt.Errorf("--hub-kubeconfig / --hub-context: %w", err)
				}
				hub, err := NewClient(hubCfg)
				if err != nil {
					return err
				}
				push.ClusterName, push.Labels = opts.ClusterName, opts.Labels
				push.Region, push.Zone, push.Provider = opts.Region, opts.Zone, opts.Provider
				push.Timeout, push.Namespace, push.Out, push.HubContext = opts.Timeout, g.SystemNamespace, g.IO.Out, hubCtx
				return PushJoin(cmd.Context(), member, memberCfg, hub, push)
			default:
				return fmt.Errorf("--mode %q: want pull or push", mode)
			}
			member, err := g.client()
			if err != nil {
				return err
			}
			if hubKubeconfig != "" || hubCtx != "" {
				cfg, err := g.restConfigFor(hubKubeconfig, hubCtx)
				if err != nil {
					return fmt.Errorf("--hub-kubeconfig / --hub-context: %w", err)
				}
				if opts.Hub, err = NewClient(cfg); err != nil {
					return err
				}
			}
			opts.Namespace, opts.Out = g.SystemNamespace, g.IO.Out
			return Join(cmd.Context(), member, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.HubAddress, "hub", "", "HOST:PORT of the hub's sync endpoint")
	f.StringVar(&opts.Token, "token", "", "bootstrap token <id>.<secret> (kubectl flotilla token create)")
	f.StringVar(&opts.CAHash, "ca-hash", "", "sha256:<hex> pin of the hub CA's public key")
	f.StringVar(&opts.ClusterName, "cluster-name", "", "name of the MemberCluster")
	f.StringVar(&labels, "labels", "", "k=v,... labels of the MemberCluster")
	f.StringVar(&opts.Region, "region", "", "region of the member")
	f.StringVar(&opts.Zone, "zone", "", "zone of the member")
	f.StringVar(&opts.Provider, "provider", "", "provider of the member")
	f.StringVar(&opts.Image, "image", "", "agent image (default: the one deploy/agent names)")
	f.BoolVar(&opts.Wait, "wait", true, "wait for the hub to accept or hold the member")
	f.DurationVar(&opts.Timeout, "timeout", 2*time.Minute, "how long --wait waits")
	f.DurationVar(&opts.DialTimeout, "dial-timeout", 10*time.Second, "how long each call to the hub may take")
	f.StringVar(&hubKubeconfig, "hub-kubeconfig", "", "kubeconfig of the hub, for --wait to read the MemberCluster")
	f.StringVar(&hubCtx, "hub-context", "", "context of the hub, for --wait to read the MemberCluster (push: where the MemberCluster and its Secret are written)")
	f.StringVar(&mode, "mode", ModePull, "pull (an agent in the member connects to the hub) or push (the hub applies the member's Works with a kubeconfig join makes)")
	f.StringVar(&push.MemberServer, "member-server", "", "push: the member's apiserver URL as the hub reaches it (default: the member context's server)")
	f.BoolVar(&push.Overwrite, "overwrite", false, "push: replace a push kubeconfig Secret on the hub that differs from the one join makes, or a MemberCluster's reference to another Secret")
	f.BoolVar(&push.DryRun, "dry-run", false, "push: print what join would do and change nothing")
	f.BoolVar(&push.RotateToken, "rotate-token", false, "push: revoke the member's token (re-create ServiceAccount flotilla-push and its token Secret), and replace the hub's kubeconfig (implies --overwrite)")
	return cmd
}
