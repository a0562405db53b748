package builder

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	schedv1alpha1 "github.com/celsched/celsched/api/v1alpha1"
)

// Cluster is a generated cluster, for impact's benchmarks and the dumps
// of hack/impactdump.
type Cluster struct {
	Nodes      []*corev1.Node
	Namespaces []*corev1.Namespace
	Pods       []*corev1.Pod
	// ConfigMaps are the tenants' params objects.
	ConfigMaps []*corev1.ConfigMap
	// Live are the policies in force.
	Live []*schedv1alpha1.SchedulingPolicy
}

// clusterNamespaces is how many namespaces a LargeCluster has; the even
// ones are tenants.
const clusterNamespaces = 30

var clusterZones = []string{"a", "b", "c"}

// LargeCluster generates nodes in three zones, 30 namespaces (each with a
// home zone; the even ones are tenants with a placement ConfigMap naming
// two zones), and pods spread over the namespaces: the first pending ones
// unbound, the others bound to a node of their namespace's zone or the
// next. The live policies keep each namespace out of zone c unless it is
// at home there (home-zones), prefer the home zone (prefer-home), and keep
// the tenants' pods in the zones of their ConfigMap (tenant-zones,
// parameterized).
func LargeCluster(nodes, pods, pending int) *Cluster {
	c := &Cluster{}
	for i := range nodes {
		name := fmt.Sprintf("node-%05d", i)
		c.Nodes = append(c.Nodes, st.MakeNode().Name(name).Label(corev1.LabelHostname, name).Label(corev1.LabelTopologyZone, clusterZones[i%3]).
			Capacity(map[corev1.ResourceName]string{corev1.ResourceCPU: "4", corev1.ResourceMemory: "8Gi", corev1.ResourcePods: "110"}).Obj())
	}
	for i := range clusterNamespaces {
		name := fmt.Sprintf("team-%02d", i)
		labels := map[string]string{corev1.LabelMetadataName: name, "zone": clusterZones[i%3]}
		if i%2 == 0 {
			labels["tenant"] = "true"
			c.ConfigMaps = append(c.ConfigMaps, &corev1.ConfigMap{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
				ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: "placement"},
				Data:       map[string]string{"zones": clusterZones[i%3] + "," + clusterZones[(i+1)%3]},
			})
		}
		c.Namespaces = append(c.Namespaces, &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}})
	}
	for i := range pods {
		ns := fmt.Sprintf("team-%02d", i%clusterNamespaces)
		nodeName := ""
		if i >= pending {
			// on a node of the namespace's zone or the next one
			nodeName = c.Nodes[(i%clusterNamespaces%3+i/clusterNamespaces%2+3*(i/7))%nodes].Name
		}
		name := fmt.Sprintf("p-%05d", i)
		c.Pods = append(c.Pods, st.MakePod().Namespace(ns).Name(name).UID("uid-"+ns+"-"+name).SchedulerName("celsched").
			Labels(map[string]string{"app": fmt.Sprintf("app-%d", i%100)}).Node(nodeName).
			Req(map[corev1.ResourceName]string{corev1.ResourceCPU: "100m"}).Obj())
	}
	c.Live = []*schedv1alpha1.SchedulingPolicy{
		MakePolicy("home-zones").Condition("labelled", "has(namespaceObject.metadata.labels) && 'zone' in namespaceObject.metadata.labels").
			Filter("zone", "node.metadata.labels['"+corev1.LabelTopologyZone+"'] != 'c' || namespaceObject.metadata.labels['zone'] == 'c'").Obj(),
		MakePolicy("prefer-home").Score("home",
			"node.metadata.labels['"+corev1.LabelTopologyZone+"'] == namespaceObject.metadata.?labels[?'zone'].orValue('') ? 100 : 0", 1, schedv1alpha1.None).Obj(),
		tenantZones("node.metadata.labels['" + corev1.LabelTopologyZone + "'] in params.data['zones'].split(',')"),
	}
	return c
}

// HomeZonesDraft changes home-zones, which every pod matches: namespaces
// only in their home zone, or anywhere for those at home in b.
func HomeZonesDraft() *schedv1alpha1.SchedulingPolicy {
	return MakePolicy("home-zones").Condition("labelled", "has(namespaceObject.metadata.labels) && 'zone' in namespaceObject.metadata.labels").
		Filter("zone", "node.metadata.labels['"+corev1.LabelTopologyZone+"'] == namespaceObject.metadata.labels['zone'] || namespaceObject.metadata.labels['zone'] == 'b'").Obj()
}

// TenantZonesDraft changes tenant-zones, which the tenants' pods (half of
// them) match: only the first zone of their ConfigMap.
func TenantZonesDraft() *schedv1alpha1.SchedulingPolicy {
	return tenantZones("node.metadata.labels['" + corev1.LabelTopologyZone + "'] == params.data['zones'].split(',')[0]")
}

func tenantZones(filter string) *schedv1alpha1.SchedulingPolicy {
	return MakePolicy("tenant-zones").NamespaceLabels(map[string]string{"tenant": "true"}).
		ParamKind("v1", "ConfigMap").ParamRef("placement", "", schedv1alpha1.DenyAction).Filter("zone", filter).Obj()
}
