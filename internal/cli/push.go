package cli

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/deploy"
	"github.com/flotilla-dev/flotilla/internal/ssa"
	"github.com/flotilla-dev/flotilla/internal/ssa/ssacr"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
)

// Names of what `join --mode push` creates. In the member, in
// flotilla-system: the ServiceAccount the hub acts as, its bindings to the
// agent's roles and its long-lived token; on the hub, in flotilla-system:
// the Secret holding the member's kubeconfig (PushSecretPrefix + name).
const (
	PushServiceAccountName = "flotilla-push"
	PushBindingName        = "flotilla-push"
	PushTokenSecretName    = "flotilla-push-token"
	PushSecretPrefix       = "flotilla-push-"
	// AgentRoleName names the agent's generated ClusterRole and Role
	// (deploy/agent/rbac), which the push identity is bound to.
	AgentRoleName = "flotilla-agent"
)

// Sync modes as --mode spells them.
const (
	ModePull = "pull"
	ModePush = "push"
)

// PushJoinOptions say how to join a member in push mode: no agent, the
// hub applies the member's Works with a kubeconfig join makes.
type PushJoinOptions struct {
	// ClusterName is the MemberCluster's name.
	ClusterName string
	// Labels, Region, Zone and Provider describe the MemberCluster.
	Labels                 map[string]string
	Region, Zone, Provider string
	// MemberServer is the member's apiserver URL as the hub reaches it
	// (empty: the server of the member's kubeconfig context).
	MemberServer string
	// Namespace is flotilla-system, on both sides.
	Namespace string
	// Overwrite lets join replace a push kubeconfig Secret that differs
	// from the one it makes (a token rotation) or a MemberCluster's
	// reference to another Secret.
	Overwrite bool
	// RotateToken deletes the member's push ServiceAccount and its token
	// Secret first, so the token controller makes a new token (the old
	// one stops working), and replaces the hub's kubeconfig; it
	// implies Overwrite.
	RotateToken bool
	// DryRun prints what join would do and changes nothing.
	DryRun bool
	// Timeout bounds the wait for the member's token controller.
	Timeout time.Duration
	// Out receives what was done.
	Out io.Writer
	// HubContext names the hub in the printed hint (may be empty).
	HubContext string
}

// PushSecretName is the hub Secret join makes for cluster.
func PushSecretName(cluster string) string { return PushSecretPrefix + cluster }

// check validates the options, naming the flag at fault.
func (o *PushJoinOptions) check() error {
	if err := checkClusterName(o.ClusterName); err != nil {
		return fmt.Errorf("--cluster-name: %w", err)
	}
	if err := checkMemberLabels(o.Labels); err != nil {
		return fmt.Errorf("--labels: %w", err)
	}
	for _, f := range []struct{ flag, v string }{{"--region", o.Region}, {"--zone", o.Zone}, {"--provider", o.Provider}} {
		if len(f.v) > 63 {
			return fmt.Errorf("%s: %d characters, more than 63", f.flag, len(f.v))
		}
	}
	if o.MemberServer != "" {
		if err := checkServerURL(o.MemberServer); err != nil {
			return fmt.Errorf("--member-server: %w", err)
		}
	}
	if o.Namespace == "" {
		o.Namespace = flotillav1.SystemNamespace
	}
	if o.Namespace != flotillav1.SystemNamespace {
		return fmt.Errorf("--flotilla-namespace %q: push members use %s on both sides (the hub reads its push Secrets there)", o.Namespace, flotillav1.SystemNamespace)
	}
	if o.RotateToken {
		o.Overwrite = true
	}
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	return nil
}

// checkMemberLabels is the pull join's rule for MemberCluster labels:
// valid Kubernetes labels, none in the flotilla.dev/ domain (the hub's).
func checkMemberLabels(labels map[string]string) error {
	if err := checkLabels(labels); err != nil {
		return err
	}
	for k := range labels {
		prefix, _, found := strings.Cut(k, "/")
		if found && (prefix == "flotilla.dev" || strings.HasSuffix(prefix, ".flotilla.dev")) {
			return fmt.Errorf("key %q is in the flotilla.dev/ domain, which the hub manages", k)
		}
	}
	return nil
}

