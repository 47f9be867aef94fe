package cli

import (
	"bytes"
	"context"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// run runs kubectl-flotilla with args and returns what it printed.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := NewCommand(genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut})
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}
