package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// adminFlags are the flags of the commands that ask brokers over the
// Kafka protocol (topic, group).
type adminFlags struct {
	bootstrap *string
	config    *string
	timeout   *time.Duration
}

func addAdminFlags(fs *flag.FlagSet) adminFlags {
	return adminFlags{
		bootstrap: fs.String("bootstrap", "", "brokers to ask, HOST:PORT[,HOST:PORT...] (default: from --config, else 127.0.0.1:9092)"),
		config:    fs.String("config", "", "a broker's config file: its client address, and in a replication group every replica's"),
		timeout:   fs.Duration("timeout", 15*time.Second, "how long to wait for the brokers"),
	}
}

// parseAdmin parses args into fs; code is -1 to go on, else the exit code.
func parseAdmin(fs *flag.FlagSet, args []string) (code int) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	return -1
}

// client connects an admin client to the brokers the flags name; it
// prints why not (prefixed with cmd) and returns ok false.
func (f adminFlags) client(cmd string, stderr io.Writer) (adm *kadm.Client, seeds []string, ok bool) {
	seeds, err := seedBrokers(*f.bootstrap, *f.config)
	if err != nil {
		fmt.Fprintln(stderr, cmd+":", err)
		return nil, nil, false
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DialTimeout(3*time.Second), kgo.RetryTimeout(*f.timeout))
	if err != nil {
		fmt.Fprintln(stderr, cmd+":", err)
		return nil, nil, false
	}
	return kadm.NewClient(cl), seeds, true
}

// noBroker explains a first request that failed: most often nothing
// listens where the command looked.
func (f adminFlags) noBroker(cmd string, stderr io.Writer, seeds []string, err error) {
	fmt.Fprintf(stderr, "%s: no broker answered at %s within %v (%v): is the broker running? pass --bootstrap HOST:PORT or --config FILE\n",
		cmd, strings.Join(seeds, ","), *f.timeout, err)
}