// checkServerURL accepts an https URL with a host: the hub never talks
// to a member in clear text.
func checkServerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q: %w", s, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q: want https://HOST[:PORT] (the hub does not talk to a member in clear text)", s)
	}
	return nil
}

// PushMemberObjects are what a push join applies in the member, in order:
// the namespace, the ServiceAccount flotilla-push, the agent's ClusterRole
// and Role (from deploy/agent, as pull join installs them), bindings of
// both to flotilla-push, and its service-account-token Secret. claimNS
// labels the namespace LabelJoinCreated (join created it).
func PushMemberObjects(namespace string, claimNS bool) ([]*unstructured.Unstructured, error) {
	agent, err := deploy.Objects(deploy.Agent, "")
	if err != nil {
		return nil, err
	}
	var nsObj, clusterRole, role *unstructured.Unstructured
	for _, o := range agent {
		switch {
		case o.GetKind() == "Namespace" && o.GetName() == namespace:
			nsObj = o
		case o.GetKind() == "ClusterRole" && o.GetName() == AgentRoleName:
			clusterRole = o
		case o.GetKind() == "Role" && o.GetName() == AgentRoleName && o.GetNamespace() == namespace:
			role = o
		}
	}
	if nsObj == nil || clusterRole == nil || role == nil {
		return nil, fmt.Errorf("deploy/agent lacks the namespace %s or the %s ClusterRole or Role", namespace, AgentRoleName)
	}
	if claimNS {
		labels := nsObj.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[LabelJoinCreated] = "true"
		nsObj.SetLabels(labels)
	}
	labels := map[string]string{"app.kubernetes.io/name": PushServiceAccountName, "app.kubernetes.io/part-of": "flotilla"}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: PushServiceAccountName, Namespace: namespace}}
	typed := []runtime.Object{
		&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: metav1.ObjectMeta{Name: PushServiceAccountName, Namespace: namespace, Labels: labels}},
		&rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: PushBindingName, Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: AgentRoleName}, Subjects: subject},
		&rbacv1.RoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: PushBindingName, Namespace: namespace, Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: AgentRoleName}, Subjects: subject},
		&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: PushTokenSecretName, Namespace: namespace, Labels: labels,
				Annotations: map[string]string{corev1.ServiceAccountNameKey: PushServiceAccountName}},
			Type: corev1.SecretTypeServiceAccountToken},
	}
	out := []*unstructured.Unstructured{nsObj, clusterRole, role}
	for _, o := range typed {
		u, err := ssa.Unstructured(o)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

// PushKubeconfig is the kubeconfig the hub reaches the member with: server,
// the CA that signs the member's serving certificate, and the push
// identity's token. It refuses what would be insecure: no https, no CA.
func PushKubeconfig(cluster, server string, ca []byte, token string) ([]byte, error) {
	if err := checkServerURL(server); err != nil {
		return nil, fmt.Errorf("member server: %w", err)
	}
	if len(bytes.TrimSpace(ca)) == 0 {
		return nil, fmt.Errorf("no CA for the member's apiserver (neither the token Secret's %s nor the context's certificate-authority data): refusing an insecure kubeconfig", corev1.ServiceAccountRootCAKey)
	}
	if err := checkPEMCerts(ca); err != nil {
		return nil, fmt.Errorf("the member's CA: %w", err)
	}
	if token == "" {
		return nil, errors.New("no token for " + PushServiceAccountName)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	kc.AuthInfos[PushServiceAccountName] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: PushServiceAccountName}
	kc.CurrentContext = cluster
	return clientcmd.Write(*kc)
}

// checkPEMCerts says whether b holds at least one PEM certificate.
func checkPEMCerts(b []byte) error {
	n := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return errors.New("no PEM certificate in it")
	}
	return nil
}

// PushHubAction is what a push join does to the MemberCluster.
type PushHubAction string

