package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/deploy"
)

// AgentLeaseName is the agent's leader election Lease (agent
// --leader-election-id's default).
const AgentLeaseName = "flotilla-agent.flotilla.dev"

// UnjoinOptions say how to take a member out.
type UnjoinOptions struct {
	// Name of the MemberCluster.
	Name string
	// Namespace is the hub's and the agent's namespace.
	Namespace string
	// Timeout bounds the wait for the hub to drain the member.
	Timeout time.Duration
	// Member, when set, is the member cluster: what join installed there
	// is deleted once the hub let the member go.
	Member client.Client
	Out    io.Writer
}

// Unjoin deletes the MemberCluster on the hub and waits until it is
// gone (the hub drains it first: its replicas move to other members, and
// its agent handles the member's copies as spec.deletionPolicy says),
// deletes the member's certificate requests, then, with Member set,
// removes the agent from the member.
func Unjoin(ctx context.Context, hub client.Client, opts UnjoinOptions) error {
	if err := checkClusterName(opts.Name); err != nil {
		return fmt.Errorf("member name: %w", err)
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	mc := &flotillav1.MemberCluster{}
	// push: the member is (or, gone already, may have been) a push member,
	// whose identity in the member and kubeconfig Secret on the hub go too.
	push := false
	err := hub.Get(ctx, client.ObjectKey{Name: opts.Name}, mc)
	switch {
	case apierrors.IsNotFound(err):
		fmt.Fprintf(opts.Out, "MemberCluster %s is not on the hub.\n", opts.Name)
		push = true
	case err != nil:
		return fmt.Errorf("member %s: reading its MemberCluster: %w", opts.Name, err)
	default:
		push = mc.IsPush()
		policy := mc.Spec.DeletionPolicy
		if policy == "" {
			policy = flotillav1.DefaultMemberClusterDeletionPolicy
		}
		if err := hub.Delete(ctx, mc); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("member %s: deleting its MemberCluster: %w", opts.Name, err)
		}
		fmt.Fprintf(opts.Out, "Deleted MemberCluster %s; the hub drains it (deletionPolicy %s).\n", opts.Name, policy)
		err := poll(ctx, opts.Timeout, "the hub to drain and remove MemberCluster "+opts.Name, func() error {
			cur := &flotillav1.MemberCluster{}
			err := hub.Get(ctx, client.ObjectKey{Name: opts.Name}, cur)
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			if c := meta.FindStatusCondition(cur.Status.Conditions, flotillav1.ConditionDraining); c != nil && c.Status == metav1.ConditionTrue {
				return errors.New(c.Message)
			}
			return fmt.Errorf("MemberCluster %s still exists (finalizers %v)", opts.Name, cur.Finalizers)
		})
		if err != nil {
			return fmt.Errorf("member %s: %w; the member is left as it is", opts.Name, err)
		}
	}
	if err := deleteCSRs(ctx, hub, opts.Name); err != nil {
		return err
	}
	if err := deleteWorkNamespace(ctx, hub, opts.Name, opts.Out); err != nil {
		return err
	}
	if push {
		if err := deletePushSecret(ctx, hub, opts.Namespace, opts.Name, mc, opts.Out); err != nil {
			return err
		}
	}
	if opts.Member == nil {
		if push && mc.Name != "" {
			fmt.Fprintf(opts.Out, "The hub holds nothing of %s. Its push identity (ServiceAccount %s) is still in the member: run unjoin again with --member-context to remove it.\n", opts.Name, PushServiceAccountName)
			return nil
		}
		fmt.Fprintf(opts.Out, "The hub holds nothing of %s. Its agent still runs in the member: run unjoin again with --member-context to remove it.\n", opts.Name)
		return nil
	}
	var errs []error
	if push {
		removed, err := RemovePushIdentity(ctx, opts.Member, opts.Namespace)
		if removed > 0 {
			fmt.Fprintf(opts.Out, "Removed the push identity from the member: %d objects (ServiceAccount %s, its bindings and token).\n", removed, PushServiceAccountName)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	removed, err := RemoveAgent(ctx, opts.Member, opts.Namespace)
	fmt.Fprintf(opts.Out, "Removed %d objects of the agent from the member.\n", removed)
	if err != nil {
		errs = append(errs, err)
	}
	return joinErrors(errs)
}

// deletePushSecret deletes the hub Secret that held a push member's
// kubeconfig, but only the one a push join creates (flotilla-push-NAME):
// a Secret an admin named otherwise is theirs and stays. mc is the
// MemberCluster as it was before the deletion (empty when it was gone).
func deletePushSecret(ctx context.Context, hub client.Client, namespace, cluster string, mc *flotillav1.MemberCluster, out io.Writer) error {
	name := PushSecretName(cluster)
	if mc.Spec.Push != nil && mc.Spec.Push.KubeconfigSecretRef.Name != name {
		fmt.Fprintf(out, "Secret %s/%s, which held %s's kubeconfig, was not made by join; left as it is.\n", namespace, mc.Spec.Push.KubeconfigSecretRef.Name, cluster)
		return nil
	}
	err := hub.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}})
	switch {
	case err == nil:
		fmt.Fprintf(out, "Deleted Secret %s/%s (its kubeconfig) on the hub.\n", namespace, name)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("member %s: deleting Secret %s/%s on the hub: %w", cluster, namespace, name, err)
	}
	return nil
}

