package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// SetAcceptance sets spec.acceptance of each named MemberCluster with a
// merge patch. Every name is tried; the error names each member that
// could not be set.
func SetAcceptance(ctx context.Context, c client.Client, a flotillav1.Acceptance, names []string) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"acceptance": a}})
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		mc := &flotillav1.MemberCluster{}
		mc.Name = name
		err := c.Patch(ctx, mc, client.RawPatch(types.MergePatchType, patch))
		switch {
		case apierrors.IsNotFound(err):
			errs = append(errs, fmt.Errorf("member %s: no such MemberCluster on the hub", name))
		case err != nil:
			errs = append(errs, fmt.Errorf("member %s: setting spec.acceptance to %s: %w", name, a, err))
		}
	}
	return joinErrors(errs)
}

func newAcceptanceCommand(g *Globals, a flotillav1.Acceptance) *cobra.Command {
	verb, short := "accept", "Let joining members into the fleet (spec.acceptance Accepted)"
	if a == flotillav1.AcceptanceDenied {
		verb, short = "deny", "Keep members out of the fleet, or revoke them (spec.acceptance Denied)"
	}
	return &cobra.Command{
		Use:   verb + " NAME...",
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, names []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			err = SetAcceptance(cmd.Context(), c, a, names)
			if err == nil {
				fmt.Fprintf(g.IO.Out, "%s: %s\n", strings.ToLower(string(a)), strings.Join(names, ", "))
			}
			return err
		},
	}
}
