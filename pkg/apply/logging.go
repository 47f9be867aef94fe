package apply

import (
	"context"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// maxWireVerbosity is the most verbose level an Applier's requests log
// at. client-go traces request and response bodies at level 8 and above
// through the context's logger (as kubectl -v=8 does); a Work carries
// Secrets, so those levels are cut for everything an Applier does,
// whatever verbosity the process runs at.
const maxWireVerbosity = 7

// quiet returns ctx with its logger capped at maxWireVerbosity.
func quiet(ctx context.Context) context.Context {
	l := log.FromContext(ctx)
	if _, capped := l.GetSink().(cappedSink); capped || l.GetSink() == nil {
		return ctx
	}
	return log.IntoContext(ctx, logr.New(cappedSink{LogSink: l.GetSink()}))
}

// cappedSink is a logr.LogSink that drops levels above maxWireVerbosity.
type cappedSink struct{ logr.LogSink }

func (s cappedSink) Enabled(level int) bool {
	return level <= maxWireVerbosity && s.LogSink.Enabled(level)
}

func (s cappedSink) Info(level int, msg string, kv ...any) {
	if level <= maxWireVerbosity {
		s.LogSink.Info(level, msg, kv...)
	}
}

func (s cappedSink) WithValues(kv ...any) logr.LogSink {
	return cappedSink{LogSink: s.LogSink.WithValues(kv...)}
}

func (s cappedSink) WithName(name string) logr.LogSink {
	return cappedSink{LogSink: s.LogSink.WithName(name)}
}
