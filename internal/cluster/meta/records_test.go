package meta

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func sampleRecords() []Record {
	return []Record{
		RegisterBrokerRecord{BrokerID: 4, GroupID: "g2", IncarnationID: testID(9), ClientAddress: "10.0.0.4:9092", ReplicationAddress: "10.0.0.4:9095", LeaseExpiryMs: 1700000000000},
		TopicRecord{Name: "orders", TopicID: testID(1)},
		RemoveTopicRecord{Name: "orders", TopicID: testID(1)},
		PartitionRecord{TopicID: testID(1), Partition: 3, Owner: "g1", EpochBase: 2},
		PartitionChangeRecord{TopicID: testID(1), Partition: 3, Owner: "g2", EpochBase: -4, Move: MoveCutOver, Source: "g1", Target: "g2", FenceEpoch: 7, FenceOffset: 1234},
		ConfigRecord{ResourceType: ResourceTopic, ResourceName: "orders", Name: "retention.ms", Value: "1000"},
		ProducerIdsRecord{BrokerID: 4, NextProducerID: 3000},
		GroupStateRecord{GroupID: "g1", Leader: 2, Term: 5, ISR: []int32{1, 2, 3}},
		SecurityRecord{Store: SecurityACLs, Key: []byte{0, 1, 'k'}, Value: []byte("v")},
	}
}

// TestRecordRoundTrip: every record type comes back from its envelope as
// it went in, alone and in a batch.
func TestRecordRoundTrip(t *testing.T) {
	recs := sampleRecords()
	seen := map[RecordType]bool{}
	for _, r := range recs {
		b, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Fatalf("decoded %#v from %s, want %#v", got, b, r)
		}
		if !strings.HasPrefix(string(b), `{"type":"`+string(r.Type())+`","record":{`) {
			t.Fatalf("envelope %s", b)
		}
		seen[r.Type()] = true
	}
	if len(seen) != 9 {
		t.Fatalf("%d record types covered", len(seen))
	}
	b, err := EncodeBatch(recs)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, recs) {
		t.Fatalf("batch decoded as %#v", got)
	}
}

// TestRecordJSON pins the encoding: other versions of the broker read
// these bytes from the log.
func TestRecordJSON(t *testing.T) {
	for _, c := range []struct {
		r    Record
		want string
	}{
		{TopicRecord{Name: "a", TopicID: testID(1)}, `{"type":"TopicRecord","record":{"name":"a","topicId":"AAAAAAAAAAAAAAAAAAAAAQ"}}`},
		{PartitionChangeRecord{TopicID: testID(1), Partition: 0, Owner: "g1", Move: MoveCopying, Source: "g1", Target: "g2"},
			`{"type":"PartitionChangeRecord","record":{"topicId":"AAAAAAAAAAAAAAAAAAAAAQ","partition":0,"ownerGroup":"g1","epochBase":0,"moveState":"copying","sourceGroup":"g1","targetGroup":"g2"}}`},
		{PartitionChangeRecord{TopicID: testID(1), Partition: 0, Owner: "g1", Move: MoveNone, MoveSeq: 2},
			`{"type":"PartitionChangeRecord","record":{"topicId":"AAAAAAAAAAAAAAAAAAAAAQ","partition":0,"ownerGroup":"g1","epochBase":0,"moveState":"none","moveSeq":2}}`},
		{ConfigRecord{ResourceType: ResourceBroker, ResourceName: "", Name: "k"}, `{"type":"ConfigRecord","record":{"resourceType":"broker","resourceName":"","name":"k"}}`},
		{GroupStateRecord{GroupID: "g1", Leader: 1, Term: 2, ISR: []int32{1}}, `{"type":"GroupStateRecord","record":{"groupId":"g1","leader":1,"term":2,"isr":[1]}}`},
		{SecurityRecord{Store: SecurityUsers, Key: []byte("u"), Value: []byte{1}}, `{"type":"SecurityRecord","record":{"store":"users","key":"dQ==","value":"AQ=="}}`},
		{SecurityRecord{Store: SecurityACLs, Key: []byte("a")}, `{"type":"SecurityRecord","record":{"store":"acls","key":"YQ=="}}`},
	} {
		b, err := Encode(c.r)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != c.want {
			t.Errorf("got  %s\nwant %s", b, c.want)
		}
	}
}

type bogusRecord struct{}

func (bogusRecord) Type() RecordType { return "BogusRecord" }

