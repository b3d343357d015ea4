// Package flowcheck checks a run of the word-count example
// (examples/wordcount) from the topics themselves: it reads the input
// topic "words" to compute what the counts must be, and the output topic
// "word-counts" and the store's changelog to see that every input had its
// effect exactly once.
//
// It is shared by the process tests (stoatflow/test) and the fault-run
// command (cmd/stoatchaos), so it does not import testing: what it finds
// comes back as a Report, and what stops it from looking as an error.
package flowcheck

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The word count's topics and store.
const (
	Input  = "words"       // lines of text
	Output = "word-counts" // key: a word, value: its new count as decimal text
	Store  = "counts"      // the key-value store of the counts
)

// Changelog is the counts store's changelog topic of application app.
func Changelog(app string) string { return app + "-" + Store + "-changelog" }

// maxListed bounds how many words of one kind a Report names.
const maxListed = 5

// ReadAll reads every record of topic up to its end offsets taken now,
// read_committed, keeping control records so that a partition whose tail
// is a transaction marker is seen to its end. It returns the data records
// in partition order. opts are added to the clients' options (SASL, TLS).
// It gives up when ctx ends.
func ReadAll(ctx context.Context, bootstrap, topic string, opts ...kgo.Opt) ([]*kgo.Record, error) {
	seeds := kgo.SeedBrokers(strings.Split(bootstrap, ",")...)
	admCl, err := kgo.NewClient(append([]kgo.Opt{seeds}, opts...)...)
	if err != nil {
		return nil, err
	}
	ends, err := kadm.NewClient(admCl).ListEndOffsets(ctx, topic)
	admCl.Close()
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	if len(left) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{seeds, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []*kgo.Record
	var lastErr error
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			why := ""
			if lastErr != nil {
				why = fmt.Sprintf(" (last fetch error: %v)", lastErr)
			}
			return nil, fmt.Errorf("reading %s: still waiting for partitions %v (partition: end offset)%s: %w", topic, left, why, ctx.Err())
		}
		fs.EachError(func(_ string, _ int32, err error) { lastErr = err })
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if end, ok := left[r.Partition]; ok && r.Offset+1 >= end {
				delete(left, r.Partition)
			}
		})
	}
	// Records past an end offset (written since it was taken) are left
	// out: the caller asked for the topic as it was.
	kept := out[:0]
	for _, r := range out {
		if end := ends[topic][r.Partition].Offset; r.Offset < end {
			kept = append(kept, r)
		}
	}
	return kept, nil
}

// Count is the word count of lines, as the example counts: split on white
// space, lower-cased.
func Count(lines []*kgo.Record) map[string]int64 {
	want := map[string]int64{}
	for _, r := range lines {
		for _, w := range strings.Fields(strings.ToLower(string(r.Value))) {
			want[w]++
		}
	}
	return want
}

// Expected is the word count of everything the input topic holds now,
// and how many lines that is.
func Expected(ctx context.Context, bootstrap string, opts ...kgo.Opt) (map[string]int64, int, error) {
	lines, err := ReadAll(ctx, bootstrap, Input, opts...)
	if err != nil {
		return nil, 0, err
	}
	return Count(lines), len(lines), nil
}

// Report is what CheckExactlyOnce found.
type Report struct {
	// Words is how many distinct words the reference holds, Updates how
	// many committed records the output topic holds and Changelog how many
	// committed records the changelog holds.
	Words, Updates, Changelog int
	// BadWords counts the words whose committed outputs are not exactly
	// 1, 2, ..., n; Unknown the output words no input holds.
	BadWords, Unknown int
	// ChangelogDiffers is set when a replay of the changelog does not
	// give the reference counts.
	ChangelogDiffers bool
	// Problems describes every finding in a sentence (the first few words
	// of each kind by name). Empty when the check passed.
	Problems []string
}

// OK reports whether the check found nothing wrong.
func (r Report) OK() bool { return len(r.Problems) == 0 }

func (r Report) String() string {
	s := fmt.Sprintf("%d words, %d output updates, %d changelog records", r.Words, r.Updates, r.Changelog)
	if r.OK() {
		return s + ": exactly once"
	}
	return s + ": " + strings.Join(r.Problems, "; ")
}