const (
	PushCreate     PushHubAction = "create"
	PushSwitch     PushHubAction = "switch" // an existing Pull member becomes Push
	PushUpdate     PushHubAction = "update" // already Push: brought to the flags
	PushUnreadable PushHubAction = "unknown"
)

// PushPlan is what a push join does on both sides, computed before it
// writes anything.
type PushPlan struct {
	Cluster, Namespace, Server string
	// ClaimNamespace: join creates the member's namespace (or created it
	// earlier).
	ClaimNamespace bool
	Action         PushHubAction
	// SecretExists: the hub's push Secret exists (its kubeconfig is
	// replaced only when it changed, and then only with Overwrite).
	SecretExists bool
	Labels       map[string]string
	Region, Zone string
	Provider     string
	// RotateToken: the member's push ServiceAccount and token Secret are
	// deleted first.
	RotateToken bool
	// Overwrite: a differing kubeconfig on the hub is replaced.
	Overwrite bool
}

// PlanPushJoin decides what a push join of opts does, given the member's
// namespace (nil: missing), the MemberCluster on the hub (nil: none) and
// the push Secret there (nil: none). It refuses a MemberCluster being
// deleted, and one whose push reference names another Secret unless
// Overwrite.
func PlanPushJoin(opts PushJoinOptions, server string, ns *corev1.Namespace, mc *flotillav1.MemberCluster, secret *corev1.Secret) (PushPlan, error) {
	p := PushPlan{
		Cluster: opts.ClusterName, Namespace: opts.Namespace, Server: server,
		ClaimNamespace: claimNamespace(ns), SecretExists: secret != nil,
		Labels: opts.Labels, Region: opts.Region, Zone: opts.Zone, Provider: opts.Provider,
		RotateToken: opts.RotateToken, Overwrite: opts.Overwrite || opts.RotateToken,
	}
	switch {
	case mc == nil:
		p.Action = PushCreate
	case mc.DeletionTimestamp != nil:
		return p, fmt.Errorf("MemberCluster %s is being deleted (drained by the hub); wait until it is gone, then join again", mc.Name)
	case !mc.IsPush():
		p.Action = PushSwitch
	default:
		p.Action = PushUpdate
		if ref := mc.Spec.Push; ref != nil && !opts.Overwrite {
			want := PushSecretName(opts.ClusterName)
			key := ref.KubeconfigSecretRef.Key
			if key == "" {
				key = flotillav1.DefaultKubeconfigKey
			}
			if ref.KubeconfigSecretRef.Name != want || key != flotillav1.DefaultKubeconfigKey {
				return p, fmt.Errorf("MemberCluster %s is Push with the kubeconfig in Secret %s/%s key %s, not %s key %s: refusing to replace it without --overwrite",
					mc.Name, opts.Namespace, ref.KubeconfigSecretRef.Name, key, want, flotillav1.DefaultKubeconfigKey)
			}
		}
	}
	return p, nil
}

