package cli

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/deploy"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/hubca"
)

// Names in the hub base that init reads back.
const (
	hubDeploymentName = "flotilla-hub"
	hubServiceName    = "flotilla-hub"
	hubSyncPortName   = "grpc-sync"
)

// InitOptions say how to install a hub.
type InitOptions struct {
	// Namespace is the hub's namespace; the base installs into
	// flotilla-system, and only that is supported.
	Namespace string
	// HubAddress is host:port that agents dial; empty: the hub Service's
	// LoadBalancer address.
	HubAddress string
	// Image replaces the hub image (empty: the base's).
	Image string
	// ServiceType, when set, is the type of the hub Service agents dial
	// (flotilla-hub): LoadBalancer gives agents outside the cluster an
	// address, which init then prints. Empty keeps the base's ClusterIP.
	ServiceType corev1.ServiceType
	// Token describes the token created for the join command.
	Token bootstrap.Options
	// Wait for the hub Deployment to be available (and, without
	// HubAddress, for the LoadBalancer address), up to Timeout.
	Wait    bool
	Timeout time.Duration
	// Now is the time tokens expire from.
	Now time.Time
	// HubOutsideCluster: the hub runs as a process outside the hub
	// cluster (the local testbed, a developer's machine) and registers
	// its webhooks by URL itself (hub --register-webhook-url). Init then
	// applies the CRDs, namespace and RBAC only: no Deployment, Service,
	// PodDisruptionBudget, webhook configurations (they would point at a
	// Service nobody serves, and fail closed) or admission policy on
	// Works (it admits only the in-cluster hub's service account).
	// HubAddress is required.
	HubOutsideCluster bool
}

// inClusterOnly are the kinds of the hub base that only make sense with
// the hub running in the cluster (see InitOptions.HubOutsideCluster).
var inClusterOnly = map[string]bool{
	"Deployment": true, "Service": true, "PodDisruptionBudget": true,
	"MutatingWebhookConfiguration": true, "ValidatingWebhookConfiguration": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

// InitResult is what init did.
type InitResult struct {
	// Applied counts the objects applied.
	Applied int
	// CAHash is the hub CA's pin.
	CAHash string
	// HubAddress is what agents dial.
	HubAddress string
	// Token is the new bootstrap token.
	Token bootstrap.Token
	// JoinCommand is the command to run against each member.
	JoinCommand string
}

// Init installs the hub with c: the hub CA (created once, in Secret
// flotilla-hub-ca), the base deploy/hub (server-side applied, the webhook
// configurations trusting the hub CA), and a new bootstrap token for the
// join command it returns. Run again it changes nothing but adds a token.
func Init(ctx context.Context, c client.Client, opts InitOptions) (*InitResult, error) {
	if opts.Namespace != flotillav1.SystemNamespace {
		return nil, fmt.Errorf("--flotilla-namespace %q: init installs deploy/hub, which lives in %s; for another namespace apply the kustomize base with an overlay", opts.Namespace, flotillav1.SystemNamespace)
	}
	if opts.HubAddress != "" {
		if err := checkHostPort(opts.HubAddress); err != nil {
			return nil, fmt.Errorf("--hub-address: %w", err)
		}
	}
	if opts.HubOutsideCluster && opts.HubAddress == "" {
		return nil, errors.New("--hub-address: required with --hub-outside-cluster (the address the hub process serves agents on)")
	}
	objs, err := deploy.Objects(deploy.Hub, opts.Image)
	if err != nil {
		return nil, err
	}
	if opts.HubOutsideCluster {
		kept := objs[:0]
		for _, o := range objs {
			if !inClusterOnly[o.GetKind()] {
				kept = append(kept, o)
			}
		}
		objs = kept
	}
	if err := setServiceType(objs, opts.ServiceType); err != nil {
		return nil, err
	}
	if opts.HubAddress != "" && !opts.HubOutsideCluster {
		if err := setServingHost(objs, opts.HubAddress); err != nil {
			return nil, err
		}
	}
	ca, err := hubca.Ensure(ctx, c, c, opts.Namespace)
	if err != nil {
		return nil, err
	}
	if err := setCABundles(objs, ca.CertPEM()); err != nil {
		return nil, err
	}
	if err := applyObjects(ctx, c, objs); err != nil {
		return nil, err
	}
	res := &InitResult{Applied: len(objs), CAHash: bootstrap.CAHash(ca.Cert), HubAddress: opts.HubAddress}
	wait := func(what string, check func() error) error {
		if !opts.Wait {
			return check()
		}
		return poll(ctx, opts.Timeout, what, check)
	}
	if opts.Wait && !opts.HubOutsideCluster {
		if err := wait("the hub Deployment to be available", func() error { return hubAvailable(ctx, c, opts.Namespace) }); err != nil {
			return res, err
		}
	}
	if res.HubAddress == "" {
		err := wait("the hub Service's LoadBalancer address", func() error {
			addr, err := loadBalancerAddress(ctx, c, opts.Namespace)
			res.HubAddress = addr
			return err
		})
		if err != nil {
			return res, fmt.Errorf("the hub is installed, but agents need an address to dial: %w; pass --hub-address HOST:PORT (a NodePort, an ingress passing TLS through), or --service-type LoadBalancer for Service %s/%s", err, opts.Namespace, hubServiceName)
		}
		// The hub's serving certificate must name the address agents
		// dial: apply the hub Deployment again with it.
		var hub []*unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "Deployment" && o.GetName() == hubDeploymentName {
				hub = append(hub, o)
			}
		}
		if err := setServingHost(hub, res.HubAddress); err != nil {
			return res, err
		}
		if err := applyObjects(ctx, c, hub); err != nil {
			return res, err
		}
	}
	if res.Token, err = CreateToken(ctx, c, opts.Namespace, opts.Token, opts.Now); err != nil {
		return res, err
	}
	res.JoinCommand = JoinCommand(res.HubAddress, res.Token, res.CAHash)
	return res, nil
}

