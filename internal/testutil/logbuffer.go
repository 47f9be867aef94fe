package testutil

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// LogBuffer collects what a logger writes, from any goroutine (a
// manager's controllers and servers log from their own), so a test can
// read it back, e.g. to check that no key material was logged.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Logger returns a logger that writes every line, at every verbosity, to b.
func (b *LogBuffer) Logger() logr.Logger {
	return funcr.New(b.write, funcr.Options{Verbosity: 10})
}

func (b *LogBuffer) write(prefix, args string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fmt.Fprintln(&b.buf, prefix, args)
}

// String returns everything logged so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
