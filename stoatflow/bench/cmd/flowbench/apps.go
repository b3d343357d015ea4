package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// app is one running application under test.
type app struct {
	framework string // stoatflow | kstreams | goka
	guarantee string // eos | alo
	id        string // application id / goka group
	p         *proc
	httpAddr  string // StoatFlow's health endpoint
	stateDir  string
	profile   string // CPU profile path (StoatFlow)
	launched  int64  // unix ms
}

type appOpts struct {
	profile   bool
	tsHeaders bool   // goka: carry the input timestamp in a header
	stateDir  string // reuse (restore); default a fresh one
	logSuffix string
}

const (
	fwStoatFlow = "stoatflow"
	// fwStoatFlowCache is StoatFlow with its table cache on, so that it
	// forwards what Kafka Streams' default cache forwards: the latest
	// count per word per commit rather than every one.
	fwStoatFlowCache = "stoatflow-cache"
	fwKStreams       = "kstreams"
	fwGoka           = "goka"
)

var fwTitle = map[string]string{fwStoatFlow: "StoatFlow", fwStoatFlowCache: "StoatFlow (table cache)", fwKStreams: "Kafka Streams", fwGoka: "goka"}

// internalTopics are the topics besides the input whose committed
// positions must reach their end for the input to count as processed.
func internalTopics(framework, mode, id string) []string {
	if mode != "wordcount" {
		return nil
	}
	if framework == fwGoka {
		return []string{id + "-loop"}
	}
	return []string{id + "-counts-repartition"}
}

func (b *bench) startApp(framework, guarantee, mode, id, input, output string, o appOpts) (*app, error) {
	a := &app{framework: framework, guarantee: guarantee, id: id, stateDir: o.stateDir}
	if a.stateDir == "" {
		a.stateDir = filepath.Join(b.work, "state", id)
	}
	if err := os.MkdirAll(a.stateDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(b.results, "logs", id+o.logSuffix+".log")
	var bin string
	var args []string
	switch framework {
	case fwStoatFlow, fwStoatFlowCache:
		g := "exactly-once"
		if guarantee == "alo" {
			g = "at-least-once"
		}
		port := freePort()
		a.httpAddr = fmt.Sprintf("127.0.0.1:%d", port)
		bin = b.bins.flowapp
		args = []string{"--mode", mode, "--app-id", id, "--bootstrap", b.br.addr, "--guarantee", g,
			"--input", input, "--output", output, "--state-dir", a.stateDir, "--http-port", strconv.Itoa(port),
			"--window", b.opt.window.String(), "--windowed-impl", b.opt.windowImpl}
		if b.opt.threads > 0 {
			args = append(args, "--threads", strconv.Itoa(b.opt.threads))
		}
		if framework == fwStoatFlowCache {
			args = append(args, "--cache-max-keys", strconv.Itoa(b.opt.cacheKeys))
		}
		if o.profile {
			a.profile = filepath.Join(b.results, "cpu-"+id+o.logSuffix+".prof")
			args = append(args, "--cpuprofile", a.profile)
		}
	case fwKStreams:
		g := "exactly_once_v2"
		if guarantee == "alo" {
			g = "at_least_once"
		}
		bin = b.bins.java
		args = []string{"-Xmx2g", "-cp", b.bins.ksClasspath, "io.moonmq.flowbench.KsApp",
			"--mode", mode, "--app-id", id, "--bootstrap", b.br.addr, "--guarantee", g,
			"--input", input, "--output", output, "--state-dir", a.stateDir,
			"--window-ms", strconv.FormatInt(b.opt.window.Milliseconds(), 10)}
	case fwGoka:
		if mode != "wordcount" || guarantee != "alo" {
			return nil, fmt.Errorf("goka runs only the at-least-once word count")
		}
		bin = b.bins.gokaapp
		args = []string{"--group", id, "--bootstrap", b.br.addr, "--input", input, "--output", output,
			"--state-dir", a.stateDir, "--ts-headers=" + strconv.FormatBool(o.tsHeaders)}
	default:
		return nil, fmt.Errorf("unknown framework %s", framework)
	}
	a.launched = nowMs()
	p, err := startProc(id, logPath, bin, args, nil)
	if err != nil {
		return nil, err
	}
	a.p = p
	return a, nil
}