// CheckExactlyOnce checks application app's output and changelog against
// want, the reference count of its input: each word's committed outputs
// are exactly 1, 2, ..., its count (no update lost, none repeated), no
// output names a word the input does not hold, and the changelog's last
// value per word is its count. The error is for a topic that could not be
// read; what is wrong with the data is in the Report.
func CheckExactlyOnce(ctx context.Context, bootstrap, app string, want map[string]int64, opts ...kgo.Opt) (Report, error) {
	rep := Report{Words: len(want)}
	outputs, err := ReadAll(ctx, bootstrap, Output, opts...)
	if err != nil {
		return rep, err
	}
	rep.Updates = len(outputs)
	seqs := map[string][]int64{}
	bad := 0
	for _, r := range outputs {
		n, err := strconv.ParseInt(string(r.Value), 10, 64)
		if err != nil {
			if bad++; bad <= maxListed {
				rep.Problems = append(rep.Problems, fmt.Sprintf("%s: value %q of %q (partition %d, offset %d) is not a decimal count", Output, r.Value, r.Key, r.Partition, r.Offset))
			}
			continue
		}
		seqs[string(r.Key)] = append(seqs[string(r.Key)], n)
	}
	if bad > maxListed {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%s: %d values in all are not decimal counts", Output, bad))
	}
	for _, w := range sortedKeys(want) {
		n, s := want[w], seqs[w]
		ok := int64(len(s)) == n
		for i := 0; ok && i < len(s); i++ {
			ok = s[i] == int64(i+1)
		}
		if !ok {
			if rep.BadWords++; rep.BadWords <= maxListed {
				rep.Problems = append(rep.Problems, fmt.Sprintf("word %q: input holds it %d times; committed output counts %s", w, n, Abbreviate(s)))
			}
		}
	}
	if rep.BadWords > maxListed {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d words in all have outputs other than 1..n", rep.BadWords))
	}
	for _, w := range sortedKeys(seqs) {
		if _, ok := want[w]; !ok {
			if rep.Unknown++; rep.Unknown <= maxListed {
				rep.Problems = append(rep.Problems, fmt.Sprintf("output has word %q that no input holds (counts %s)", w, Abbreviate(seqs[w])))
			}
		}
	}
	if rep.Unknown > maxListed {
		rep.Problems = append(rep.Problems, fmt.Sprintf("%d output words in all are in no input", rep.Unknown))
	}
	changes, err := ReadAll(ctx, bootstrap, Changelog(app), opts...)
	if err != nil {
		return rep, err
	}
	rep.Changelog = len(changes)
	replay := map[string]int64{}
	for _, r := range changes {
		if r.Value == nil {
			delete(replay, string(r.Key))
			continue
		}
		if len(r.Value) != 8 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s: value of %q (partition %d, offset %d) has %d bytes, not an 8-byte count", Changelog(app), r.Key, r.Partition, r.Offset, len(r.Value)))
			continue
		}
		replay[string(r.Key)] = int64(binary.BigEndian.Uint64(r.Value))
	}
	if !Equal(replay, want) {
		rep.ChangelogDiffers = true
		rep.Problems = append(rep.Problems, "changelog replay differs from the input's counts: "+Diff(replay, want))
	}
	return rep, nil
}

// ErrNotServed is what ReadStore answers while the instance does not
// serve queries (starting, restoring, a standby): any answer but 200.
var ErrNotServed = errors.New("the store is not served here")

// ReadStore reads the whole counts store of the instance whose HTTP
// server is at base ("http://127.0.0.1:8080") with GET
// /state/counts?limit=1000000, which answers from committed state.
func ReadStore(ctx context.Context, hc *http.Client, base string) (map[string]int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/state/"+Store+"?limit=1000000", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w (%s)", ErrNotServed, resp.Status)
	}
	var body struct {
		Entries []struct {
			Key   string `json:"key"`
			Value int64  `json:"value"`
		} `json:"entries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("GET /state/%s: %w", Store, err)
	}
	out := make(map[string]int64, len(body.Entries))
	for _, e := range body.Entries {
		out[e.Key] = e.Value
	}
	return out, nil
}

// Equal reports whether two sets of counts are the same.
func Equal(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range b {
		if x, ok := a[k]; !ok || x != v {
			return false
		}
	}
	return true
}

// Diff describes how got differs from want, naming the first ten keys.
func Diff(got, want map[string]int64) string {
	var d []string
	for k, v := range want {
		if x, ok := got[k]; !ok {
			d = append(d, fmt.Sprintf("%s: got none want %d", k, v))
		} else if x != v {
			d = append(d, fmt.Sprintf("%s: got %d want %d", k, x, v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("%s: got %d want none", k, v))
		}
	}
	sort.Strings(d)
	n := len(d)
	if n > 10 {
		d = append(d[:10], fmt.Sprintf("... %d more", n-10))
	}
	return fmt.Sprintf("%d keys, %d differ: %s", len(got), n, strings.Join(d, "; "))
}

// Abbreviate shows a sequence of counts, its ends only when it is long.
func Abbreviate(s []int64) string {
	if len(s) <= 12 {
		return fmt.Sprint(s)
	}
	return fmt.Sprintf("%v ... %v (%d updates)", s[:6], s[len(s)-6:], len(s))
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
