package broker

import (
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleDescribeLogDirs answers DescribeLogDirs (v0-4) for this broker's
// one log directory, <DataDir>/topics: the size of every partition asked
// for (all of them when Topics is null), and from v4 the file system's
// total and usable bytes. Tools such as kafka-log-dirs.sh and the web UIs
// show topic sizes from it. Every replica answers for its own copy, as
// every Kafka broker answers for its own disks; OffsetLag is 0 (it
// measures only "future" replicas moving between directories, which
// MoonMQ does not have).
func (b *Broker) handleDescribeLogDirs(r *kmsg.DescribeLogDirsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.DescribeLogDirsResponse)
	dir := kmsg.NewDescribeLogDirsResponseDir()
	dir.Dir = b.topicsDir()
	if abs, err := filepath.Abs(dir.Dir); err == nil {
		dir.Dir = abs
	}
	dir.TotalBytes, dir.UsableBytes = -1, -1
	var st unix.Statfs_t
	if err := unix.Statfs(dir.Dir, &st); err == nil {
		dir.TotalBytes = int64(st.Blocks) * int64(st.Bsize)
		dir.UsableBytes = int64(st.Bavail) * int64(st.Bsize)
	}
	add := func(t *topic, parts []int32) {
		out := kmsg.NewDescribeLogDirsResponseDirTopic()
		out.Topic = t.name
		for _, i := range parts {
			if i < 0 || int(i) >= len(t.partitions) {
				continue // not hosted here: left out, as Kafka does
			}
			p := kmsg.NewDescribeLogDirsResponseDirTopicPartition()
			p.Partition = i
			p.Size = t.partitions[i].Log().Size()
			out.Partitions = append(out.Partitions, p)
		}
		if len(out.Partitions) > 0 {
			dir.Topics = append(dir.Topics, out)
		}
	}
	if r.Topics == nil {
		for _, t := range b.sortedTopics() {
			if secretTopic(t.name) {
				continue
			}
			all := make([]int32, len(t.partitions))
			for i := range all {
				all[i] = int32(i)
			}
			add(t, all)
		}
	} else {
		for _, rt := range r.Topics {
			if t := b.lookup(rt.Topic); t != nil && !secretTopic(t.name) {
				add(t, rt.Partitions)
			}
		}
	}
	resp.Dirs = append(resp.Dirs, dir)
	return resp
}
