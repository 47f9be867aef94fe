package statusview

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/internal/truncate"
)

// View is the fleet as the tables show it.
type View struct {
	Members []Member `json:"members"`
	MyApps  []App    `json:"myApps"`
}

// Member is one MemberCluster's row.
type Member struct {
	Name     string `json:"name"`
	Region   string `json:"region,omitempty"`
	Zone     string `json:"zone,omitempty"`
	Provider string `json:"provider,omitempty"`
	// Mode is the sync mode: Pull (an agent) or Push (the hub applies).
	Mode       string `json:"mode"`
	Acceptance string `json:"acceptance"`
	Ready      string `json:"ready"`
	Connected  string `json:"connected"`
	// Heartbeat is the age of the last heartbeat ("-" without one, or
	// when the view was built without a clock).
	Heartbeat    string   `json:"heartbeat"`
	Taints       []string `json:"taints,omitempty"`
	AgentVersion string   `json:"agentVersion,omitempty"`
	Kubernetes   string   `json:"kubernetesVersion,omitempty"`
}

// App is one MyApp with a row per cluster.
type App struct {
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	Desired   int32        `json:"desiredReplicas"`
	Ready     int32        `json:"readyReplicas"`
	Clusters  []AppCluster `json:"clusters,omitempty"`
	// Conditions is the MyApp's Ready, Available, Progressing and
	// Degraded conditions in one line.
	Conditions string `json:"conditions"`
	// Message explains an app with no clusters (its Scheduled condition).
	Message string `json:"message,omitempty"`
}

// AppCluster is one MyApp's state in one member.
type AppCluster struct {
	Name      string `json:"name"`
	Desired   int32  `json:"desiredReplicas"`
	Ready     int32  `json:"readyReplicas"`
	Available int32  `json:"availableReplicas"`
	Updated   int32  `json:"updatedReplicas"`
	Phase     string `json:"phase,omitempty"`
	Message   string `json:"message,omitempty"`
}

// Build makes the view of members and apps, sorted by name. A zero now
// leaves out what changes with the clock alone (heartbeat ages), so that
// two views built that way differ only when the fleet changed.
func Build(members []flotillav1.MemberCluster, apps []flotillav1.MyApp, now time.Time) View {
	v := View{Members: make([]Member, 0, len(members)), MyApps: make([]App, 0, len(apps))}
	for i := range members {
		mc := &members[i]
		m := Member{
			Name: mc.Name, Region: mc.Spec.Region, Zone: mc.Spec.Zone, Provider: mc.Spec.Provider,
			Mode:       string(flotillav1.SyncModePull),
			Acceptance: string(flotillav1.AcceptanceAccepted),
			Ready:      condStatus(mc.Status.Conditions, flotillav1.ConditionReady),
			Connected:  condStatus(mc.Status.Conditions, flotillav1.ConditionConnected),
			Heartbeat:  "-",
			Kubernetes: mc.Status.KubernetesVersion,
		}
		if mc.Spec.SyncMode != "" {
			m.Mode = string(mc.Spec.SyncMode)
		}
		if mc.Spec.Acceptance != "" {
			m.Acceptance = string(mc.Spec.Acceptance)
		}
		if mc.Status.LastHeartbeatTime != nil && !now.IsZero() {
			m.Heartbeat = now.Sub(mc.Status.LastHeartbeatTime.Time).Round(time.Second).String() + " ago"
		}
		for _, t := range mc.Spec.Taints {
			m.Taints = append(m.Taints, t.Key+":"+string(t.Effect))
		}
		if mc.Status.Agent != nil {
			m.AgentVersion = mc.Status.Agent.Version
		}
		v.Members = append(v.Members, m)
	}
	sort.SliceStable(v.Members, func(i, j int) bool { return v.Members[i].Name < v.Members[j].Name })
	for i := range apps {
		app := &apps[i]
		a := App{
			Namespace: app.Namespace, Name: app.Name,
			Desired: app.Status.DesiredReplicas, Ready: app.Status.ReadyReplicas,
			Conditions: conditionsLine(app.Status.Conditions),
		}
		if len(app.Status.Clusters) == 0 {
			a.Message = condMessage(app.Status.Conditions, flotillav1.ConditionScheduled)
		}
		for _, cs := range app.Status.Clusters {
			a.Clusters = append(a.Clusters, AppCluster{
				Name: cs.Name, Desired: cs.Assigned, Ready: cs.ReadyReplicas,
				Available: cs.AvailableReplicas, Updated: cs.UpdatedReplicas,
				Phase: string(cs.Phase), Message: cs.Message,
			})
		}
		v.MyApps = append(v.MyApps, a)
	}
	sort.SliceStable(v.MyApps, func(i, j int) bool {
		return v.MyApps[i].Namespace+"/"+v.MyApps[i].Name < v.MyApps[j].Namespace+"/"+v.MyApps[j].Name
	})
	return v
}