// deleteWorkNamespace deletes the hub namespace that held cluster's Works
// (flotilla-cluster-<name>, made by the hub at its first Work), once the
// drain left it without Works; one still holding Works is left, named.
func deleteWorkNamespace(ctx context.Context, hub client.Client, cluster string, out io.Writer) error {
	ns := flotillav1.ClusterNamespacePrefix + cluster
	var works flotillav1.WorkList
	if err := hub.List(ctx, &works, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("member %s: listing the Works in %s: %w", cluster, ns, err)
	}
	if n := len(works.Items); n > 0 {
		fmt.Fprintf(out, "Namespace %s still holds %d Works; left as it is.\n", ns, n)
		return nil
	}
	err := hub.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("member %s: deleting namespace %s: %w", cluster, ns, err)
	}
	return nil
}

// deleteCSRs deletes the certificate requests the hub made for cluster.
func deleteCSRs(ctx context.Context, hub client.Client, cluster string) error {
	var list certificatesv1.CertificateSigningRequestList
	if err := hub.List(ctx, &list, client.MatchingLabels{flotillav1.LabelCluster: cluster}); err != nil {
		return fmt.Errorf("member %s: listing its CertificateSigningRequests: %w", cluster, err)
	}
	var errs []error
	for i := range list.Items {
		csr := &list.Items[i]
		if csr.Spec.SignerName != flotillav1.AgentSignerName {
			continue
		}
		if err := hub.Delete(ctx, csr); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("member %s: deleting CertificateSigningRequest %s: %w", cluster, csr.Name, err))
		}
	}
	return joinErrors(errs)
}

// RemoveAgent deletes from the member what join installed: the objects of
// deploy/agent, the bootstrap and credentials Secrets, the agent's
// identity ConfigMap and Lease, and the namespace only when join created
// it (LabelJoinCreated). Workloads the agent applied are not touched. It
// returns how many objects it deleted.
func RemoveAgent(ctx context.Context, member client.Client, namespace string) (int, error) {
	objs, err := deploy.Objects(deploy.Agent, "")
	if err != nil {
		return 0, err
	}
	var nsObj *unstructured.Unstructured
	var targets []client.Object
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			nsObj = o
			continue
		}
		targets = append(targets, o)
	}
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: flotillav1.AgentBootstrapSecretName}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: flotillav1.AgentCredentialsSecretName}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: flotillav1.AgentIdentityConfigMapName}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: AgentLeaseName}},
	} {
		targets = append(targets, o)
	}
	n := 0
	var errs []error
	for _, o := range targets {
		err := member.Delete(ctx, o)
		switch {
		case err == nil:
			n++
		case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		default:
			errs = append(errs, fmt.Errorf("deleting %s %s in the member: %w", kindOf(o), objectName(o), err))
		}
	}
	if nsObj != nil {
		ns := &corev1.Namespace{}
		err := member.Get(ctx, client.ObjectKey{Name: nsObj.GetName()}, ns)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			errs = append(errs, fmt.Errorf("reading namespace %s in the member: %w", nsObj.GetName(), err))
		case ns.Labels[LabelJoinCreated] == "true":
			if err := member.Delete(ctx, ns); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("deleting namespace %s in the member: %w", ns.Name, err))
			} else {
				n++
			}
		}
	}
	return n, joinErrors(errs)
}

func kindOf(o client.Object) string {
	if k := o.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	return fmt.Sprintf("%T", o)
}

func newUnjoinCommand(g *Globals) *cobra.Command {
	var (
		opts                   UnjoinOptions
		memberKubeconfig, mctx string
	)
	cmd := &cobra.Command{
		Use:   "unjoin NAME",
		Short: "Drain a member and remove it from the hub (and its agent from the member)",
		Long: `unjoin deletes the MemberCluster on the hub (the current context) and waits
until the hub drained it: its replicas move to other members and its agent
handles the member's copies as spec.deletionPolicy says (Orphan by default:
they keep running). It then deletes the member's certificate requests and,
with --member-context or --member-kubeconfig, removes the agent, its RBAC,
Secrets, identity ConfigMap and Lease from the member, and the
flotilla-system namespace if join created it. For a push member it also
deletes the hub Secret flotilla-push-NAME that held its kubeconfig (one
named otherwise was not made by join and stays) and, with the member's
context, the ServiceAccount flotilla-push, its bindings and its token.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			hub, err := g.client()
			if err != nil {
				return err
			}
			if memberKubeconfig != "" || mctx != "" {
				cfg, err := g.restConfigFor(memberKubeconfig, mctx)
				if err != nil {
					return fmt.Errorf("--member-kubeconfig / --member-context: %w", err)
				}
				if opts.Member, err = NewClient(cfg); err != nil {
					return err
				}
			}
			opts.Name, opts.Namespace, opts.Out = args[0], g.SystemNamespace, g.IO.Out
			return Unjoin(cmd.Context(), hub, opts)
		},
	}
	cmd.Flags().StringVar(&memberKubeconfig, "member-kubeconfig", "", "kubeconfig of the member, to remove the agent")
	cmd.Flags().StringVar(&mctx, "member-context", "", "context of the member, to remove the agent")
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", 5*time.Minute, "how long to wait for the hub to drain the member")
	return cmd
}
