package fleet

import (
	"context"
	"fmt"
	"io"

	"github.com/flotilla-dev/flotilla/test/testbed"
	"github.com/flotilla-dev/flotilla/test/testbed/supervisor"
)

// Demo is the whole of Flotilla under the testbed's supervisor: what
// `testbed run --flotilla` (and so `make run`) runs. Its Start goes in
// supervisor.Options.Start.
type Demo struct {
	// Apply lists MyApp manifests to apply to the hub once Flotilla runs.
	Apply []string
	// Watch shows a live table of members and MyApps until Ctrl-C.
	Watch bool
	// PushMembers run in Push mode (Config.PushMembers); none by default.
	PushMembers []string
}

var _ supervisor.StartFunc = Demo{}.Start

// Start starts a fleet with the hub's admission webhook on the
// supervisor's clusters (its CRDs come from opts.CRDDir). Once the
// supervisor serves, the system applies d.Apply to the hub and, with
// d.Watch, shows the table until ctx ends.
func (d Demo) Start(ctx context.Context, opts supervisor.Options, out io.Writer) (*supervisor.System, error) {
	fl, err := Start(ctx, Config{
		Dir: opts.Dir, BinDir: opts.BinDir, CRDDir: opts.CRDDir,
		Members: testbed.DefaultMembers(opts.Members), Webhook: true, Progress: out,
		PushMembers: d.PushMembers,
	})
	if err != nil {
		return nil, err
	}
	return &supervisor.System{
		Testbed: fl.Testbed,
		Serve: func(ctx context.Context) error {
			for _, path := range d.Apply {
				if err := applyManifests(ctx, fl.Hub, path); err != nil {
					return err
				}
				fmt.Fprintf(out, "applied %s to the hub\n", path)
			}
			if d.Watch {
				watchTable(ctx, fl.Hub, out, fl.Testbed.Hub.Kubeconfig, opts.Dir)
				return nil
			}
			<-ctx.Done()
			return nil
		},
		Stop: func() error {
			fmt.Fprintln(out, "stopping Flotilla and the testbed ...")
			err := fl.Stop()
			fmt.Fprintln(out, "everything stopped")
			return err
		},
	}, nil
}
