// Command gokaapp is the goka (github.com/lovoo/goka) word count of
// flowbench, at least once as goka always is: lines from --input are split
// into lower-cased words, each sent to the group's loop topic keyed by the
// word (goka's repartition), counted in the group table and every new count
// emitted to --output as decimal text.
//
// goka runs with its defaults (goka.DefaultConfig: sarama, acks=1, snappy,
// 100 ms producer flush, offsets committed by sarama every second) except
// that a new group reads its input from the oldest offset, so that it sees
// the preloaded records.
//
// It prints PROGRESS <unix ms> <n> <s> (words counted, lines read) every 50 ms and
// READY <unix ms> once the processor is running, as flowapp does. With
// --ts-headers the input record's timestamp travels in a header "ts" to the
// output (goka stamps emitted records with the time of the emit), so that
// flowbench can measure end-to-end latency.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
)

var counter, source atomic.Int64

func main() {
	group := flag.String("group", "", "goka group (names the group, its loop and table topics)")
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "bootstrap servers")
	input := flag.String("input", "", "input topic")
	output := flag.String("output", "", "output topic")
	stateDir := flag.String("state-dir", "", "LevelDB directory of the group table")
	tsHeaders := flag.Bool("ts-headers", false, "carry the input timestamp to the output in a header ts")
	flag.Parse()

	cfg := goka.DefaultConfig()
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	goka.ReplaceGlobalConfig(cfg)

	tmc := goka.NewTopicManagerConfig()
	tmc.Table.Replication = 1
	tmc.Stream.Replication = 1

	out := goka.Stream(*output)
	g := goka.DefineGroup(goka.Group(*group),
		goka.Input(goka.Stream(*input), new(codec.String), func(ctx goka.Context, msg any) {
			source.Add(1)
			var opts []goka.ContextOption
			if *tsHeaders {
				ts := binary.BigEndian.AppendUint64(nil, uint64(ctx.Timestamp().UnixMilli()))
				opts = append(opts, goka.WithCtxEmitHeaders(goka.Headers{"ts": ts}))
			}
			for _, w := range strings.Fields(strings.ToLower(msg.(string))) {
				ctx.Loopback(w, "", opts...)
			}
		}),
		goka.Loop(new(codec.String), func(ctx goka.Context, _ any) {
			counter.Add(1)
			var n int64
			if v := ctx.Value(); v != nil {
				n = v.(int64)
			}
			n++
			ctx.SetValue(n)
			var opts []goka.ContextOption
			if ts, ok := ctx.Headers()["ts"]; ok {
				opts = append(opts, goka.WithCtxEmitHeaders(goka.Headers{"ts": ts}))
			}
			ctx.Emit(out, ctx.Key(), strconv.FormatInt(n, 10), opts...)
		}),
		goka.Output(out, new(codec.String)),
		goka.Persist(new(codec.Int64)),
	)
	p, err := goka.NewProcessor(strings.Split(*bootstrap, ","), g,
		goka.WithTopicManagerBuilder(goka.TopicManagerBuilderWithTopicManagerConfig(tmc)),
		goka.WithStorageBuilder(storage.DefaultBuilder(*stateDir)),
	)
	if err != nil {
		log.Fatalf("gokaapp: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		if err := p.WaitForReadyContext(ctx); err == nil {
			fmt.Printf("READY %d\n", time.Now().UnixMilli())
		}
	}()
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				fmt.Printf("PROGRESS %d %d %d\n", now.UnixMilli(), counter.Load(), source.Load())
			}
		}
	}()
	if err := p.Run(ctx); err != nil {
		log.Printf("gokaapp stopped: %v", err)
		os.Exit(1)
	}
}
