package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/moonmq/moonmq/stoatflow/bench/internal/benchutil"
)

// newer reports whether any file under the roots is newer than target (or
// target is missing).
func newer(target string, roots ...string) bool {
	st, err := os.Stat(target)
	if err != nil {
		return true
	}
	found := false
	for _, r := range roots {
		filepath.Walk(r, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() && fi.ModTime().After(st.ModTime()) {
				found = true
			}
			return nil
		})
	}
	return found
}

// broker is the single-node moonmq that every case runs against.
type broker struct {
	p       *proc
	addr    string
	metrics string
	dataDir string
}

func startBroker(bin, work string) (*broker, error) {
	ports, err := benchutil.FreePorts(2)
	if err != nil {
		return nil, err
	}
	b := &broker{addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), metrics: fmt.Sprintf("127.0.0.1:%d", ports[1]), dataDir: filepath.Join(work, "moonmq-data")}
	if err := os.MkdirAll(b.dataDir, 0o755); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(work, "moonmq.json")
	cfg, _ := json.MarshalIndent(map[string]any{"Server": map[string]any{
		"Host": "127.0.0.1", "Port": ports[0], "MetricsPort": ports[1], "DataDir": b.dataDir, "LogLevel": "info",
	}}, "", "  ")
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return nil, err
	}
	b.p, err = startProc("moonmq", filepath.Join(work, "moonmq.log"), bin, []string{"serve", "--config", cfgPath}, nil)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if b.p.Exited() {
			return nil, fmt.Errorf("moonmq exited while starting:\n%s", b.p.tail(30))
		}
		if strings.Contains(b.p.logText(), "moonmq serving") && metadataOK(b.addr) == nil {
			return b, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("moonmq not ready within 60s:\n%s", b.p.tail(30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func metadataOK(addr string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTimeout(2*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = kadm.NewClient(cl).BrokerMetadata(ctx)
	return err
}

func newAdmin(addr string) (*kgo.Client, *kadm.Client, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return nil, nil, err
	}
	return cl, kadm.NewClient(cl), nil
}

func createTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int) error {
	resp, err := adm.CreateTopic(ctx, int32(partitions), -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for {
		md, err := adm.ListTopics(ctx, topic)
		if err == nil {
			if d, ok := md[topic]; ok && d.Err == nil && len(d.Partitions) == partitions {
				ok := true
				for _, p := range d.Partitions {
					ok = ok && p.Err == nil && p.Leader >= 0
				}
				if ok {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// recordGen makes record i of a data set.
type recordGen func(i int64) (key, value []byte, ts time.Time)

// preload writes n records to topic, record i to partition i%partitions,
// printing a progress line every second.
func preload(ctx context.Context, addr, topic string, partitions int, n int64, gen recordGen, label string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(200000),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		return err
	}
	defer cl.Close()
	start := time.Now()
	var perr error
	var acked int64
	errc := make(chan error, 1)
	last := time.Now()
	for i := int64(0); i < n; i++ {
		k, v, ts := gen(i)
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(i % int64(partitions)), Key: k, Value: v, Timestamp: ts}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
		if time.Since(last) >= time.Second {
			last = time.Now()
			progressf("[preload %s] %s/%s records, %.0f rec/s", label, human(i), human(n), float64(i)/time.Since(start).Seconds())
		}
		select {
		case perr = <-errc:
			return fmt.Errorf("preload %s: %w", topic, perr)
		default:
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case perr = <-errc:
		return fmt.Errorf("preload %s: %w", topic, perr)
	default:
	}
	acked = n
	progressf("[preload %s] %s records in %.1fs (%.0f rec/s)", label, human(acked), time.Since(start).Seconds(), float64(acked)/time.Since(start).Seconds())
	return nil
}

// coverage says how far a group's committed positions are behind the end
// of the topics it reads.
type coverage struct {
	done      bool
	committed int64 // summed over the input topic's partitions
	why       string
}

// covered checks whether group's committed positions reach the end of
// every partition of topics: exactly for input, within slack for the
// others (under exactly-once an application's own internal topic ends
// with a transaction marker its committed position need not pass).
func covered(ctx context.Context, adm *kadm.Client, group, input string, others []string, slack int64) coverage {
	topics := append([]string{input}, others...)
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return coverage{why: err.Error()}
	}
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return coverage{why: err.Error()}
	}
	c := coverage{done: true}
	for _, t := range topics {
		if _, ok := ends[t]; !ok {
			c.done, c.why = false, "no end offsets for "+t
			continue
		}
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			c.done, c.why = false, fmt.Sprintf("%s/%d: %v", o.Topic, o.Partition, o.Err)
			return
		}
		got := int64(0)
		if r, ok := offs.Lookup(o.Topic, o.Partition); ok && r.Err == nil && r.At >= 0 {
			got = r.At
		}
		if o.Topic == input {
			c.committed += got
		}
		need := o.Offset
		if o.Topic != input {
			need -= slack
		}
		if o.Offset > 0 && got < need {
			if c.done {
				c.why = fmt.Sprintf("%s/%d at %d of %d", o.Topic, o.Partition, got, o.Offset)
			}
			c.done = false
		}
	})
	return c
}

func deleteTopics(ctx context.Context, adm *kadm.Client, prefix string) {
	ts, err := adm.ListTopics(ctx)
	if err != nil {
		return
	}
	var del []string
	for _, t := range ts.Names() {
		if strings.HasPrefix(t, prefix) {
			del = append(del, t)
		}
	}
	if len(del) > 0 {
		adm.DeleteTopics(ctx, del...)
	}
}