func TestDecodeRefuses(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{``, "EOF"},
		{`{`, "unexpected EOF"},
		{`[]`, "cannot unmarshal array"},
		{`{"type":"BogusRecord","record":{}}`, `unknown type "BogusRecord"`},
		{`{"record":{}}`, `unknown type ""`},
		{`{"type":"TopicRecord"}`, "no record"},
		{`{"type":"TopicRecord","record":null}`, "no record"},
		{`{"type":"TopicRecord","record":{"name":"a","topicId":"AAAAAAAAAAAAAAAAAAAAAQ","extra":1}}`, `unknown field "extra"`},
		{`{"type":"TopicRecord","record":{},"extra":1}`, `unknown field "extra"`},
		{`{"type":"TopicRecord","record":{"name":7}}`, "cannot unmarshal number"},
		{`{"type":"TopicRecord","record":{"topicId":"AAAA"}}`, "want 16"},
		{`{"type":"TopicRecord","record":{"topicId":"!!"}}`, "illegal base64"},
		{`{"type":"TopicRecord","record":{}} {}`, "data after"},
		{`{"type":"TopicRecord","record":{} }x`, "data after"},
		{`{"type":"TopicRecord","record":[]}`, "cannot unmarshal array"},
		{`{"type":"PartitionRecord","record":{"partition":3000000000}}`, "cannot unmarshal number 3000000000"},
	} {
		r, err := Decode([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode(%s) = %#v, %v; want an error with %q", c.in, r, err, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{`[]`, "empty"},
		{`{}`, "cannot unmarshal object"},
		{`[{"type":"TopicRecord","record":{}},{"type":"X","record":{}}]`, "entry 1"},
		{`[{"type":"TopicRecord","record":{}}] 1`, "data after"},
	} {
		if _, err := DecodeBatch([]byte(c.in)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodeBatch(%s) = %v; want an error with %q", c.in, err, c.want)
		}
	}
	if _, err := Encode(nil); err == nil {
		t.Error("Encode(nil) succeeded")
	}
	if _, err := Encode(bogusRecord{}); err == nil {
		t.Error("Encode of a foreign record type succeeded")
	}
	if err := New().Apply(bogusRecord{}); !errors.Is(err, kerr.InvalidRequest) {
		t.Errorf("Apply of a foreign record type: %v", err)
	}
}

// TestDecodeCorrupt: truncated and bit-flipped entries decode to an error
// or to some record, never to a panic.
func TestDecodeCorrupt(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	batch, err := EncodeBatch(sampleRecords())
	if err != nil {
		t.Fatal(err)
	}
	inputs := [][]byte{batch}
	for _, r := range sampleRecords() {
		b, _ := Encode(r)
		inputs = append(inputs, b)
	}
	errs := 0
	for i := range 5000 {
		in := inputs[i%len(inputs)]
		b := append([]byte(nil), in[:rng.IntN(len(in)+1)]...)
		if rng.IntN(2) == 0 {
			b = append([]byte(nil), in...)
			for range 1 + rng.IntN(3) {
				b[rng.IntN(len(b))] = byte(rng.IntN(256))
			}
		}
		_, err1 := Decode(b)
		_, err2 := DecodeBatch(b)
		if err1 != nil && err2 != nil {
			errs++
		}
	}
	if errs < 1000 {
		t.Fatalf("only %d of 5000 corrupt entries refused", errs)
	}
}

func FuzzDecode(f *testing.F) {
	for _, r := range sampleRecords() {
		b, _ := Encode(r)
		f.Add(b)
	}
	b, _ := EncodeBatch(sampleRecords())
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := Decode(b); err == nil {
			// What decodes re-encodes to something that decodes the same.
			again, err := Encode(r)
			if err != nil {
				t.Fatal(err)
			}
			if r2, err := Decode(again); err != nil || !reflect.DeepEqual(r, r2) {
				t.Fatalf("%s re-decoded as %#v, %v", again, r2, err)
			}
			_ = New().Apply(r)
		}
		if rs, err := DecodeBatch(b); err == nil {
			_ = New().ApplyBatch(rs)
		}
	})
}

func TestUUID(t *testing.T) {
	u := UUID{0: 0xfb, 15: 0xff}
	v, err := ParseUUID(u.String())
	if err != nil || v != u {
		t.Fatalf("ParseUUID(%s) = %v, %v", u, v, err)
	}
	if u.String() != "-wAAAAAAAAAAAAAAAAAA_w" {
		t.Fatalf("UUID form %s", u)
	}
	if !(UUID{}).IsZero() || u.IsZero() {
		t.Fatal("IsZero")
	}
}

func TestErrorCode(t *testing.T) {
	_, err := New().DeleteTopic("a")
	if ErrorCode(err) != kerr.UnknownTopicOrPartition.Code || !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("ErrorCode(%v) = %d", err, ErrorCode(err))
	}
	if ErrorCode(nil) != 0 || ErrorCode(errors.New("x")) != kerr.UnknownServerError.Code {
		t.Fatal("ErrorCode of nil or a plain error")
	}
}

// TestSecurityRecords: a security store keeps each key's latest value, an
// empty value deletes the key, and records outside the stores or the
// bounds are refused without a change.
func TestSecurityRecords(t *testing.T) {
	s := New()
	for _, r := range []SecurityRecord{
		{Store: SecurityACLs, Key: []byte("a"), Value: []byte("1")},
		{Store: SecurityACLs, Key: []byte("a"), Value: []byte("2")},
		{Store: SecurityACLs, Key: []byte("b"), Value: []byte("3")},
		{Store: SecurityACLs, Key: []byte("b")},
		{Store: SecurityACLs, Key: []byte("never")},
		{Store: SecurityUsers, Key: []byte("u"), Value: []byte("4")},
	} {
		if err := s.Apply(r); err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
	}
	if got := s.Security(SecurityACLs); !reflect.DeepEqual(got, map[string][]byte{"a": []byte("2")}) {
		t.Fatalf("acls %q", got)
	}
	if got := s.Security(SecurityUsers); !reflect.DeepEqual(got, map[string][]byte{"u": []byte("4")}) {
		t.Fatalf("users %q", got)
	}
	s.Security(SecurityACLs)["a"][0] = 'x'
	if s.Security(SecurityACLs)["a"][0] != '2' {
		t.Fatal("Security aliases the state")
	}
	for _, r := range []SecurityRecord{
		{Store: "quotas", Key: []byte("a"), Value: []byte("1")},
		{Store: SecurityACLs, Value: []byte("1")},
		{Store: SecurityACLs, Key: make([]byte, MaxSecurityKeyBytes+1), Value: []byte("1")},
		{Store: SecurityACLs, Key: []byte("a"), Value: make([]byte, MaxSecurityValueBytes+1)},
	} {
		before := s.Snapshot()
		if err := s.Apply(r); err == nil {
			t.Fatalf("store %q key of %d bytes value of %d bytes: accepted", r.Store, len(r.Key), len(r.Value))
		}
		if !reflect.DeepEqual(s.Snapshot(), before) {
			t.Fatal("a refused record changed the state")
		}
	}
}
