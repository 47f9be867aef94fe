package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/statusview"
)

// applyManifests creates (or updates) the MyApps in a YAML file on the
// hub, in the default namespace unless they name one.
func applyManifests(ctx context.Context, c client.Client, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		app := &flotillav1.MyApp{}
		if err := dec.Decode(app); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("reading %s: %w", path, err)
		}
		if app.Name == "" {
			continue
		}
		if app.Namespace == "" {
			app.Namespace = "default"
		}
		err := c.Create(ctx, app)
		if apierrors.IsAlreadyExists(err) {
			cur := &flotillav1.MyApp{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(app), cur); err != nil {
				return err
			}
			app.ResourceVersion = cur.ResourceVersion
			err = c.Update(ctx, app)
		}
		if err != nil {
			return fmt.Errorf("applying MyApp %s from %s: %w", app.Name, path, err)
		}
	}
}

// watchTable redraws a table of the members and the MyApps every second
// until ctx ends. On a terminal it redraws in place; otherwise it prints a
// new table only when something changed.
func watchTable(ctx context.Context, c client.Client, out io.Writer, hubKubeconfig, dir string) {
	tty := false
	if f, ok := out.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	last := ""
	for {
		table := renderTable(ctx, c, hubKubeconfig, dir, time.Now())
		// Off a terminal, print only real changes: compare the table as it
		// would read with the clock stopped.
		key := renderTable(ctx, c, hubKubeconfig, dir, time.Time{})
		if tty || key != last {
			if tty {
				// Home the cursor and clear the screen.
				fmt.Fprint(out, "\033[H\033[2J")
			}
			fmt.Fprint(out, table)
			last = key
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// renderTable renders the table as of now; a zero now leaves out what
// changes with the clock alone (the time, heartbeat ages).
func renderTable(ctx context.Context, c client.Client, hubKubeconfig, dir string, now time.Time) string {
	var b bytes.Buffer
	clock := ""
	if !now.IsZero() {
		clock = now.Format("15:04:05")
	}
	fmt.Fprintf(&b, "Flotilla on the local testbed — %s   (Ctrl-C stops everything)\n\n", clock)
	var members flotillav1.MemberClusterList
	if err := c.List(ctx, &members); err != nil {
		fmt.Fprintf(&b, "listing MemberClusters: %v\n", err)
		return b.String()
	}
	var apps flotillav1.MyAppList
	if err := c.List(ctx, &apps); err != nil {
		fmt.Fprintf(&b, "listing MyApps: %v\n", err)
		return b.String()
	}
	// The same tables `kubectl flotilla status` prints.
	_ = statusview.Write(&b, statusview.Build(members.Items, apps.Items, now), false)
	fmt.Fprintf(&b, "\nTry:            kubectl --kubeconfig %s get myapps,memberclusters -A\n", hubKubeconfig)
	fmt.Fprintf(&b, "Lose a member:  bin/testbed stop-member member-2 --dir %s   (and start-member to bring it back)\n", dir)
	return b.String()
}
