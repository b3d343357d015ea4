package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Mode is how a case's producer issues records.
type Mode string

const (
	// ModePipelined produces asynchronously with many records in flight and
	// measures latency from the Produce call to the promise callback.
	ModePipelined Mode = "pipelined"
	// ModeOneAtATime produces one record synchronously after another, so
	// exactly one record is ever in flight.
	ModeOneAtATime Mode = "one-at-a-time"
	// ModeTransactional produces pipelined inside transactions of TxnSize
	// records each (begin, produce, flush, commit), with acks=-1.
	ModeTransactional Mode = "transactional"
	// ModeEndToEnd produces at a fixed rate (Rate) while a consumer
	// long-polls the topic, and measures each record's latency from the
	// Produce call to the consumer.
	ModeEndToEnd Mode = "end-to-end"
	// ModeTransform fills the case's topic (pipelined, acks=-1) and then
	// measures --producers GroupTransactSessions copying it to a second
	// topic, each poll's records in one transaction that also commits the
	// group's offsets (Kafka's exactly-once consume-transform-produce).
	ModeTransform Mode = "consume-transform-produce"
)

// DefaultMaxBuffered is the default bound on records in flight in pipelined
// mode: enough for several full produce requests per broker without turning
// latency into a measure of queue length.
const DefaultMaxBuffered = 8192

// Config is the parsed command line of `moonmq bench`.
type Config struct {
	Brokers          []string      // seed brokers, host:port
	Name             string        // label of the target in reports, e.g. "moonmq"
	TopicPrefix      string        // prefix of every topic the run creates
	RunID            string        // unique part of topic names for this run
	Records          int64         // records per case; 0 means use Duration
	Duration         time.Duration // produce time per case when Records is 0
	RecordSize       int           // value size of every record in bytes
	Acks             []int         // acks values to run: -1, 0 or 1
	Partitions       []int         // partition counts to run
	Modes            []Mode        // produce modes to run
	JSONPath         string        // where to write the JSON report; "" for none
	NoCreate         bool          // do not create (or delete) topics
	KeepTopics       bool          // do not delete topics after each case
	Linger           time.Duration // producer linger
	MaxBuffered      int           // max records buffered in the pipelined producer
	TxnSize          int           // records per transaction in transactional mode
	Producers        int           // producer clients run at once in every case
	MaxInflight      int           // produce requests in flight per broker when idempotency is off
	Partitioner      string        // "roundrobin", "sticky" or "uniform"
	ConsumeTimeout   time.Duration // give up consuming after this long without progress
	ProgressInterval time.Duration // how often the progress line is refreshed
	NoConsume        bool          // skip the consume phase
	BrokerPIDs       []int         // broker processes whose CPU and memory each case reports (Linux)
	Rate             int           // records per second in end-to-end mode
}

// caseSpec is one point of the acks × partitions × mode matrix.
type caseSpec struct {
	Acks       int
	Partitions int
	Mode       Mode
}

// label is the human-readable name of a case, also used in JSON reports.
func (c caseSpec) label() string {
	return fmt.Sprintf("acks=%d p=%d %s", c.Acks, c.Partitions, c.Mode)
}

// cases expands the configuration into the ordered list of cases to run.
func (cfg *Config) cases() []caseSpec {
	var out []caseSpec
	for _, a := range cfg.Acks {
		for _, p := range cfg.Partitions {
			for _, m := range cfg.Modes {
				if (m == ModeTransactional || m == ModeTransform) && a != -1 {
					continue // transactions need acks=-1
				}
				out = append(out, caseSpec{Acks: a, Partitions: p, Mode: m})
			}
		}
	}
	return out
}

