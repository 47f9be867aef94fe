// Command monitoring writes deploy/monitoring: Flotilla's alerts as a
// Prometheus rule file and as a PrometheusRule (the same rules, from
// Rules), and the Grafana dashboard (Dashboard, built with the Grafana
// Foundation SDK). `make manifests` runs it; `make verify` fails when the
// files are stale. The promtool tests of the alerts are in
// deploy/monitoring/tests, written by hand.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	dir := flag.String("dir", "deploy/monitoring", "directory to write")
	flag.Parse()
	if err := write(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "monitoring:", err)
		os.Exit(1)
	}
}

// files are the generated files by name.
func files() (map[string][]byte, error) {
	out, err := ruleFiles()
	if err != nil {
		return nil, err
	}
	if out["flotilla-dashboard.json"], err = dashboardJSON(); err != nil {
		return nil, err
	}
	return out, nil
}

func write(dir string) error {
	fs, err := files()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, data := range fs {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
