package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/bootstrap"
	"github.com/flotilla-dev/flotilla/pkg/pki"
)

// TokenFlags are the flags that describe a token to create (token create,
// and init, which creates one for the join command it prints).
type TokenFlags struct {
	TTL         time.Duration
	SingleUse   bool
	AutoAccept  bool
	Description string
	Labels      string
}

func (f *TokenFlags) add(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&f.TTL, "ttl", 24*time.Hour, "how long the token is valid; 0: forever")
	cmd.Flags().BoolVar(&f.SingleUse, "single-use", false, "only one cluster can join with the token")
	cmd.Flags().BoolVar(&f.AutoAccept, "auto-accept", false, "clusters joining with the token are accepted at once, without `kubectl flotilla accept`")
	cmd.Flags().StringVar(&f.Description, "description", "", "free text shown by `token list`")
	cmd.Flags().StringVar(&f.Labels, "labels", "", "k=v,... put on every MemberCluster joined with the token")
}

// Options checks the flags and returns them as bootstrap.Options.
func (f *TokenFlags) Options() (bootstrap.Options, error) {
	if f.TTL < 0 {
		return bootstrap.Options{}, fmt.Errorf("--ttl %s: must not be negative (0 means forever)", f.TTL)
	}
	labels, err := parseLabelsFlag("--labels", f.Labels)
	if err != nil {
		return bootstrap.Options{}, err
	}
	return bootstrap.Options{TTL: f.TTL, SingleUse: f.SingleUse, AutoAccept: f.AutoAccept, Description: f.Description, Labels: labels}, nil
}

// CreateToken stores a new bootstrap token with opts in the hub's
// namespace and returns it. It is the only time the token's secret is
// seen: the hub keeps only its hash.
func CreateToken(ctx context.Context, c client.Client, namespace string, opts bootstrap.Options, now time.Time) (bootstrap.Token, error) {
	// A clash of random ids is unlikely but possible; try a few.
	for range 5 {
		t, err := bootstrap.NewToken()
		if err != nil {
			return bootstrap.Token{}, err
		}
		err = c.Create(ctx, bootstrap.NewSecret(namespace, t, opts, now))
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return bootstrap.Token{}, fmt.Errorf("creating the token Secret in %s: %w", namespace, err)
		}
		return t, nil
	}
	return bootstrap.Token{}, fmt.Errorf("creating a token in %s: five random token ids were all taken", namespace)
}

// ListTokens reads the token Secrets in namespace, sorted by id. A Secret
// of the token type that does not read as one is an error naming it.
func ListTokens(ctx context.Context, c client.Reader, namespace string) ([]bootstrap.Info, error) {
	var list corev1.SecretList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingFields{"type": flotillav1.BootstrapTokenSecretType}); err != nil {
		return nil, fmt.Errorf("listing the token Secrets in %s: %w", namespace, err)
	}
	out := make([]bootstrap.Info, 0, len(list.Items))
	var errs []error
	for i := range list.Items {
		info, err := bootstrap.ReadSecret(&list.Items[i])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, joinErrors(errs)
}

// DeleteTokens deletes the tokens with the given ids (a whole token
// <id>.<secret> names its id). Every id is tried; the error names those
// that are malformed or were not there.
func DeleteTokens(ctx context.Context, c client.Client, namespace string, ids []string) error {
	var errs []error
	for _, id := range ids {
		if t, err := bootstrap.ParseToken(id); err == nil {
			id = t.ID
		}
		if !bootstrap.ValidID(id) {
			errs = append(errs, fmt.Errorf("token id %q: want 6 characters of [a-z0-9]", id))
			continue
		}
		s := &corev1.Secret{}
		key := client.ObjectKey{Namespace: namespace, Name: bootstrap.SecretName(id)}
		if err := c.Get(ctx, key, s); err != nil {
			if apierrors.IsNotFound(err) {
				err = fmt.Errorf("token %s: no such token in %s", id, namespace)
			} else {
				err = fmt.Errorf("token %s: %w", id, err)
			}
			errs = append(errs, err)
			continue
		}
		if string(s.Type) != flotillav1.BootstrapTokenSecretType {
			errs = append(errs, fmt.Errorf("token %s: Secret %s is of type %q, not a token; left alone", id, key, s.Type))
			continue
		}
		if err := c.Delete(ctx, s, client.Preconditions{UID: &s.UID}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("token %s: deleting: %w", id, err))
		}
	}
	return joinErrors(errs)
}

