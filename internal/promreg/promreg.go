// Package promreg registers Prometheus collectors for processes that may
// build their component more than once (tests run several hubs or agents in
// one process): the newest collector replaces the one already registered.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Replace registers cs on reg; a collector already registered there
// under the same descriptors is unregistered first, so the newest instance
// is the one described. (The package links no controller-runtime: the
// agent, which does not link it, registers on its own registry; the hub
// passes controller-runtime's.)
func Replace(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return errors.New("promreg: no registry to register on")
	}
	for _, c := range cs {
		err := reg.Register(c)
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			reg.Unregister(already.ExistingCollector)
			err = reg.Register(c)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