// Lines says what the plan does, one step a line; done says it in the
// past tense (after a join), otherwise as what a dry run would do.
func (p PushPlan) Lines(done bool) []string {
	verb := func(past, future string) string {
		if done {
			return past
		}
		return future
	}
	var l []string
	if p.ClaimNamespace {
		l = append(l, fmt.Sprintf("member: %s namespace %s (labelled %s, so unjoin removes it)", verb("applied", "apply"), p.Namespace, LabelJoinCreated))
	} else {
		l = append(l, fmt.Sprintf("member: namespace %s exists; left as it is", p.Namespace))
	}
	if p.RotateToken && !done {
		l = append(l, fmt.Sprintf("member: delete ServiceAccount %s/%s and Secret %s/%s (the old token stops working), so that a new token is made", p.Namespace, PushServiceAccountName, p.Namespace, PushTokenSecretName))
	}
	l = append(l,
		fmt.Sprintf("member: %s ServiceAccount %s/%s", verb("applied", "apply"), p.Namespace, PushServiceAccountName),
		fmt.Sprintf("member: %s the agent's RBAC: ClusterRole %s, Role %s/%s", verb("applied", "apply"), AgentRoleName, p.Namespace, AgentRoleName),
		fmt.Sprintf("member: %s ClusterRoleBinding %s and RoleBinding %s/%s to ServiceAccount %s", verb("applied", "apply"), PushBindingName, p.Namespace, PushBindingName, PushServiceAccountName),
		fmt.Sprintf("member: %s Secret %s/%s (a long-lived token of %s, filled by the token controller)", verb("applied", "apply"), p.Namespace, PushTokenSecretName, PushServiceAccountName),
		fmt.Sprintf("kubeconfig: server %s, the token Secret's CA, user %s", p.Server, PushServiceAccountName),
		fmt.Sprintf("preflight: %s answers /readyz; %s may create Deployments in every namespace", verb("checked that "+p.Server, "check that "+p.Server), PushServiceAccountName),
	)
	secret := fmt.Sprintf("%s/%s", p.Namespace, PushSecretName(p.Cluster))
	switch {
	case !p.SecretExists:
		l = append(l, fmt.Sprintf("hub: %s Secret %s, key %s", verb("created", "create"), secret, flotillav1.DefaultKubeconfigKey))
	case done:
		l = append(l, fmt.Sprintf("hub: Secret %s, key %s, holds the kubeconfig", secret, flotillav1.DefaultKubeconfigKey))
	case p.Overwrite:
		l = append(l, fmt.Sprintf("hub: Secret %s exists: replace its kubeconfig", secret))
	default:
		l = append(l, fmt.Sprintf("hub: Secret %s exists: replace its kubeconfig if it differs (only with --overwrite)", secret))
	}
	desc := []string{"syncMode Push", fmt.Sprintf("push.kubeconfigSecretRef %s key %s", PushSecretName(p.Cluster), flotillav1.DefaultKubeconfigKey)}
	for _, f := range []struct{ k, v string }{{"region", p.Region}, {"zone", p.Zone}, {"provider", p.Provider}} {
		if f.v != "" {
			desc = append(desc, f.k+" "+f.v)
		}
	}
	if len(p.Labels) > 0 {
		desc = append(desc, "labels "+bootstrap.FormatLabels(p.Labels))
	}
	switch p.Action {
	case PushCreate:
		l = append(l, fmt.Sprintf("hub: %s MemberCluster %s: %s", verb("created", "create"), p.Cluster, strings.Join(desc, ", ")))
	case PushSwitch:
		l = append(l, fmt.Sprintf("hub: %s MemberCluster %s from Pull to Push: %s; everything else kept", verb("switched", "switch"), p.Cluster, strings.Join(desc, ", ")))
	case PushUpdate:
		l = append(l, fmt.Sprintf("hub: %s MemberCluster %s: %s", verb("applied", "apply"), p.Cluster, strings.Join(desc, ", ")))
	default:
		l = append(l, fmt.Sprintf("hub: %s MemberCluster %s: %s (the hub could not be read)", verb("applied", "apply"), p.Cluster, strings.Join(desc, ", ")))
	}
	if p.Action == PushSwitch && !done {
		l = append(l, fmt.Sprintf("then: the hub refuses %s's agent from now on; remove it from the member (deployment/flotilla-agent in %s)", p.Cluster, p.Namespace))
	}
	return l
}

