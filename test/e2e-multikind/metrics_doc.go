package e2e

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// documentedMetric is one row of docs/metrics.md.
type documentedMetric struct {
	name, component, typ string
}

// components are the processes that must serve m: a metric both serve is
// listed once, as "hub and agent" (hack/metricsdoc), and must come from
// each.
func (m documentedMetric) components() ([]string, error) {
	switch m.component {
	case "hub", "agent":
		return []string{m.component}, nil
	case "hub and agent":
		return []string{"hub", "agent"}, nil
	}
	return nil, fmt.Errorf("docs/metrics.md: %s has component %q, want hub, agent or \"hub and agent\"", m.name, m.component)
}

// readDocumentedMetrics reads the metric table of the metrics reference
// at path.
func readDocumentedMetrics(path string) ([]documentedMetric, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []documentedMetric
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "| `flotilla_") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			return nil, fmt.Errorf("%s: a metric row with %d cells: %q", path, len(cells), line)
		}
		out = append(out, documentedMetric{
			name:      strings.Trim(strings.TrimSpace(cells[1]), "`"),
			component: strings.TrimSpace(cells[2]),
			typ:       strings.TrimSpace(cells[3]),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) < 20 {
		return nil, fmt.Errorf("%s lists %d metrics; the table was not found", path, len(out))
	}
	return out, nil
}
