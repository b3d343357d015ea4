package broker

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/moonmq/moonmq/internal/cluster/meta"
	"github.com/moonmq/moonmq/internal/cluster/metanode"
)

// Draining a group before it is removed (docs/CLUSTER.md, "Removing a
// group"): the cluster-wide broker config meta.DrainingGroupsConfig,
// altered with IncrementalAlterConfigs on the broker resource "" as
// Kafka's cluster-wide dynamic broker configs are, lists the groups being
// drained. The metadata log then places no new partition on them and
// refuses moves to them; `moonmq cluster drain` and Cluster.AutoBalance
// move every partition they own, the coordinators' included, to the
// other groups.

// The ConfigResourceType values this broker alters.
const (
	resourceTopic  = int8(kmsg.ConfigResourceTypeTopic)
	resourceBroker = int8(kmsg.ConfigResourceTypeBroker)
)

// clusterConfigs are the cluster-wide broker configs cluster mode alters.
var clusterConfigs = map[string]topicConfigSpec{
	meta.DrainingGroupsConfig: {list: true, doc: "Replication groups being drained before removal: they take no new partition, and balancing moves all of theirs away."},
}

// alterClusterConfigs edits the cluster-wide broker configs through the
// metadata log.
func (c *clusterMode) alterClusterConfigs(edit func(map[string]string) error, validateOnly bool) (int16, string) {
	var cur map[string]string
	c.node.Read(func(s *meta.State, _ uint64) { cur = s.Configs(meta.ResourceBroker, "") })
	next := map[string]string{}
	for k, v := range cur {
		if _, ok := clusterConfigs[k]; ok {
			next[k] = v
		}
	}
	if err := edit(next); err != nil {
		return errInvalidConfig, err.Error()
	}
	v := c.current()
	for k, val := range next {
		if k != meta.DrainingGroupsConfig {
			continue
		}
		groups := meta.ParseGroupList(val)
		for _, g := range groups {
			if _, ok := v.groups[g]; !ok {
				return errInvalidConfig, fmt.Sprintf("%s: no replication group %q in this cluster", k, g)
			}
		}
		if len(groups) >= len(v.groups) {
			return errInvalidConfig, fmt.Sprintf("%s: draining every group (%s) would leave the partitions nowhere to go", k, strings.Join(groups, ", "))
		}
		next[k] = strings.Join(groups, ",")
	}
	if validateOnly {
		return 0, ""
	}
	for _, k := range slices.Sorted(maps.Keys(clusterConfigs)) {
		if cur[k] == next[k] {
			continue
		}
		sc := &metanode.SetConfig{ResourceType: meta.ResourceBroker, ResourceName: "", Key: k, Value: next[k]}
		if _, err := c.propose(c.b.ctx, metanode.Command{SetConfig: sc}); err != nil {
			return metanode.ErrorCode(err), err.Error()
		}
		c.log.Info("cluster mode: cluster-wide config changed", "key", k, "value", next[k])
	}
	return 0, ""
}