// PushJoin joins the member that member (with memberCfg, its rest config)
// talks to in push mode: it installs the push identity in the member,
// waits for its token, builds and checks the kubeconfig, then writes the
// Secret and the MemberCluster on the hub. Run twice it changes nothing.
// With DryRun it only reads and prints the plan.
func PushJoin(ctx context.Context, member client.Client, memberCfg *rest.Config, hub client.Client, opts PushJoinOptions) error {
	if err := opts.check(); err != nil {
		return err
	}
	server := opts.MemberServer
	if server == "" {
		server = memberCfg.Host
	}
	if err := checkServerURL(server); err != nil {
		return fmt.Errorf("the member context's server: %w (or give --member-server)", err)
	}
	mc, secret, err := readPushHub(ctx, hub, opts)
	if err != nil {
		return err
	}
	ns, err := getNamespace(ctx, member, opts.Namespace)
	if err != nil {
		return err
	}
	plan, err := PlanPushJoin(opts, server, ns, mc, secret)
	if err != nil {
		return err
	}
	if opts.DryRun {
		WritePushDryRun(opts.Out, plan)
		return nil
	}

	// The member: the push identity and its token.
	if opts.RotateToken {
		// A legacy token names its Secret and its ServiceAccount's UID
		// and nothing else, so only a new ServiceAccount makes a new one.
		for _, o := range []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: PushTokenSecretName}},
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: opts.Namespace, Name: PushServiceAccountName}},
		} {
			if err := member.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("in the member: deleting %s %s to rotate the token: %w", kindOf(o), objectName(o), err)
			}
		}
		fmt.Fprintf(opts.Out, "member: deleted ServiceAccount %s/%s and its token Secret: the old token stops working (the member's apiserver may accept it for up to 10 s from its cache)\n", opts.Namespace, PushServiceAccountName)
	}
	objs, err := PushMemberObjects(opts.Namespace, plan.ClaimNamespace)
	if err != nil {
		return err
	}
	if err := applyObjects(ctx, member, objs); err != nil {
		return fmt.Errorf("in the member: %w", err)
	}
	tok, err := waitPushToken(ctx, member, objs[len(objs)-1], opts) // the token Secret comes last
	if err != nil {
		return err
	}
	ca := tok.Data[corev1.ServiceAccountRootCAKey]
	if len(ca) == 0 {
		if err := rest.LoadTLSFiles(memberCfg); err != nil {
			return fmt.Errorf("reading the member context's CA: %w", err)
		}
		ca = memberCfg.CAData
	}
	kubeconfig, err := PushKubeconfig(opts.ClusterName, server, ca, string(tok.Data[corev1.ServiceAccountTokenKey]))
	if err != nil {
		return err
	}
	if err := PushPreflight(ctx, kubeconfig, opts.Namespace); err != nil {
		return err
	}

	// The hub: the kubeconfig Secret, then the MemberCluster.
	if secret != nil && !bytes.Equal(secret.Data[flotillav1.DefaultKubeconfigKey], kubeconfig) && !opts.Overwrite {
		return fmt.Errorf("Secret %s/%s on the hub holds another kubeconfig (another token or server): refusing to overwrite it without --overwrite", opts.Namespace, PushSecretName(opts.ClusterName))
	}
	if err := writePushHub(ctx, hub, opts, kubeconfig); err != nil {
		return err
	}
	for _, l := range plan.Lines(true) {
		fmt.Fprintln(opts.Out, l)
	}
	if plan.Action == PushSwitch {
		fmt.Fprintf(opts.Out, "%s was Pull: the hub refuses its agent's streams from now on (the agent stands down) and applies its Works itself. Remove the agent from the member, it is no longer needed (keep Secret %s to switch back to Pull later):\n  kubectl -n %s delete deployment/flotilla-agent poddisruptionbudget/flotilla-agent\n",
			opts.ClusterName, flotillav1.AgentCredentialsSecretName, opts.Namespace)
	}
	hint := "kubectl flotilla status -o wide"
	if opts.HubContext != "" {
		hint = "kubectl flotilla status -o wide --context " + opts.HubContext
	}
	fmt.Fprintf(opts.Out, "The hub applies %s's Works itself and marks it Ready while %s answers. Watch it with:\n  %s\n", opts.ClusterName, server, hint)
	return nil
}

// WritePushDryRun prints what a push join with plan would do.
func WritePushDryRun(out io.Writer, plan PushPlan) {
	fmt.Fprintf(out, "Dry run: nothing is changed. A push join of %s would:\n", plan.Cluster)
	for _, l := range plan.Lines(false) {
		fmt.Fprintln(out, "  "+l)
	}
}

func getNamespace(ctx context.Context, c client.Client, name string) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{}
	err := c.Get(ctx, client.ObjectKey{Name: name}, ns)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading namespace %s in the member: %w", name, err)
	}
	return ns, nil
}