// JoinCommand is the command a member runs to join the hub.
func JoinCommand(hubAddress string, t bootstrap.Token, caHash string) string {
	return fmt.Sprintf("kubectl flotilla join --hub %s --token %s --ca-hash %s --cluster-name <NAME>", hubAddress, t, caHash)
}

// setCABundles makes the base's webhook configurations trust the hub CA
// (the placeholder in webhook.yaml otherwise waits for the hub to fill it
// in), so the apply and the hub agree on the value and a second init
// changes nothing.
func setCABundles(objs []*unstructured.Unstructured, caPEM []byte) error {
	for _, o := range objs {
		if k := o.GetKind(); k != "MutatingWebhookConfiguration" && k != "ValidatingWebhookConfiguration" {
			continue
		}
		hooks, _, err := unstructured.NestedSlice(o.Object, "webhooks")
		if err != nil {
			return fmt.Errorf("%s %s: webhooks: %w", o.GetKind(), o.GetName(), err)
		}
		for i, h := range hooks {
			m, ok := h.(map[string]any)
			if !ok {
				continue
			}
			if err := unstructured.SetNestedField(m, base64.StdEncoding.EncodeToString(caPEM), "clientConfig", "caBundle"); err != nil {
				return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
			}
			hooks[i] = m
		}
		if err := unstructured.SetNestedSlice(o.Object, hooks, "webhooks"); err != nil {
			return err
		}
	}
	return nil
}

// setServiceType sets the type of the hub Service agents dial.
func setServiceType(objs []*unstructured.Unstructured, t corev1.ServiceType) error {
	switch t {
	case "":
		return nil
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
	default:
		return fmt.Errorf("--service-type %q: want ClusterIP, NodePort or LoadBalancer", t)
	}
	for _, o := range objs {
		if o.GetKind() == "Service" && o.GetName() == hubServiceName {
			return unstructured.SetNestedField(o.Object, string(t), "spec", "type")
		}
	}
	return fmt.Errorf("deploy/hub has no Service %s", hubServiceName)
}

// setServingHost adds the host agents dial (of hostPort) to the hub
// container's --serving-hosts, so that the certificate the hub issues
// itself names it and a joining agent's check of the host passes.
func setServingHost(objs []*unstructured.Unstructured, hostPort string) error {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return fmt.Errorf("--hub-address %q: %w", hostPort, err)
	}
	for _, o := range objs {
		if o.GetKind() != "Deployment" || o.GetName() != hubDeploymentName {
			continue
		}
		containers, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if err != nil || len(containers) == 0 {
			return fmt.Errorf("deploy/hub: Deployment %s has no containers (%v)", hubDeploymentName, err)
		}
		c, ok := containers[0].(map[string]any)
		if !ok {
			return fmt.Errorf("deploy/hub: Deployment %s: malformed container", hubDeploymentName)
		}
		args, _, _ := unstructured.NestedStringSlice(c, "args")
		kept := args[:0]
		for _, a := range args {
			if !strings.HasPrefix(a, "--serving-hosts=") {
				kept = append(kept, a)
			}
		}
		kept = append(kept, "--serving-hosts="+host)
		if err := unstructured.SetNestedStringSlice(c, kept, "args"); err != nil {
			return err
		}
		containers[0] = c
		return unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers")
	}
	return nil
}

// hubAvailable says whether the hub Deployment is Available.
func hubAvailable(ctx context.Context, c client.Reader, ns string) error {
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: hubDeploymentName}, d); err != nil {
		return err
	}
	for _, cond := range d.Status.Conditions {
		if cond.Type == appsv1.DeploymentAvailable && cond.Status == corev1.ConditionTrue {
			return nil
		}
	}
	return fmt.Errorf("Deployment %s/%s is not Available (%d of %d replicas ready)", ns, hubDeploymentName, d.Status.ReadyReplicas, d.Status.Replicas)
}

