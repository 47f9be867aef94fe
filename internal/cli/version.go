package cli

import (
	"context"
	"fmt"
	"runtime/debug"
	"sort"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// Version is the CLI's version, set at link time
// (-ldflags "-X github.com/flotilla-dev/flotilla/internal/cli.Version=v0.2.0");
// without it, the module version or VCS revision the binary was built from.
var Version = ""

// HubStatusVersionKey is the key of the hub status ConfigMap
// (flotilla-hub-status) where the hub writes its version at start.
const HubStatusVersionKey = "version"

// cliVersion is Version, or what the build info says.
func cliVersion() string {
	if Version != "" {
		return Version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" {
			return "devel+" + s.Value
		}
	}
	return "devel"
}

// Versions are the versions of the CLI, the hub and each agent.
type Versions struct {
	CLI string `json:"cli"`
	// Hub is the hub's version ("" unknown); HubError why it is unknown.
	Hub      string         `json:"hub,omitempty"`
	HubError string         `json:"hubError,omitempty"`
	Agents   []AgentVersion `json:"agents,omitempty"`
}

// AgentVersion is one member's agent version.
type AgentVersion struct {
	Cluster string `json:"cluster"`
	Version string `json:"version,omitempty"`
}

// ReadVersions reads the hub's and the agents' versions from the hub.
// Without a client only the CLI's is known.
func ReadVersions(ctx context.Context, c client.Reader, namespace string) (Versions, error) {
	v := Versions{CLI: cliVersion()}
	if c == nil {
		return v, nil
	}
	cm := &corev1.ConfigMap{}
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: flotillav1.HubStatusConfigMapName}, cm)
	switch {
	case apierrors.IsNotFound(err):
		v.HubError = fmt.Sprintf("no ConfigMap %s/%s: the hub has not started, or is older than its version report", namespace, flotillav1.HubStatusConfigMapName)
	case err != nil:
		v.HubError = err.Error()
	case cm.Data[HubStatusVersionKey] == "":
		v.HubError = fmt.Sprintf("ConfigMap %s/%s has no %s: the hub is older than its version report", namespace, flotillav1.HubStatusConfigMapName, HubStatusVersionKey)
	default:
		v.Hub = cm.Data[HubStatusVersionKey]
	}
	var members flotillav1.MemberClusterList
	if err := c.List(ctx, &members); err != nil {
		return v, fmt.Errorf("listing MemberClusters: %w", err)
	}
	for _, mc := range members.Items {
		a := AgentVersion{Cluster: mc.Name}
		if mc.Status.Agent != nil {
			a.Version = mc.Status.Agent.Version
		}
		v.Agents = append(v.Agents, a)
	}
	sort.Slice(v.Agents, func(i, j int) bool { return v.Agents[i].Cluster < v.Agents[j].Cluster })
	return v, nil
}

func newVersionCommand(g *Globals) *cobra.Command {
	var (
		output string
		client bool
	)
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Show the versions of the CLI, the hub and each member's agent",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			var v Versions
			var err error
			if client {
				v, err = ReadVersions(cmd.Context(), nil, "")
			} else {
				c, cerr := g.client()
				if cerr != nil {
					return cerr
				}
				v, err = ReadVersions(cmd.Context(), c, g.SystemNamespace)
			}
			if err != nil {
				return err
			}
			if output == OutputJSON || output == OutputYAML {
				return writeStructured(g.IO.Out, output, v)
			}
			w := tabwriter.NewWriter(g.IO.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "COMPONENT\tVERSION")
			fmt.Fprintf(w, "cli\t%s\n", v.CLI)
			if !client {
				hub := v.Hub
				if hub == "" {
					hub = "unknown (" + v.HubError + ")"
				}
				fmt.Fprintf(w, "hub\t%s\n", hub)
				for _, a := range v.Agents {
					fmt.Fprintf(w, "agent %s\t%s\n", a.Cluster, dash(a.Version))
				}
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&client, "client", false, "the CLI's version only, without asking the hub")
	addOutputFlag(cmd, &output)
	return cmd
}
