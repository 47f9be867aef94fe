package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/pkg/placement"
)

// Fates of a member in a placement explanation.
const (
	// FateSelected: the member runs the app with the replicas shown.
	FateSelected = "selected"
	// FateKept: a filter stops new replicas, but the member keeps the
	// ones it runs (not Ready, a NoSchedule taint, a NoExecute taint
	// within its toleration).
	FateKept = "kept"
	// FateDropped: a filter removed the member.
	FateDropped = "dropped"
	// FateNotChosen: the member passed the filters, but the division or
	// the spread constraints gave it nothing.
	FateNotChosen = "not chosen"
	// FateEvicted: replicas were moved away from the member.
	FateEvicted = "evicted"
)

// Why explains the placement of one MyApp.
type Why struct {
	MyApp string `json:"myApp"`
	// Policy describes the placement in one line.
	Policy   string `json:"policy"`
	Replicas int32  `json:"replicas"`
	// AffinityGroup is the clusterAffinities group in use, if any.
	AffinityGroup string `json:"affinityGroup,omitempty"`
	// Error is why the app cannot be scheduled now (the hub then keeps
	// the recorded decision).
	Error    string       `json:"error,omitempty"`
	Clusters []WhyCluster `json:"clusters"`
	Warnings []string     `json:"warnings,omitempty"`
	// Recorded says whether status.placement matches the scheduler's
	// decision now; the hub decides, this only explains.
	Matches bool   `json:"matchesRecordedDecision"`
	Note    string `json:"note,omitempty"`
}

// WhyCluster is one member's fate.
type WhyCluster struct {
	Name   string `json:"name"`
	Fate   string `json:"fate"`
	Filter string `json:"filter,omitempty"`
	Reason string `json:"reason,omitempty"`
	// ScoreBasis and Score: what the scheduler weighs the member by.
	ScoreBasis string `json:"scoreBasis"`
	Score      int64  `json:"score"`
	// Replicas is what the scheduler gives the member now; Recorded is
	// what status.placement says (nil: not listed there).
	Replicas int32  `json:"replicas"`
	Recorded *int32 `json:"recordedReplicas,omitempty"`
}

// Explain runs the scheduler on app and the members as they are at now,
// with the app's status.placement as the previous decision (as the hub
// does), and says for every member what became of it and why.
func Explain(app *flotillav1.MyApp, members []flotillav1.MemberCluster, now time.Time) (*Why, error) {
	in := placement.InputFor(app, members, now)
	res, schedErr := placement.Schedule(in)
	var serr *placement.ScheduleError
	if schedErr != nil && !errors.As(schedErr, &serr) {
		return nil, fmt.Errorf("MyApp %s/%s: %w", app.Namespace, app.Name, schedErr)
	}
	scores, err := placement.Scores(in)
	if err != nil {
		return nil, fmt.Errorf("MyApp %s/%s: %w", app.Namespace, app.Name, err)
	}
	w := &Why{MyApp: app.Namespace + "/" + app.Name, Policy: describePolicy(&app.Spec.Placement), Replicas: in.Replicas,
		AffinityGroup: res.AffinityName, Warnings: res.Warnings}
	filtered := res.Filtered
	if serr != nil {
		w.Error = serr.Error()
		if n := len(serr.Attempts); n > 0 {
			filtered = serr.Attempts[n-1].Filtered
			w.AffinityGroup = serr.Attempts[n-1].AffinityName
		}
	}
	byName := func(name string) (flotillav1.MemberCluster, bool) {
		for _, m := range members {
			if m.Name == name {
				return m, true
			}
		}
		return flotillav1.MemberCluster{}, false
	}
	recorded := map[string]int32{}
	if p := app.Status.Placement; p != nil {
		for _, t := range p.Clusters {
			recorded[t.Name] = t.Replicas
		}
	}
	hasSpread := len(app.Spec.Placement.SpreadConstraints) > 0
	for _, sc := range scores {
		c := WhyCluster{Name: sc.Name, ScoreBasis: sc.Basis, Score: sc.Score}
		selected := false
		for _, t := range res.Clusters {
			if t.Name == sc.Name {
				selected, c.Replicas = true, t.Replicas
			}
		}
		var filter *placement.ClusterReason
		for i := range filtered {
			if filtered[i].Name == sc.Name {
				filter = &filtered[i]
			}
		}
		var evicted *flotillav1.EvictedCluster
		for i := range res.Evicted {
			if res.Evicted[i].Name == sc.Name {
				evicted = &res.Evicted[i]
			}
		}
		switch {
		case selected && filter != nil:
			c.Fate, c.Filter, c.Reason = FateKept, filter.Filter, filter.Reason+"; keeps the replicas it runs, takes no new ones"
		case selected:
			c.Fate = FateSelected
		case evicted != nil:
			c.Fate, c.Reason = FateEvicted, fmt.Sprintf("%s at %s (%d replicas moved away)", evicted.Reason, evicted.EvictionTime.UTC().Format(time.RFC3339), evicted.Replicas)
			if filter != nil {
				c.Filter = filter.Filter
				c.Reason = filter.Reason + "; " + c.Reason
			}
		case filter != nil:
			c.Fate, c.Filter, c.Reason = FateDropped, filter.Filter, filter.Reason
		case serr != nil:
			c.Fate, c.Reason = FateNotChosen, "passed the filters, but the app could not be scheduled"
		case hasSpread:
			c.Fate, c.Reason = FateNotChosen, "passed the filters; the spread constraints chose other groups, or its share came to 0 replicas"
		default:
			c.Fate, c.Reason = FateNotChosen, "passed the filters; its share of the replicas came to 0"
		}
		if mc, ok := byName(sc.Name); ok && !mc.IsAccepted() && c.Filter != placement.FilterAcceptance {
			c.Reason = strings.TrimPrefix(c.Reason+"; ", "; ") + fmt.Sprintf("spec.acceptance is %s (`kubectl flotilla accept %s` lets it in)", mc.Spec.Acceptance, mc.Name)
		}
		if r, ok := recorded[sc.Name]; ok {
			c.Recorded = &r
		}
		w.Clusters = append(w.Clusters, c)
	}
	w.Matches, w.Note = compareDecision(app.Status.Placement, res.Clusters, serr != nil)
	return w, nil
}

