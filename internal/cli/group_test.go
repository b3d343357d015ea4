package cli

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
)

func TestBuildAndFormatGroup(t *testing.T) {
	var committed kadm.OffsetResponses
	add := func(topic string, p int32, at int64) {
		if committed == nil {
			committed = kadm.OffsetResponses{}
		}
		if committed[topic] == nil {
			committed[topic] = map[int32]kadm.OffsetResponse{}
		}
		committed[topic][p] = kadm.OffsetResponse{Offset: kadm.Offset{Topic: topic, Partition: p, At: at}}
	}
	add("orders", 0, 40)
	add("orders", 1, 10)
	add("audit", 0, 7)
	ends := kadm.ListedOffsets{"orders": {
		0: {Topic: "orders", Partition: 0, Offset: 42},
		1: {Topic: "orders", Partition: 1, Offset: 10},
		2: {Topic: "orders", Partition: 2, Offset: 5},
	}}
	members := []GroupMember{
		{ID: "m-1", ClientID: "app", Host: "/10.0.0.1", Assigned: map[string][]int32{"orders": {0, 2}}},
		{ID: "m-2", ClientID: "app", Host: "/10.0.0.2", Assigned: map[string][]int32{"orders": {1}}},
	}
	v := BuildGroupView(GroupView{Group: "g", Type: "classic", State: "Stable", Assignor: "range"}, members, committed, ends)
	if v.Members != 2 || len(v.Partitions) != 4 {
		t.Fatalf("view %+v", v)
	}
	var out bytes.Buffer
	FormatGroups(&out, []GroupView{v, {Group: "gone", Err: "GROUP_ID_NOT_FOUND"}})
	want := `Group: g Type: classic State: Stable Members: 2 Assignor: range
GROUP  TOPIC   PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  CONSUMER-ID  HOST       CLIENT-ID
g      audit   0          7               -               -    -            -          -
g      orders  0          40              42              2    m-1          /10.0.0.1  app
g      orders  1          10              10              0    m-2          /10.0.0.2  app
g      orders  2          -               5               -    m-1          /10.0.0.1  app

Group: gone Error: GROUP_ID_NOT_FOUND
`
	if out.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out.String(), want)
	}

	out.Reset()
	FormatGroupList(&out, []kadm.ListedGroup{{Group: "a", GroupType: "consumer", State: "Stable"}, {Group: "b", State: "Empty"}})
	if want := "GROUP  TYPE      STATE\na      consumer  Stable\nb      classic   Empty\n"; out.String() != want {
		t.Fatalf("list:\n%s", out.String())
	}
}

func TestSeekTarget(t *testing.T) {
	for _, c := range []struct {
		to         string
		start, end int64
		want       int64
		err        bool
	}{
		{"start", 5, 20, 5, false},
		{"earliest", 5, 20, 5, false},
		{"end", 5, 20, 20, false},
		{"12", 5, 20, 12, false},
		{"2", 5, 20, 5, false},   // below the log start
		{"99", 5, 20, 20, false}, // past the end
		{"-1", 5, 20, 0, true},
		{"soon", 5, 20, 0, true},
	} {
		got, err := SeekTarget(c.to, c.start, c.end)
		if (err != nil) != c.err || !c.err && got != c.want {
			t.Errorf("SeekTarget(%q, %d, %d) = %d, %v", c.to, c.start, c.end, got, err)
		}
	}
}
