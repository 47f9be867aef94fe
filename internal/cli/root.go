package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// FieldManager is the server-side apply field manager of everything the
// CLI writes.
const FieldManager = "kubectl-flotilla"

// Globals are the flags every command shares.
type Globals struct {
	// Kube are --kubeconfig, --context, -n and the other kubectl flags:
	// the hub, except for join, where they name the member.
	Kube *genericclioptions.ConfigFlags
	// SystemNamespace is the namespace the hub (and the agent) run in.
	SystemNamespace string
	IO              genericiooptions.IOStreams
}

// NewCommand returns the kubectl-flotilla command tree.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	g := &Globals{Kube: genericclioptions.NewConfigFlags(true), IO: streams}
	root := &cobra.Command{
		Use:   "kubectl-flotilla",
		Short: "Install a Flotilla hub, join member clusters and read the fleet",
		Long: `kubectl flotilla installs a Flotilla hub (init), joins member clusters to it
with bootstrap tokens (token, join, accept, deny, unjoin) or, with join
--mode push, with a kubeconfig the hub keeps and no agent, and shows what
the fleet runs and why (status, why, version).`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	g.Kube.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVar(&g.SystemNamespace, "flotilla-namespace", flotillav1.SystemNamespace, "namespace the hub and the agents run in")
	root.AddCommand(
		newInitCommand(g),
		newTokenCommand(g),
		newJoinCommand(g),
		newAcceptanceCommand(g, flotillav1.AcceptanceAccepted),
		newAcceptanceCommand(g, flotillav1.AcceptanceDenied),
		newUnjoinCommand(g),
		newStatusCommand(g),
		newWhyCommand(g),
		newVersionCommand(g),
	)
	return root
}

// Scheme is what the CLI's clients know: Kubernetes' built-in kinds and
// Flotilla's.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := flotillav1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewClient returns a client for cfg with Scheme.
func NewClient(cfg *rest.Config) (client.Client, error) {
	s, err := Scheme()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: s})
}

// client returns a client for the cluster the kube flags name.
func (g *Globals) client() (client.Client, error) {
	cfg, err := g.Kube.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	return NewClient(cfg)
}

// namespace is -n, or the kubeconfig context's namespace, or "default".
func (g *Globals) namespace() (string, error) {
	ns, _, err := g.Kube.ToRawKubeConfigLoader().Namespace()
	return ns, err
}

// restConfigFor loads a kubeconfig other than the global one: kubeconfig
// (empty: the global --kubeconfig or the default loading rules) with
// context (empty: its current context).
func (g *Globals) restConfigFor(kubeconfig, context string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	switch {
	case kubeconfig != "":
		rules.ExplicitPath = kubeconfig
	case g.Kube.KubeConfig != nil && *g.Kube.KubeConfig != "":
		rules.ExplicitPath = *g.Kube.KubeConfig
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context}).ClientConfig()
}

// Output formats of -o.
const (
	OutputTable = ""
	OutputWide  = "wide"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// checkOutput validates -o.
func checkOutput(o string) error {
	switch o {
	case OutputTable, OutputWide, OutputJSON, OutputYAML:
		return nil
	}
	return fmt.Errorf("-o %q: want one of wide, json, yaml", o)
}

// writeStructured writes v as JSON or YAML.
func writeStructured(out io.Writer, format string, v any) error {
	switch format {
	case OutputJSON:
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, string(b))
		return err
	case OutputYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	return fmt.Errorf("-o %q is not a structured format", format)
}

// addOutputFlag adds -o to cmd.
func addOutputFlag(cmd *cobra.Command, o *string) {
	cmd.Flags().StringVarP(o, "output", "o", "", "output format: wide, json or yaml")
}

// joinErrors is errs as one error, one line each; nil without any.
func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	lines := make([]string, len(errs))
	for i, e := range errs {
		lines[i] = e.Error()
	}
	return fmt.Errorf("%d errors:\n  %s", len(errs), strings.Join(lines, "\n  "))
}
