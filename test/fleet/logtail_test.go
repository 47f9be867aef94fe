package fleet

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLogTailsNameTheHubAndTheNotReadyMembersAgents checks what a
// waitReady timeout carries: the last lines of the hub's log and of the
// agents of the members that did not become Ready, not of the others.
func TestLogTailsNameTheHubAndTheNotReadyMembersAgents(t *testing.T) {
	f := &Fleet{cfg: Config{Dir: t.TempDir()}, agents: map[string][]*Supervised{
		"member-1": {{Name: "agent-member-1-0"}, {Name: "agent-member-1-1"}},
		"member-2": {{Name: "agent-member-2-0"}},
	}}
	if err := os.MkdirAll(f.LogDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hub", "agent-member-1-0", "agent-member-1-1", "agent-member-2-0"} {
		var lines []string
		for i := range logTailLines + 5 {
			lines = append(lines, fmt.Sprintf("%s line %d", name, i))
		}
		if err := os.WriteFile(filepath.Join(f.LogDir(), name+".log"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	got := f.logTails([]string{"member-1 (not joined)"})
	for _, name := range []string{"hub", "agent-member-1-0", "agent-member-1-1"} {
		last := fmt.Sprintf("%s line %d", name, logTailLines+4)
		first := fmt.Sprintf("%s line %d\n", name, 5)
		dropped := fmt.Sprintf("%s line %d\n", name, 4)
		if !strings.Contains(got, "last 15 lines of "+name+".log") || !strings.Contains(got, last) || !strings.Contains(got, first) || strings.Contains(got, dropped) {
			t.Errorf("tails lack the last %d lines of %s (or hold more):\n%s", logTailLines, name, got)
		}
	}
	if strings.Contains(got, "agent-member-2-0") {
		t.Errorf("tails hold the log of member-2's agent, which is Ready:\n%s", got)
	}
}
