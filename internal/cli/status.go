package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/statusview"
)

// StatusOptions say what status shows.
type StatusOptions struct {
	// Namespace of the MyApps; empty with AllNamespaces.
	Namespace     string
	AllNamespaces bool
	// MyApp, when set, shows that MyApp only.
	MyApp string
}

// Status reads the members and MyApps from the hub into the view
// `make run` shows.
func Status(ctx context.Context, c client.Reader, opts StatusOptions, now time.Time) (statusview.View, error) {
	var members flotillav1.MemberClusterList
	if err := c.List(ctx, &members); err != nil {
		return statusview.View{}, fmt.Errorf("listing MemberClusters: %w", err)
	}
	var apps []flotillav1.MyApp
	switch {
	case opts.MyApp != "":
		app := &flotillav1.MyApp{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: opts.Namespace, Name: opts.MyApp}, app); err != nil {
			if apierrors.IsNotFound(err) {
				return statusview.View{}, fmt.Errorf("MyApp %s/%s not found", opts.Namespace, opts.MyApp)
			}
			return statusview.View{}, fmt.Errorf("MyApp %s/%s: %w", opts.Namespace, opts.MyApp, err)
		}
		apps = []flotillav1.MyApp{*app}
	default:
		var list flotillav1.MyAppList
		var lo []client.ListOption
		if !opts.AllNamespaces {
			lo = append(lo, client.InNamespace(opts.Namespace))
		}
		if err := c.List(ctx, &list, lo...); err != nil {
			return statusview.View{}, fmt.Errorf("listing MyApps: %w", err)
		}
		apps = list.Items
	}
	return statusview.Build(members.Items, apps, now), nil
}

func newStatusCommand(g *Globals) *cobra.Command {
	var (
		output string
		opts   StatusOptions
	)
	cmd := &cobra.Command{
		Use:   "status [MYAPP]",
		Short: "Show the members and, per cluster, the MyApps (or one MyApp)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if len(args) == 1 {
				if opts.AllNamespaces {
					return fmt.Errorf("-A shows every namespace; name a MyApp with -n NAMESPACE instead")
				}
				opts.MyApp = args[0]
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if opts.Namespace, err = g.namespace(); err != nil {
				return err
			}
			v, err := Status(cmd.Context(), c, opts, time.Now())
			if err != nil {
				return err
			}
			if output == OutputJSON || output == OutputYAML {
				return writeStructured(g.IO.Out, output, v)
			}
			return statusview.Write(g.IO.Out, v, output == OutputWide)
		},
	}
	cmd.Flags().BoolVarP(&opts.AllNamespaces, "all-namespaces", "A", false, "MyApps of every namespace")
	addOutputFlag(cmd, &output)
	return cmd
}