// readPushHub reads the MemberCluster and the push Secret (nil when
// missing), and checks that the hub's namespace is there.
func readPushHub(ctx context.Context, hub client.Client, opts PushJoinOptions) (*flotillav1.MemberCluster, *corev1.Secret, error) {
	if err := hub.Get(ctx, client.ObjectKey{Name: opts.Namespace}, &corev1.Namespace{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("the hub has no namespace %s: run `kubectl flotilla init` on the hub first", opts.Namespace)
		}
		return nil, nil, fmt.Errorf("reading namespace %s on the hub: %w", opts.Namespace, err)
	}
	mc := &flotillav1.MemberCluster{}
	if err := hub.Get(ctx, client.ObjectKey{Name: opts.ClusterName}, mc); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("reading MemberCluster %s on the hub: %w", opts.ClusterName, err)
		}
		mc = nil
	}
	secret := &corev1.Secret{}
	if err := hub.Get(ctx, client.ObjectKey{Namespace: opts.Namespace, Name: PushSecretName(opts.ClusterName)}, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("reading Secret %s/%s on the hub: %w", opts.Namespace, PushSecretName(opts.ClusterName), err)
		}
		secret = nil
	}
	return mc, secret, nil
}

// waitPushToken waits (bounded) until the member's token controller has
// filled the token Secret for the current ServiceAccount (its UID in the
// Secret's annotation: a token of a deleted ServiceAccount of the same
// name no longer works). A Secret the token controller deleted meanwhile
// (it deletes the tokens of a deleted ServiceAccount, and may see a
// rotation's new Secret as one of them) is applied again.
func waitPushToken(ctx context.Context, member client.Client, tokenSecret *unstructured.Unstructured, opts PushJoinOptions) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	key := client.ObjectKey{Namespace: opts.Namespace, Name: PushTokenSecretName}
	err := poll(ctx, opts.Timeout, "the member's token controller to fill Secret "+key.String(), func() error {
		sa := &corev1.ServiceAccount{}
		if err := member.Get(ctx, client.ObjectKey{Namespace: opts.Namespace, Name: PushServiceAccountName}, sa); err != nil {
			return fmt.Errorf("reading ServiceAccount %s/%s: %w", opts.Namespace, PushServiceAccountName, err)
		}
		err := member.Get(ctx, key, s)
		if apierrors.IsNotFound(err) {
			if err := applyObjects(ctx, member, []*unstructured.Unstructured{tokenSecret}); err != nil {
				return err
			}
			return fmt.Errorf("Secret %s was deleted; applied it again", key)
		}
		if err != nil {
			return err
		}
		if len(s.Data[corev1.ServiceAccountTokenKey]) == 0 || s.Annotations[corev1.ServiceAccountUIDKey] != string(sa.UID) {
			return fmt.Errorf("Secret %s has no %s for ServiceAccount %s (uid %s) yet (is kube-controller-manager running with --service-account-private-key-file?)", key, corev1.ServiceAccountTokenKey, sa.Name, sa.UID)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("in the member: %w", err)
	}
	return s, nil
}

// PushRights are what the push identity must be allowed in the member for
// the hub to apply Works; the preflight asks the member about each.
var PushRights = []authorizationv1.ResourceAttributes{
	{Group: "apps", Resource: "deployments", Verb: "create"},
	{Group: "apps", Resource: "deployments", Verb: "patch"},
	{Group: "apps", Resource: "deployments", Verb: "delete"},
	{Resource: "services", Verb: "create"},
	{Resource: "services", Verb: "delete"},
	{Resource: "configmaps", Verb: "create"},
	{Resource: "configmaps", Verb: "delete"},
	{Resource: "secrets", Verb: "create"},
	{Resource: "secrets", Verb: "delete"},
	{Resource: "serviceaccounts", Verb: "create"},
	{Resource: "serviceaccounts", Verb: "delete"},
	{Group: "discovery.k8s.io", Resource: "endpointslices", Verb: "list"},
	{Resource: "namespaces", Verb: "create"},
	{Resource: "configmaps", Verb: "create", Namespace: flotillav1.SystemNamespace},
}

// describeRight names a right for a person.
func describeRight(r authorizationv1.ResourceAttributes) string {
	res := r.Resource
	if r.Group != "" {
		res += "." + r.Group
	}
	where := "in every namespace"
	if r.Namespace != "" {
		where = "in namespace " + r.Namespace
	}
	return fmt.Sprintf("%s %s %s", r.Verb, res, where)
}

// PushPreflight checks, with kubeconfig, that the member answers /readyz
// and that its identity holds PushRights, naming what is missing.
func PushPreflight(ctx context.Context, kubeconfig []byte, namespace string) error {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return fmt.Errorf("the push kubeconfig: %w", err)
	}
	cfg.Timeout = 15 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return fmt.Errorf("preflight: the member at %s does not answer /readyz with the push kubeconfig: %w", cfg.Host, err)
	}
	var missing []string
	for _, r := range PushRights {
		if r.Namespace == flotillav1.SystemNamespace {
			r.Namespace = namespace
		}
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &r}}
		got, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("preflight: asking the member whether %s may %s: %w", PushServiceAccountName, describeRight(r), err)
		}
		if !got.Status.Allowed {
			missing = append(missing, describeRight(r))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("preflight: ServiceAccount %s/%s in the member may not %s (it needs the agent's RBAC: ClusterRole and Role %s)",
			namespace, PushServiceAccountName, strings.Join(missing, ", "), AgentRoleName)
	}
	return nil
}