// loadBalancerAddress is host:port of the hub Service's LoadBalancer.
func loadBalancerAddress(ctx context.Context, c client.Reader, ns string) (string, error) {
	svc := &corev1.Service{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: hubServiceName}, svc); err != nil {
		return "", fmt.Errorf("reading Service %s/%s: %w", ns, hubServiceName, err)
	}
	return LoadBalancerAddress(svc)
}

// LoadBalancerAddress is host:port where svc's LoadBalancer serves its
// sync port, or an error saying why there is none.
func LoadBalancerAddress(svc *corev1.Service) (string, error) {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return "", fmt.Errorf("Service %s/%s is of type %s, not LoadBalancer", svc.Namespace, svc.Name, svc.Spec.Type)
	}
	var port int32
	for _, p := range svc.Spec.Ports {
		if p.Name == hubSyncPortName || len(svc.Spec.Ports) == 1 {
			port = p.Port
		}
	}
	if port == 0 {
		return "", fmt.Errorf("Service %s/%s has no port %s", svc.Namespace, svc.Name, hubSyncPortName)
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		host := in.IP
		if host == "" {
			host = in.Hostname
		}
		if host != "" {
			return net.JoinHostPort(host, strconv.Itoa(int(port))), nil
		}
	}
	return "", fmt.Errorf("Service %s/%s has no LoadBalancer address yet", svc.Namespace, svc.Name)
}

// checkHostPort checks host:port.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want HOST:PORT: %w", addr, err)
	}
	if host == "" {
		return fmt.Errorf("%q: no host", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 1 to 65535", addr, port)
	}
	return nil
}

// poll calls check every second until it returns nil, ctx ends or
// timeout passes; the error then names what did not happen and check's
// last error.
func poll(ctx context.Context, timeout time.Duration, what string, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waited %s for %s: %w", timeout, what, errors.Join(err, context.Cause(ctx)))
		case <-tick.C:
		}
	}
}

// pollInterval is how often waits look; tests shorten it.
var pollInterval = time.Second

func newInitCommand(g *Globals) *cobra.Command {
	var (
		opts  InitOptions
		token TokenFlags
	)
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Install the Flotilla hub into the current context and print the join command",
		Long: `init installs the hub into the cluster of the current context (--context,
--kubeconfig): the CRDs, namespace, RBAC, Deployment, Services, webhook
configurations, admission policy and PodDisruptionBudget of deploy/hub, by
server-side apply, and the hub CA (Secret flotilla-hub-ca, created once).
It then creates a bootstrap token and prints the command that joins a
member. Running it again changes nothing and prints a new token.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if opts.Token, err = token.Options(); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			opts.Namespace, opts.Now = g.SystemNamespace, time.Now()
			res, err := Init(cmd.Context(), c, opts)
			if res != nil && res.Applied > 0 {
				fmt.Fprintf(g.IO.Out, "Applied %d objects of deploy/hub; the hub CA is %s.\n", res.Applied, res.CAHash)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(g.IO.Out, "\nJoin a member cluster (token %s, %s) with:\n\n  %s\n\n", res.Token.ID, describeToken(opts.Token), res.JoinCommand)
			return nil
		},
	}
	cmd.Flags().StringVar(&opts.HubAddress, "hub-address", "", "HOST:PORT agents dial (default: the hub Service's LoadBalancer address)")
	cmd.Flags().StringVar(&opts.Image, "image", "", "hub image (default: the one deploy/hub names)")
	cmd.Flags().StringVar((*string)(&opts.ServiceType), "service-type", "", "type of the Service flotilla-hub agents dial: ClusterIP (the base's), NodePort or LoadBalancer")
	cmd.Flags().BoolVar(&opts.Wait, "wait", false, "wait for the hub to be available")
	cmd.Flags().BoolVar(&opts.HubOutsideCluster, "hub-outside-cluster", false, "the hub runs as a process outside the cluster and registers its own webhooks (hub --register-webhook-url): apply the CRDs, namespace and RBAC only; needs --hub-address")
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", 5*time.Minute, "how long --wait waits")
	token.add(cmd)
	return cmd
}

// describeToken says what a token allows, for the line above a join
// command.
func describeToken(o bootstrap.Options) string {
	s := "valid for " + o.TTL.String()
	if o.TTL == 0 {
		s = "valid forever"
	}
	if o.SingleUse {
		s += ", single use"
	}
	if o.AutoAccept {
		s += ", members accepted at once"
	} else {
		s += ", accept each member with `kubectl flotilla accept NAME`"
	}
	return s
}