// compareDecision says whether the recorded decision is the scheduler's
// decision now, and if not, how they differ.
func compareDecision(rec *flotillav1.PlacementDecision, now []flotillav1.TargetCluster, failed bool) (bool, string) {
	if rec == nil {
		return false, "the hub has recorded no decision yet (status.placement is empty)"
	}
	if failed {
		return false, "the app cannot be scheduled now: the hub keeps the recorded decision (" + targets(rec.Clusters) + ")"
	}
	if targets(rec.Clusters) == targets(now) {
		return true, ""
	}
	return false, fmt.Sprintf("status.placement (%s) differs from the scheduler's decision now (%s): the hub decides, at its next reconcile of the app", targets(rec.Clusters), targets(now))
}

func targets(ts []flotillav1.TargetCluster) string {
	if len(ts) == 0 {
		return "no clusters"
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.Name + "=" + strconv.Itoa(int(t.Replicas))
	}
	return strings.Join(parts, ",")
}

// describePolicy says how a placement shares replicas, in one line.
func describePolicy(p *flotillav1.Placement) string {
	s := "Duplicated"
	if rs := p.ReplicaScheduling; rs != nil && rs.ReplicaSchedulingType == flotillav1.ReplicaSchedulingDivided {
		switch {
		case rs.ReplicaDivisionPreference == flotillav1.ReplicaDivisionAggregated:
			s = "Divided, Aggregated"
		case rs.WeightPreference != nil && rs.WeightPreference.DynamicWeight != "":
			s = "Divided, Weighted by " + string(rs.WeightPreference.DynamicWeight)
		case rs.WeightPreference != nil && len(rs.WeightPreference.StaticWeightList) > 0:
			s = "Divided, Weighted by staticWeightList"
		default:
			s = "Divided, equal weights"
		}
	}
	for _, c := range p.SpreadConstraints {
		s += "; spread by " + string(c.SpreadByField)
		if c.MinGroups != nil {
			s += fmt.Sprintf(" min %d", *c.MinGroups)
		}
		if c.MaxGroups != nil {
			s += fmt.Sprintf(" max %d", *c.MaxGroups)
		}
	}
	return s
}

// WriteWhy writes the explanation as a table with a header and notes.
func WriteWhy(out io.Writer, w *Why) error {
	fmt.Fprintf(out, "MyApp %s: %d replicas, %s", w.MyApp, w.Replicas, w.Policy)
	if w.AffinityGroup != "" {
		fmt.Fprintf(out, "; affinity group %s", w.AffinityGroup)
	}
	fmt.Fprintln(out)
	if w.Error != "" {
		fmt.Fprintf(out, "Not schedulable now: %s\n", w.Error)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tFATE\tREPLICAS\tRECORDED\tSCORE\tFILTER\tREASON")
	for _, c := range w.Clusters {
		rec := "-"
		if c.Recorded != nil {
			rec = strconv.Itoa(int(*c.Recorded))
		}
		score := "-"
		if c.ScoreBasis != placement.ScoreNone {
			score = fmt.Sprintf("%d (%s)", c.Score, c.ScoreBasis)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", c.Name, c.Fate, c.Replicas, rec, score, dash(c.Filter), dash(c.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, warn := range w.Warnings {
		fmt.Fprintf(out, "\nWarning: %s\n", warn)
	}
	if w.Note != "" {
		fmt.Fprintf(out, "\nNote: %s\n", w.Note)
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WhyLive explains the MyApp namespace/name as the hub's objects are now.
func WhyLive(ctx context.Context, c client.Reader, namespace, name string, now time.Time) (*Why, error) {
	app := &flotillav1.MyApp{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, app); err != nil {
		return nil, fmt.Errorf("MyApp %s/%s: %w", namespace, name, err)
	}
	var members flotillav1.MemberClusterList
	if err := c.List(ctx, &members); err != nil {
		return nil, fmt.Errorf("listing MemberClusters: %w", err)
	}
	return Explain(app, members.Items, now)
}

func newWhyCommand(g *Globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "why MYAPP",
		Short: "Explain a MyApp's placement: every member, the filter that kept or dropped it, its score and replicas",
		Long: `why runs the scheduler on the MyApp and the MemberClusters as they are now,
with the MyApp's recorded decision (status.placement) as the previous one,
as the hub does, and shows every member's fate: selected (with its
replicas), kept (a filter stops new replicas, it keeps its own), dropped
(by which filter and why), not chosen or evicted; its score; and what
status.placement records. The hub decides; why explains, and says when the
two differ.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ns, err := g.namespace()
			if err != nil {
				return err
			}
			w, err := WhyLive(cmd.Context(), c, ns, args[0], time.Now())
			if err != nil {
				return err
			}
			if output == OutputJSON || output == OutputYAML {
				return writeStructured(g.IO.Out, output, w)
			}
			return WriteWhy(g.IO.Out, w)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}