// writePushHub applies the push Secret and the MemberCluster on the hub.
// An existing MemberCluster keeps everything join does not set.
func writePushHub(ctx context.Context, hub client.Client, opts PushJoinOptions, kubeconfig []byte) error {
	secret := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: PushSecretName(opts.ClusterName), Namespace: opts.Namespace,
			Labels: map[string]string{flotillav1.LabelCluster: opts.ClusterName, "app.kubernetes.io/part-of": "flotilla"}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{flotillav1.DefaultKubeconfigKey: kubeconfig},
	}
	ac, err := ssacr.ApplyConfiguration(secret)
	if err != nil {
		return err
	}
	if err := hub.Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing Secret %s/%s on the hub: %w", secret.Namespace, secret.Name, err)
	}
	mc := &flotillav1.MemberCluster{
		TypeMeta:   metav1.TypeMeta{APIVersion: flotillav1.GroupVersion.String(), Kind: "MemberCluster"},
		ObjectMeta: metav1.ObjectMeta{Name: opts.ClusterName, Labels: opts.Labels},
		Spec: flotillav1.MemberClusterSpec{
			Region: opts.Region, Zone: opts.Zone, Provider: opts.Provider,
			SyncMode: flotillav1.SyncModePush,
			Push: &flotillav1.PushSpec{KubeconfigSecretRef: flotillav1.SecretKeyRef{
				Name: secret.Name, Key: flotillav1.DefaultKubeconfigKey}},
		},
	}
	if ac, err = ssacr.ApplyConfiguration(mc); err != nil {
		return err
	}
	if err := hub.Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing MemberCluster %s on the hub: %w", opts.ClusterName, err)
	}
	return nil
}

// RemovePushIdentity deletes from the member what a push join created
// besides the agent's roles and the namespace (RemoveAgent removes those):
// the ServiceAccount flotilla-push, its two bindings and its token Secret.
// It returns how many objects it deleted.
func RemovePushIdentity(ctx context.Context, member client.Client, namespace string) (int, error) {
	n := 0
	var errs []error
	for _, o := range []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: PushBindingName}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: PushBindingName}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: PushTokenSecretName}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: PushServiceAccountName}},
	} {
		err := member.Delete(ctx, o)
		switch {
		case err == nil:
			n++
		case apierrors.IsNotFound(err):
		default:
			errs = append(errs, fmt.Errorf("deleting %s %s in the member: %w", kindOf(o), objectName(o), err))
		}
	}
	return n, joinErrors(errs)
}