// WriteMembers writes the member table (READY says Pending or Denied for
// a member not accepted into the fleet); wide adds the zone, the sync
// mode, acceptance, agent and Kubernetes versions.
func WriteMembers(out io.Writer, members []Member, wide bool) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if wide {
		fmt.Fprintln(w, "MEMBER\tREGION\tZONE\tPROVIDER\tMODE\tACCEPTANCE\tREADY\tCONNECTED\tHEARTBEAT\tTAINTS\tAGENT\tKUBERNETES")
	} else {
		fmt.Fprintln(w, "MEMBER\tREGION\tPROVIDER\tREADY\tCONNECTED\tHEARTBEAT\tTAINTS")
	}
	for _, m := range members {
		if wide {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.Region, m.Zone, m.Provider, m.Mode, m.Acceptance,
				m.Ready, m.Connected, m.Heartbeat, strings.Join(m.Taints, ","), dash(m.AgentVersion), dash(m.Kubernetes))
			continue
		}
		ready := m.Ready
		if m.Acceptance != string(flotillav1.AcceptanceAccepted) {
			// A member that is not in the fleet shows why in place of
			// Ready, which it never becomes until it is accepted.
			ready = m.Acceptance
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", m.Name, m.Region, m.Provider, ready, m.Connected, m.Heartbeat, strings.Join(m.Taints, ","))
	}
	return w.Flush()
}

// WriteApps writes the per-cluster MyApp table: a row per (MyApp,
// cluster) and a total per MyApp. wide adds available and updated
// replicas and does not shorten messages.
func WriteApps(out io.Writer, apps []App, wide bool) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if wide {
		fmt.Fprintln(w, "MYAPP\tCLUSTER\tDESIRED\tREADY\tAVAILABLE\tUPDATED\tPHASE\tMESSAGE")
	} else {
		fmt.Fprintln(w, "MYAPP\tCLUSTER\tDESIRED\tREADY\tPHASE\tMESSAGE")
	}
	for _, a := range apps {
		name := a.Namespace + "/" + a.Name
		if len(a.Clusters) == 0 {
			if wide {
				fmt.Fprintf(w, "%s\t-\t-\t-\t-\t-\t-\t%s\n", name, a.Message)
			} else {
				fmt.Fprintf(w, "%s\t-\t-\t-\t-\t%s\n", name, truncate.String(a.Message, 80))
			}
		}
		for i, c := range a.Clusters {
			label := ""
			if i == 0 {
				label = name
			}
			if wide {
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", label, c.Name, c.Desired, c.Ready, c.Available, c.Updated, c.Phase, c.Message)
			} else {
				fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\n", label, c.Name, c.Desired, c.Ready, c.Phase, truncate.String(c.Message, 60))
			}
		}
		if wide {
			fmt.Fprintf(w, "\t(total)\t%d\t%d\t\t\t%s\t\n", a.Desired, a.Ready, a.Conditions)
		} else {
			fmt.Fprintf(w, "\t(total)\t%d\t%d\t%s\t\n", a.Desired, a.Ready, a.Conditions)
		}
	}
	return w.Flush()
}

// Write writes both tables, a blank line between them.
func Write(out io.Writer, v View, wide bool) error {
	if err := WriteMembers(out, v.Members, wide); err != nil {
		return err
	}
	fmt.Fprintln(out)
	return WriteApps(out, v.MyApps, wide)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func condStatus(cs []metav1.Condition, t string) string {
	if c := meta.FindStatusCondition(cs, t); c != nil {
		return string(c.Status)
	}
	return "-"
}

func condMessage(cs []metav1.Condition, t string) string {
	if c := meta.FindStatusCondition(cs, t); c != nil {
		return c.Reason + ": " + c.Message
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