// parseArgs parses the bench command line. It returns flag.ErrHelp when
// help was requested (usage has then been written to stderr).
func parseArgs(args []string, stderr io.Writer) (*Config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := &Config{}
	var brokers, acks, partitions, modes string
	fs.StringVar(&brokers, "brokers", "127.0.0.1:9092", "comma-separated seed brokers (host:port)")
	fs.StringVar(&cfg.Name, "name", "", "label of the target broker in reports (e.g. moonmq, kfake); defaults to the brokers")
	fs.StringVar(&cfg.TopicPrefix, "topic-prefix", "moonmq-bench", "prefix of the topics created for each case")
	fs.StringVar(&cfg.RunID, "run-id", strconv.FormatInt(time.Now().Unix(), 36), "unique part of topic names for this run")
	fs.Int64Var(&cfg.Records, "records", 0, "records to produce per case (overrides --duration when > 0)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long to produce per case")
	fs.IntVar(&cfg.RecordSize, "record-size", 1024, "record value size in bytes (random, incompressible)")
	fs.StringVar(&acks, "acks", "1,-1", "comma-separated acks values to run (-1/all, 0, 1)")
	fs.StringVar(&partitions, "partitions", "1,8", "comma-separated partition counts to run")
	fs.StringVar(&modes, "modes", "pipelined,one-at-a-time", "comma-separated produce modes: pipelined, one-at-a-time, transactional, end-to-end, consume-transform-produce")
	fs.IntVar(&cfg.TxnSize, "txn-size", 100, "records per transaction in transactional mode")
	fs.IntVar(&cfg.Producers, "producers", 1, "producer clients per case, run at once (each transactional one with its own transactional id; in consume-transform-produce, the sessions in the group)")
	fs.StringVar(&cfg.JSONPath, "json", "", "write results as JSON to this file")
	fs.BoolVar(&cfg.NoCreate, "no-create", false, "do not create or delete topics (they must exist or be auto-created)")
	fs.BoolVar(&cfg.KeepTopics, "keep-topics", false, "do not delete each case's topic after it ran")
	fs.DurationVar(&cfg.Linger, "linger", 0, "producer linger")
	fs.IntVar(&cfg.MaxBuffered, "max-buffered", DefaultMaxBuffered, "max records buffered (in flight) in pipelined mode")
	fs.IntVar(&cfg.MaxInflight, "max-inflight", 5, "produce requests in flight per broker when idempotency is off (acks != -1)")
	fs.StringVar(&cfg.Partitioner, "partitioner", "roundrobin", "record partitioner: roundrobin, sticky (one partition per batch, chosen at random: KIP-480, the Kafka clients' default for keyless records before 3.3) or uniform (franz-go's default, KIP-794)")
	fs.DurationVar(&cfg.ConsumeTimeout, "consume-timeout", 15*time.Second, "stop consuming after this long without progress")
	fs.DurationVar(&cfg.ProgressInterval, "progress-interval", 500*time.Millisecond, "how often to refresh the progress line on stderr")
	fs.BoolVar(&cfg.NoConsume, "no-consume", false, "skip the consume phase")
	fs.IntVar(&cfg.Rate, "rate", 0, "records per second the end-to-end mode produces at (required for it)")
	var pids string
	fs.StringVar(&pids, "broker-pids", "", "comma-separated process ids of the broker(s) on this machine: each case reports their CPU time per million records and resident memory (Linux /proc)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: moonmq bench [flags]\n\nBenchmarks a Kafka-protocol broker: for each acks × partitions × mode case,\nproduces to a fresh topic and then consumes it back.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("bench: unexpected arguments: %q", fs.Args())
	}
	var err error
	cfg.Brokers = splitList(brokers)
	if len(cfg.Brokers) == 0 {
		return nil, errors.New("bench: --brokers is empty")
	}
	if cfg.Name == "" {
		cfg.Name = strings.Join(cfg.Brokers, ",")
	}
	if cfg.Acks, err = parseAcks(acks); err != nil {
		return nil, err
	}
	if cfg.Partitions, err = parsePartitions(partitions); err != nil {
		return nil, err
	}
	if cfg.Modes, err = parseModes(modes); err != nil {
		return nil, err
	}
	for _, f := range splitList(pids) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("bench: --broker-pids: %q is not a process id", f)
		}
		if _, err := ProcCPU(pid); err != nil {
			return nil, fmt.Errorf("bench: --broker-pids: cannot read process %d: %v", pid, err)
		}
		cfg.BrokerPIDs = append(cfg.BrokerPIDs, pid)
	}
	switch {
	case cfg.RecordSize <= 0:
		return nil, fmt.Errorf("bench: --record-size must be positive, got %d", cfg.RecordSize)
	case cfg.Records < 0:
		return nil, fmt.Errorf("bench: --records must not be negative, got %d", cfg.Records)
	case cfg.Records == 0 && cfg.Duration <= 0:
		return nil, errors.New("bench: one of --records or --duration must be positive")
	case cfg.MaxBuffered <= 0:
		return nil, fmt.Errorf("bench: --max-buffered must be positive, got %d", cfg.MaxBuffered)
	case cfg.MaxInflight <= 0:
		return nil, fmt.Errorf("bench: --max-inflight must be positive, got %d", cfg.MaxInflight)
	case cfg.Producers <= 0:
		return nil, fmt.Errorf("bench: --producers must be positive, got %d", cfg.Producers)
	case cfg.TxnSize <= 0:
		return nil, fmt.Errorf("bench: --txn-size must be positive, got %d", cfg.TxnSize)
	case cfg.Partitioner != "roundrobin" && cfg.Partitioner != "sticky" && cfg.Partitioner != "uniform":
		return nil, fmt.Errorf("bench: --partitioner must be roundrobin, sticky or uniform, got %q", cfg.Partitioner)
	case cfg.ProgressInterval <= 0 || cfg.ProgressInterval > time.Second:
		return nil, fmt.Errorf("bench: --progress-interval must be in (0, 1s], got %s", cfg.ProgressInterval)
	case cfg.ConsumeTimeout <= 0:
		return nil, errors.New("bench: --consume-timeout must be positive")
	case slices.Contains(cfg.Modes, ModeEndToEnd) && cfg.Rate <= 0:
		return nil, errors.New("bench: the end-to-end mode needs --rate (records per second), e.g. half the pipelined maximum")
	case slices.Contains(cfg.Modes, ModeEndToEnd) && cfg.Records > 0:
		return nil, errors.New("bench: the end-to-end mode runs for --duration; --records does not apply")
	}
	return cfg, nil
}

