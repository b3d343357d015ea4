// Command startup measures how long a broker that was just started takes
// to serve a topic of many partitions: from its own start (run it right
// after starting the broker) until Metadata names a leader for every
// partition of the topic and an acks=all produce to its last partition is
// acknowledged. bench/startup.sh runs it after a clean stop and after
// kill -9, for MoonMQ and Apache Kafka.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "comma-separated seed brokers")
	prefix := flag.String("topic-prefix", "startup", "the topic's name begins with this")
	partitions := flag.Int("partitions", 10000, "partitions the topic must have, each with a leader")
	timeout := flag.Duration("timeout", 30*time.Minute, "give up after this long")
	label := flag.String("name", "", "label printed with the result")
	flag.Parse()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	progress := time.NewTicker(5 * time.Second)
	defer progress.Stop()
	state := "connecting"
	for ctx.Err() == nil {
		var done bool
		done, state = ready(ctx, *brokers, *prefix, *partitions)
		if done {
			secs := time.Since(start).Seconds()
			out, _ := json.Marshal(map[string]any{"name": *label, "ready_seconds": secs, "partitions": *partitions})
			fmt.Println(string(out))
			return
		}
		select {
		case <-progress.C:
			fmt.Fprintf(os.Stderr, "\r%s: %.0fs, %s   ", *label, time.Since(start).Seconds(), state)
		case <-time.After(100 * time.Millisecond):
		}
	}
	fmt.Fprintf(os.Stderr, "\nstartup: not ready within %v: %s\n", *timeout, state)
	os.Exit(1)
}

// ready reports whether the topic is served, and if not what is missing.
func ready(ctx context.Context, brokers, prefix string, want int) (bool, string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordDeliveryTimeout(5*time.Second), kgo.RequestTimeoutOverhead(5*time.Second))
	if err != nil {
		return false, err.Error()
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	md, err := kadm.NewClient(cl).Metadata(rctx)
	if err != nil {
		return false, "metadata: " + err.Error()
	}
	for name, t := range md.Topics {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		led := 0
		for _, p := range t.Partitions {
			if p.Leader >= 0 && p.Err == nil {
				led++
			}
		}
		if led < want {
			return false, fmt.Sprintf("%d of %d partitions with a leader", led, want)
		}
		r := &kgo.Record{Topic: name, Partition: int32(want - 1), Value: []byte("startup probe")}
		if err := cl.ProduceSync(rctx, r).FirstErr(); err != nil {
			return false, "produce: " + err.Error()
		}
		return true, ""
	}
	return false, "no topic named " + prefix + "*"
}
