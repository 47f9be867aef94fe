// The bench namespace and the watches in every member, and the members'
// control-plane processes: kwok v0.8.0 can crash at start, and the
// benchmark restarts a member whose process died rather than time a broken
// member.

package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// prepare creates the bench namespace everywhere and starts the watches.
func (b *bench) prepare(ctx context.Context) error {
	ns := func(c client.Client) error {
		err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err := ns(b.f.Hub); err != nil {
		return err
	}
	if err := b.createProbe(ctx); err != nil {
		return err
	}
	if err := b.obs.watchHub(ctx, b.f.HubConfig); err != nil {
		return err
	}
	b.procs = map[string][]string{}
	for _, m := range b.members {
		for name := range b.f.Testbed.Member(m).PIDs() {
			b.procs[m] = append(b.procs[m], name)
		}
		slices.Sort(b.procs[m])
		if err := ns(b.f.Member(m)); err != nil {
			return err
		}
		if err := b.watchMember(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// restartDead restarts every member with a dead control-plane process
// and records the incident.
func (b *bench) restartDead(ctx context.Context) (restarted bool, err error) {
	for _, m := range b.members {
		dead := b.deadProcesses(m)
		if len(dead) == 0 {
			continue
		}
		msg := fmt.Sprintf("%s of %s exited", strings.Join(dead, ", "), m)
		b.incidents = append(b.incidents, msg)
		progress("warning: %s (logs in %s); restarting %s", msg, filepath.Join(b.f.Testbed.Member(m).Dir, "logs"), m)
		restarted = true
		b.obs.stopMember(m)
		if err := b.f.StopMember(m); err != nil {
			progress("warning: stopping %s: %v", m, err)
		}
		if err := b.f.StartMember(ctx, m); err != nil {
			return restarted, err
		}
		if err := b.watchMember(ctx, m); err != nil {
			return restarted, err
		}
	}
	return restarted, nil
}

// deadSummary names dead control-plane processes, for error messages.
func (b *bench) deadSummary() string {
	var parts []string
	for _, m := range b.members {
		if dead := b.deadProcesses(m); len(dead) > 0 {
			parts = append(parts, fmt.Sprintf("%s of %s", strings.Join(dead, ", "), m))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (testbed processes exited: " + strings.Join(parts, "; ") + ")"
}

// deadProcesses names the control-plane processes of member m that were
// running at the start and are not now.
func (b *bench) deadProcesses(m string) []string {
	running := b.f.Testbed.Member(m).PIDs()
	var dead []string
	for _, name := range b.procs[m] {
		if _, ok := running[name]; !ok {
			dead = append(dead, name)
		}
	}
	return dead
}

func (b *bench) watchMember(ctx context.Context, m string) error {
	cfg, err := b.f.Testbed.Member(m).RESTConfig()
	if err != nil {
		return err
	}
	return b.obs.watchMember(ctx, m, cfg)
}
