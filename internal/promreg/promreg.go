// Package promreg registers Prometheus collectors for processes that may
// build their component more than once (tests run several hubs or agents in
// one process): the newest collector replaces the one already registered.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Replace registers cs on reg (controller-runtime's registry when nil); a
// collector already registered there under the same descriptors is
// unregistered first, so the newest instance is the one described.
func Replace(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		reg = ctrlmetrics.Registry
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
