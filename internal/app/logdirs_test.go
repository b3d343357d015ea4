package app_test

import (
	"path/filepath"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDescribeLogDirs checks DescribeLogDirs through kadm: one directory,
// <DataDir>/topics, with every partition's size on disk, and the file
// system's total and usable bytes.
func TestDescribeLogDirs(t *testing.T) {
	dir := t.TempDir()
	in := startBroker(t, dir)
	createTopic(t, in.Addr(), "sized", 2, nil)
	createTopic(t, in.Addr(), "empty", 1, nil)
	prod := client(t, in.Addr(), kgo.DefaultProduceTopic("sized"), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	for i := 0; i < 100; i++ {
		if err := prod.ProduceSync(ctxT(t), &kgo.Record{Partition: 0, Value: make([]byte, 1000)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	adm := kadm.NewClient(client(t, in.Addr()))
	all, err := adm.DescribeAllLogDirs(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 {
		t.Fatalf("log dirs of %d brokers: %+v", len(all), all)
	}
	var node int32
	var dirs kadm.DescribedLogDirs
	for id, ds := range all {
		node, dirs = id, ds
	}
	if len(dirs) != 1 {
		t.Fatalf("log dirs: %+v", all)
	}
	want := filepath.Join(dir, "topics")
	d, ok := dirs[want]
	if !ok || d.Err != nil {
		t.Fatalf("no log dir %s: %+v", want, dirs)
	}
	if d.TotalBytes <= 0 || d.UsableBytes <= 0 || d.UsableBytes > d.TotalBytes {
		t.Fatalf("total %d usable %d", d.TotalBytes, d.UsableBytes)
	}
	size := func(topic string, p int32) int64 {
		t.Helper()
		ps, ok := d.Topics[topic]
		if !ok {
			t.Fatalf("topic %s missing: %+v", topic, d.Topics)
		}
		pd, ok := ps[p]
		if !ok {
			t.Fatalf("%s-%d missing", topic, p)
		}
		return pd.Size
	}
	// 100 records of 1000 bytes, one batch each: more than 100 kB.
	if s := size("sized", 0); s < 100_000 || s > 200_000 {
		t.Fatalf("sized-0 is %d bytes", s)
	}
	if s := size("sized", 1); s != 0 {
		t.Fatalf("sized-1 is %d bytes, want 0", s)
	}
	if s := size("empty", 0); s != 0 {
		t.Fatalf("empty-0 is %d bytes", s)
	}
	// Asking for one partition answers for that one only; unknown ones
	// are left out.
	one, err := adm.DescribeBrokerLogDirs(ctxT(t), node, kadm.TopicsSet{"sized": {0: {}, 7: {}}, "nope": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	od := one[want]
	if len(od.Topics) != 1 || len(od.Topics["sized"]) != 1 {
		t.Fatalf("one partition asked: %+v", od.Topics)
	}
}
