//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	flotillav1 "github.com/flotilla-dev/flotilla/api/v1alpha1"
)

// dumpIfFailed writes, when t failed, the spec's objects from every
// cluster and the hub and agent logs under in.ArtifactsDir (in a
// subfolder label, when not empty):
//
//	hub/      myapps, works (of the spec's MyApps, in every cluster
//	          namespace), memberclusters, events, leases (flotilla-system)
//	<member>/ deployments, replicasets, pods, events, leases, nodes
//	logs/     the hub's and agents' logs
//
// A cluster that does not answer (a stopped member) leaves a .error file
// instead.
func dumpIfFailed(t *testing.T, in SpecInput, label string) {
	t.Helper()
	if !t.Failed() {
		return
	}
	dir := in.ArtifactsDir
	if label != "" {
		dir = filepath.Join(dir, label)
	}
	dumpClusters(in.Provider, in.Namespace, dir)
	t.Logf("the state of every cluster and the hub and agent logs are in %s", dir)
}

// dumpClusters writes the objects of namespace (every namespace when
// empty) from every cluster, and the logs, into dir.
func dumpClusters(p ClusterProvider, namespace, dir string) {
	ns := []client.ListOption{}
	var works []client.ListOption
	if namespace != "" {
		ns = append(ns, client.InNamespace(namespace))
		works = append(works, client.MatchingLabels{flotillav1.LabelMyAppNamespace: namespace})
	}
	system := []client.ListOption{client.InNamespace(systemNamespace)}
	hub := filepath.Join(dir, "hub")
	dumpList(p.Hub(), &flotillav1.MyAppList{}, filepath.Join(hub, "myapps.json"), ns...)
	dumpList(p.Hub(), &flotillav1.WorkList{}, filepath.Join(hub, "works.json"), works...)
	dumpList(p.Hub(), &flotillav1.MemberClusterList{}, filepath.Join(hub, "memberclusters.json"))
	dumpList(p.Hub(), &corev1.EventList{}, filepath.Join(hub, "events.json"), ns...)
	dumpList(p.Hub(), &coordinationv1.LeaseList{}, filepath.Join(hub, "leases.json"), system...)
	for _, m := range p.MemberNames() {
		c := p.Member(m)
		md := filepath.Join(dir, m)
		dumpList(c, &appsv1.DeploymentList{}, filepath.Join(md, "deployments.json"), ns...)
		dumpList(c, &appsv1.ReplicaSetList{}, filepath.Join(md, "replicasets.json"), ns...)
		dumpList(c, &corev1.PodList{}, filepath.Join(md, "pods.json"), ns...)
		dumpList(c, &corev1.EventList{}, filepath.Join(md, "events.json"), ns...)
		dumpList(c, &coordinationv1.LeaseList{}, filepath.Join(md, "leases.json"), system...)
		dumpList(c, &corev1.NodeList{}, filepath.Join(md, "nodes.json"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.CollectLogs(ctx, filepath.Join(dir, "logs")); err != nil {
		writeFile(filepath.Join(dir, "logs", "collect.error"), []byte(err.Error()+"\n"))
	}
}

// dumpList lists into list and writes it as indented JSON to path,
// without managed fields; or the error to path.error.
func dumpList(c client.Client, list client.ObjectList, path string, opts ...client.ListOption) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.List(ctx, list, opts...); err != nil {
		writeFile(path+".error", []byte(err.Error()+"\n"))
		return
	}
	items, _ := meta.ExtractList(list)
	for _, o := range items {
		if obj, ok := o.(client.Object); ok {
			obj.SetManagedFields(nil)
		}
	}
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		writeFile(path+".error", []byte(err.Error()+"\n"))
		return
	}
	writeFile(path, append(b, '\n'))
}

func writeFile(path string, b []byte) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: writing %s: %v\n", path, err)
		return
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: writing %s: %v\n", path, err)
	}
}