// splitList splits a comma-separated list, trimming blanks and dropping
// empty elements.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseAcks(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		switch strings.ToLower(f) {
		case "all", "-1":
			out = append(out, -1)
		case "0", "none":
			out = append(out, 0)
		case "1", "leader":
			out = append(out, 1)
		default:
			return nil, fmt.Errorf("bench: invalid acks value %q (want -1/all, 0 or 1)", f)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("bench: --acks is empty")
	}
	return out, nil
}

func parsePartitions(s string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 || n > 1<<16 {
			return nil, fmt.Errorf("bench: invalid partition count %q", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("bench: --partitions is empty")
	}
	return out, nil
}

func parseModes(s string) ([]Mode, error) {
	var out []Mode
	for _, f := range splitList(s) {
		switch strings.ToLower(f) {
		case "pipelined", "async", "pipeline":
			out = append(out, ModePipelined)
		case "one-at-a-time", "sync", "oneatatime", "single":
			out = append(out, ModeOneAtATime)
		case "transactional", "txn":
			out = append(out, ModeTransactional)
		case "end-to-end", "e2e":
			out = append(out, ModeEndToEnd)
		case "consume-transform-produce", "ctp":
			out = append(out, ModeTransform)
		default:
			return nil, fmt.Errorf("bench: invalid mode %q (want pipelined, one-at-a-time, transactional, end-to-end or consume-transform-produce)", f)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("bench: --modes is empty")
	}
	return out, nil
}
