// Command rollout times Progressive rollouts for `make bench`: on a local
// fleet (testbed hub and 3 members, the hub and agents as processes) it
// changes the image of a MyApp that rolls out with maxConcurrency 1 and a
// minSuccessTime, and measures from the change on the hub to status.rollout
// Complete, against the sum of the minSuccessTimes (the time the policy
// itself asks for). What is left is Flotilla's own cost: the waves'
// propagation, the Deployments' rollout in each member and the status
// coming back.
//
//	go run ./test/bench/rollout -runs 5 -min-success 2s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
	"github.com/flotilla-dev/flotilla/test/fleet"
	"github.com/flotilla-dev/flotilla/test/testbed"
)

func main() {
	runs := flag.Int("runs", 5, "rollouts to time")
	minSuccess := flag.Duration("min-success", 2*time.Second, "each cluster's minSuccessTime")
	members := flag.Int("members", 3, "member clusters")
	dir := flag.String("dir", "", "working folder (default: a temporary one)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *runs, *minSuccess, *members, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "rollout bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, runs int, minSuccess time.Duration, members int, dir string) (err error) {
	if dir == "" {
		if dir, err = os.MkdirTemp("", "flotilla-rollout-bench-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	bin := filepath.Join(dir, "bin")
	if err := fleet.BuildBinaries(".", bin); err != nil {
		return err
	}
	f, err := fleet.Start(ctx, fleet.Config{
		Dir: filepath.Join(dir, "fleet"), FlotillaBinDir: bin, CRDDir: "deploy/hub/crds",
		Members: testbed.DefaultMembers(members),
	})
	if err != nil {
		return err
	}
	defer func() {
		if serr := f.Stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	app := &flotillav1.MyApp{
		ObjectMeta: metav1.ObjectMeta{Name: "rollout-bench", Namespace: "default"},
		Spec: flotillav1.MyAppSpec{
			Image:    "nginx:1.0",
			Replicas: ptr.To[int32](2),
			Rollout: &flotillav1.RolloutPolicy{Strategy: flotillav1.RolloutProgressive, Progressive: &flotillav1.ProgressiveRollout{
				MinSuccessTime: &metav1.Duration{Duration: minSuccess},
			}},
		},
	}
	if err := f.Hub.Create(ctx, app); err != nil {
		return err
	}
	if _, err := waitComplete(ctx, f.Hub, app, "", 3*time.Minute); err != nil {
		return fmt.Errorf("the first version never settled: %w", err)
	}
	floor := time.Duration(members) * minSuccess
	var samples []time.Duration
	for i := 0; i <= runs; i++ { // run 0 warms up and is not counted
		image := fmt.Sprintf("nginx:1.%d", i+1)
		patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"image":%q}}`, image)))
		start := time.Now()
		if err := f.Hub.Patch(ctx, app, patch); err != nil {
			return err
		}
		done, err := waitComplete(ctx, f.Hub, app, image, 5*time.Minute)
		if err != nil {
			return fmt.Errorf("rollout %d to %s: %w", i, image, err)
		}
		took := done.Sub(start)
		if i > 0 {
			samples = append(samples, took)
		}
		fmt.Fprintf(os.Stderr, "rollout %d to %s: %s\n", i, image, took.Round(time.Millisecond))
	}
	slices.Sort(samples)
	pct := func(p float64) time.Duration { return samples[min(len(samples)-1, int(float64(len(samples))*p/100))] }
	fmt.Printf("\n## Progressive rollout (%d clusters, maxConcurrency 1, minSuccessTime %s)\n\n", members, minSuccess)
	fmt.Println("| figure | p50 | p90 | max | runs |")
	fmt.Println("|---|---:|---:|---:|---:|")
	fmt.Printf("| image change -> status.rollout Complete | %s | %s | %s | %d |\n", ms(pct(50)), ms(pct(90)), ms(samples[len(samples)-1]), len(samples))
	fmt.Printf("| sum of minSuccessTimes (the policy's own wait) | %s | | | |\n", ms(floor))
	fmt.Printf("| Flotilla's cost beyond it | %s | %s | %s | |\n", ms(pct(50)-floor), ms(pct(90)-floor), ms(samples[len(samples)-1]-floor))
	return nil
}

// waitComplete polls the MyApp (every 20 ms) until its rollout is Complete
// on image (any image when ""), and returns when it saw that.
func waitComplete(ctx context.Context, c client.Client, app *flotillav1.MyApp, image string, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	last := "no status yet"
	for {
		got := &flotillav1.MyApp{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(app), got); err != nil {
			return time.Time{}, err
		}
		if r := got.Status.Rollout; r != nil {
			last = fmt.Sprintf("phase %s, progress %s: %s", r.Phase, r.Progress, r.Message)
			if (image == "" || got.Spec.Image == image) && r.Phase == flotillav1.RolloutPhaseComplete && r.CurrentRevision == r.TargetRevision && got.Status.ObservedGeneration == got.Generation {
				return time.Now(), nil
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("rollout not Complete after %s (%s)", timeout, last)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }
