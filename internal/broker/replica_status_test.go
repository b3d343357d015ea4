package broker

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/moonmq/moonmq/internal/replication/raftgroup"
	"github.com/moonmq/moonmq/internal/replication/shipping"
)

// fillWire sets every JSON-visible field of the struct v points to to a
// distinct non-zero value, so that a copy that drops a field shows.
func fillWire(t *testing.T, v any) {
	t.Helper()
	rv := reflect.ValueOf(v).Elem()
	for i := 0; i < rv.NumField(); i++ {
		f, sf := rv.Field(i), rv.Type().Field(i)
		if sf.Tag.Get("json") == "-" {
			continue
		}
		n := i + 1
		switch f.Kind() {
		case reflect.String:
			f.SetString(sf.Name)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Int:
			f.SetInt(int64(n))
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
			f.SetUint(uint64(n))
		case reflect.Slice:
			s := reflect.MakeSlice(f.Type(), 1, 1)
			switch e := s.Index(0); e.Kind() {
			case reflect.String:
				e.SetString(sf.Name)
			case reflect.Int32:
				e.SetInt(int64(n))
			default:
				t.Fatalf("%s.%s: fillWire knows no %s", rv.Type(), sf.Name, f.Type())
			}
			f.Set(s)
		default:
			t.Fatalf("%s.%s: fillWire knows no %s", rv.Type(), sf.Name, f.Type())
		}
	}
}

func sameJSON(t *testing.T, want, got any) {
	t.Helper()
	w, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	g, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if string(w) != string(g) {
		t.Fatalf("the status document's copy differs from the %T it copies:\n got %s\nwant %s", want, g, w)
	}
}

// TestStatusCopiesEveryField: the replication status document carries a
// follower's shipping state and a failover replica's Raft view as the
// shared wire types of internal/status; the copy must keep every field
// those write to JSON, byte for byte, so a field added to shipping.Status
// or raftgroup.Status fails here until the wire type has it too.
func TestStatusCopiesEveryField(t *testing.T) {
	var fs shipping.Status
	fillWire(t, &fs)
	sameJSON(t, fs, followerStatus(fs))
	var rs raftgroup.Status
	fillWire(t, &rs)
	sameJSON(t, rs, raftStatus(rs))
}
