package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/truncate"
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
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "MEMBER\tREGION\tPROVIDER\tREADY\tCONNECTED\tHEARTBEAT\tTAINTS")
	for _, mc := range members.Items {
		hb := "-"
		if mc.Status.LastHeartbeatTime != nil && !now.IsZero() {
			hb = now.Sub(mc.Status.LastHeartbeatTime.Time).Round(time.Second).String() + " ago"
		}
		var taints []string
		for _, t := range mc.Spec.Taints {
			taints = append(taints, t.Key+":"+string(t.Effect))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", mc.Name, mc.Spec.Region, mc.Spec.Provider,
			condStatus(mc.Status.Conditions, flotillav1.ConditionReady), condStatus(mc.Status.Conditions, flotillav1.ConditionConnected),
			hb, strings.Join(taints, ","))
	}
	w.Flush()

	var apps flotillav1.MyAppList
	if err := c.List(ctx, &apps); err != nil {
		fmt.Fprintf(&b, "listing MyApps: %v\n", err)
		return b.String()
	}
	sort.Slice(apps.Items, func(i, j int) bool {
		return apps.Items[i].Namespace+"/"+apps.Items[i].Name < apps.Items[j].Namespace+"/"+apps.Items[j].Name
	})
	fmt.Fprintln(&b)
	w = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "MYAPP\tCLUSTER\tDESIRED\tREADY\tPHASE\tMESSAGE")
	for _, app := range apps.Items {
		name := app.Namespace + "/" + app.Name
		if len(app.Status.Clusters) == 0 {
			fmt.Fprintf(w, "%s\t-\t-\t-\t-\t%s\n", name, condMessage(app.Status.Conditions, flotillav1.ConditionScheduled))
		}
		for i, cs := range app.Status.Clusters {
			label := ""
			if i == 0 {
				label = name
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\n", label, cs.Name, cs.Assigned, cs.ReadyReplicas, cs.Phase, truncate.String(cs.Message, 60))
		}
		fmt.Fprintf(w, "\t(total)\t%d\t%d\t%s\t\n", app.Status.DesiredReplicas, app.Status.ReadyReplicas, conditionsLine(app.Status.Conditions))
	}
	w.Flush()
	fmt.Fprintf(&b, "\nTry:            kubectl --kubeconfig %s get myapps,memberclusters -A\n", hubKubeconfig)
	fmt.Fprintf(&b, "Lose a member:  bin/testbed stop-member member-2 --dir %s   (and start-member to bring it back)\n", dir)
	return b.String()
}

func condStatus(cs []metav1.Condition, t string) string {
	if c := meta.FindStatusCondition(cs, t); c != nil {
		return string(c.Status)
	}
	return "-"
}

func condMessage(cs []metav1.Condition, t string) string {
	if c := meta.FindStatusCondition(cs, t); c != nil {
		return truncate.String(c.Reason+": "+c.Message, 80)
	}
	return "not reconciled yet"
}

// conditionsLine shows the MyApp's conditions in one short line.
func conditionsLine(cs []metav1.Condition) string {
	var parts []string
	for _, t := range []string{flotillav1.ConditionReady, flotillav1.ConditionAvailable, flotillav1.ConditionProgressing, flotillav1.ConditionDegraded} {
		if c := meta.FindStatusCondition(cs, t); c != nil {
			parts = append(parts, t+"="+string(c.Status))
		}
	}
	return strings.Join(parts, " ")
}
