package testutil

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// probeClient asks probe endpoints; each request is bounded, as a
// kubelet's is.
var probeClient = &http.Client{Timeout: 3 * time.Second}

// GetProbe asks http://addr+path (a /healthz or /readyz endpoint, or one
// named check under it) and returns the status code and body.
func GetProbe(addr, path string) (int, string, error) {
	resp, err := probeClient.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, string(b), nil
}

// ProbeIs returns a check for Eventually: addr+path answers want, with a
// body holding every one of contains. Its error names what it got.
func ProbeIs(addr, path string, want int, contains ...string) func() error {
	return func() error {
		code, body, err := GetProbe(addr, path)
		if err != nil {
			return err
		}
		if code != want {
			return fmt.Errorf("%s answered %d, want %d: %s", path, code, want, strings.TrimSpace(body))
		}
		for _, s := range contains {
			if !strings.Contains(body, s) {
				return fmt.Errorf("%s answered %d without %q: %s", path, code, s, strings.TrimSpace(body))
			}
		}
		return nil
	}
}