// TokenView is one token as `token list` shows it: never its secret.
type TokenView struct {
	ID          string            `json:"id"`
	Expires     string            `json:"expires"`
	State       string            `json:"state"`
	Usage       string            `json:"usage"`
	AutoAccept  bool              `json:"autoAccept"`
	UsedBy      []string          `json:"usedBy,omitempty"`
	Description string            `json:"description,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
}

// Token states.
const (
	TokenValid   = "valid"
	TokenExpired = "expired"
	TokenUsed    = "used"
)

// TokenViews is what `token list` shows of infos at now.
func TokenViews(infos []bootstrap.Info, now time.Time) []TokenView {
	out := make([]TokenView, 0, len(infos))
	for _, in := range infos {
		v := TokenView{ID: in.ID, Expires: "never", State: TokenValid, Usage: bootstrap.UsageMulti,
			AutoAccept: in.AutoAccept, UsedBy: in.UsedBy, Description: in.Description, Labels: in.Labels}
		if in.SingleUse {
			v.Usage = bootstrap.UsageSingle
		}
		if in.Expiration != nil {
			v.Expires = in.Expiration.UTC().Format(time.RFC3339)
		}
		switch {
		case in.Expiration != nil && !now.Before(*in.Expiration):
			v.State = TokenExpired
		case in.SingleUse && len(in.UsedBy) > 0:
			v.State = TokenUsed
		}
		out = append(out, v)
	}
	return out
}

// WriteTokens writes the token table.
func WriteTokens(out io.Writer, views []TokenView, wide bool) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	head := "ID\tSTATE\tEXPIRES\tUSAGE\tAUTO-ACCEPT\tUSED-BY\tDESCRIPTION"
	if wide {
		head += "\tLABELS"
	}
	fmt.Fprintln(w, head)
	for _, v := range views {
		used := strings.Join(v.UsedBy, ",")
		if used == "" {
			used = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%t\t%s\t%s", v.ID, v.State, v.Expires, v.Usage, v.AutoAccept, used, v.Description)
		if wide {
			fmt.Fprintf(w, "\t%s", bootstrap.FormatLabels(v.Labels))
		}
		fmt.Fprintln(w)
	}
	return w.Flush()
}

func newTokenCommand(g *Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Create, list and delete the bootstrap tokens members join with"}
	var flags TokenFlags
	var (
		printJoin, helmValues bool
		hubAddress, caSecret  string
	)
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a bootstrap token and print it (the hub keeps only its hash)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := flags.Options()
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if (printJoin || helmValues) && hubAddress == "" {
				return errors.New("--hub-address: required with --print-join-command and --helm-values (the HOST:PORT agents dial)")
			}
			if hubAddress != "" {
				if err := checkHostPort(hubAddress); err != nil {
					return fmt.Errorf("--hub-address: %w", err)
				}
			}
			var caHash string
			if printJoin || helmValues {
				// Read the CA first: a hub without one gets no token.
				if caHash, err = HubCAHash(cmd.Context(), c, g.SystemNamespace, caSecret); err != nil {
					return err
				}
			}
			t, err := CreateToken(cmd.Context(), c, g.SystemNamespace, opts, time.Now())
			if err != nil {
				return err
			}
			switch {
			case helmValues:
				_, err = fmt.Fprint(g.IO.Out, AgentHelmValues(hubAddress, t, caHash))
			case printJoin:
				_, err = fmt.Fprintln(g.IO.Out, JoinCommand(hubAddress, t, caHash))
			default:
				_, err = fmt.Fprintln(g.IO.Out, t.String())
			}
			return err
		},
	}
	flags.add(create)
	create.Flags().BoolVar(&printJoin, "print-join-command", false, "print the whole `kubectl flotilla join` command (needs --hub-address) instead of the token alone")
	create.Flags().BoolVar(&helmValues, "helm-values", false, "print the flotilla-agent chart's values for joining with this token (needs --hub-address; add clusterName per member)")
	create.Flags().StringVar(&hubAddress, "hub-address", "", "the hub's sync endpoint HOST:PORT agents dial, for --print-join-command and --helm-values")
	create.Flags().StringVar(&caSecret, "ca-secret", flotillav1.HubCASecretName, "the Secret in the hub's namespace holding the hub CA (tls.crt; ca.crt with provided or cert-manager certificates)")
	create.MarkFlagsMutuallyExclusive("print-join-command", "helm-values")
	var output string
	list := &cobra.Command{
		Use:   "list",
		Short: "List the bootstrap tokens (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			infos, err := ListTokens(cmd.Context(), c, g.SystemNamespace)
			views := TokenViews(infos, time.Now())
			if output == OutputJSON || output == OutputYAML {
				if werr := writeStructured(g.IO.Out, output, views); werr != nil {
					return werr
				}
			} else if werr := WriteTokens(g.IO.Out, views, output == OutputWide); werr != nil {
				return werr
			}
			return err
		},
	}
	addOutputFlag(list, &output)
	del := &cobra.Command{
		Use:   "delete ID...",
		Short: "Delete bootstrap tokens (members that joined with them stay)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			err = DeleteTokens(cmd.Context(), c, g.SystemNamespace, ids)
			if err == nil {
				fmt.Fprintf(g.IO.Out, "deleted %s\n", strings.Join(ids, ", "))
			}
			return err
		},
	}
	cmd.AddCommand(create, list, del)
	return cmd
}

// parseLabelsFlag reads k=v,... and names flag in its error.
func parseLabelsFlag(flag, s string) (map[string]string, error) {
	labels, err := bootstrap.ParseLabels(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return labels, nil
}

// HubCAHash reads the hub CA from Secret name in namespace and returns the
// pin agents join with: the self-managed CA Secret's tls.crt, else the
// ca.crt of a provided or cert-manager Secret.
func HubCAHash(ctx context.Context, c client.Reader, namespace, name string) (string, error) {
	secret := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return "", fmt.Errorf("--ca-secret: no Secret %s/%s with the hub CA; a self-managed hub creates it on its first start (is the hub running?), a provided one is named with --ca-secret", namespace, name)
		}
		return "", fmt.Errorf("reading the hub CA Secret %s/%s: %w", namespace, name, err)
	}
	for _, key := range []string{corev1.TLSCertKey, "ca.crt"} {
		data, ok := secret.Data[key]
		if !ok {
			continue
		}
		cert, err := pki.ParseCertificatePEM(data)
		if err != nil {
			return "", fmt.Errorf("--ca-secret: %s/%s key %s: %w", namespace, name, key, err)
		}
		if !cert.IsCA {
			continue
		}
		return bootstrap.CAHash(cert), nil
	}
	return "", fmt.Errorf("--ca-secret: %s/%s has no CA certificate in tls.crt or ca.crt", namespace, name)
}

// AgentHelmValues are the flotilla-agent chart's values that make a member
// join the hub at hubAddress with token t, pinning caHash. The member's
// name is the one value left to set per member (clusterName).
func AgentHelmValues(hubAddress string, t bootstrap.Token, caHash string) string {
	return fmt.Sprintf(`# flotilla-agent chart values: join the hub at %[1]s.
# Per member: helm install ... -f THIS --set clusterName=NAME
hubAddress: %[1]q
certificates:
  mode: join
  join:
    token: %[2]q
    caHash: %[3]q
`, hubAddress, t.String(), caHash)
}
