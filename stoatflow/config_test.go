package stoatflow

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigYAMLAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "app.yaml")
	os.WriteFile(path, []byte(`
other: {ignored: true}
stoatflow:
  application-id: my-app
  bootstrap-servers: [a:9092, b:9092]
  processing-guarantee: at-least-once
  state:
    dir: /var/lib/stoatflow/state
    segment-checkpoint-records: 5000
  http:
    port: 9000
  ha:
    mode: active-standby
    desired-standbys: 2
    max-standbys: 3
  sasl:
    mechanism: SCRAM-SHA-512
    username: u
    password: p
`), 0o644)
	c, err := loadConfig(path, []string{"STOATFLOW__HA__MODE=off", "STOATFLOW__STATE__SEGMENT_CHECKPOINT_MS=1500", "HOME=/x", "STOATFLOW__HA__POD_ID=pod-7"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ApplicationID != "my-app" || strings.Join(c.BootstrapServers, ",") != "a:9092,b:9092" || c.ProcessingGuarantee != AtLeastOnce {
		t.Errorf("top-level keys: %+v", c)
	}
	if c.State.Dir != "/var/lib/stoatflow/state" || c.State.SegmentCheckpointRecords != 5000 || c.State.SegmentCheckpointInterval != 1500*time.Millisecond {
		t.Errorf("state: %+v", c.State)
	}
	if c.HTTP.Port != 9000 || c.HA.Mode != "off" || c.HA.DesiredStandbys != 2 || c.HA.PodID != "pod-7" || c.HA.CoordinationTopic != "__stoatflow_my-app_ha" {
		t.Errorf("http/ha: %+v %+v", c.HTTP, c.HA)
	}
	if c.SASL.Mechanism != "SCRAM-SHA-512" || c.SASL.Username != "u" {
		t.Errorf("sasl: %+v", c.SASL)
	}
	if c.CommitInterval != time.Second {
		t.Errorf("at-least-once default commit interval %v, want 1s", c.CommitInterval)
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := loadConfig("", []string{"STOATFLOW__APPLICATION_ID=wc"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ProcessingGuarantee != ExactlyOnce || c.CommitInterval != 100*time.Millisecond ||
		c.State.SegmentCheckpointRecords != 100000 || c.State.SegmentCheckpointInterval != 30*time.Second || c.HA.Mode != "off" {
		t.Errorf("defaults: %+v", c)
	}
}

func TestConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		env  []string
		want string
	}{
		{"stoatflow:\n  application-id: a\n  stat:\n    dir: x\n", nil, "unknown key stoatflow.stat.dir"},
		{"stoatflow:\n  application-id: a\n  processing-guarantee: exactly-twice\n", nil, "key stoatflow.processing-guarantee"},
		{"stoatflow:\n  application-id: a\n  commit-interval-ms: soon\n", nil, "key stoatflow.commit-interval-ms"},
		{"stoatflow:\n  application-id: a\n  ha:\n    mode: active-active\n", nil, "key stoatflow.ha.mode"},
		{"stoatflow:\n  application-id: a\n", []string{"STOATFLOW__STATE__DIRR=x"}, "unknown environment variable STOATFLOW__STATE__DIRR"},
		{"stoatflow:\n  application-id: a\n", []string{"STOATFLOW__HTTP__PORT=eighty"}, "STOATFLOW__HTTP__PORT (key stoatflow.http.port)"},
		{"stoatflow:\n  bootstrap-servers: x:1\n", nil, "stoatflow.application-id is required"},
		{"stoatflow:\n  application-id: a b\n", nil, "may hold only"},
		{"stoatflow:\n  application-id: a\n  ha:\n    desired-standbys: 4\n    max-standbys: 2\n", nil, "max-standbys"},
		{"kafka:\n  x: 1\n", nil, "no stoatflow: block"},
	} {
		path := filepath.Join(t.TempDir(), "c.yaml")
		os.WriteFile(path, []byte(tc.yaml), 0o644)
		_, err := loadConfig(path, tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q %v: error %v, want one naming %q", tc.yaml, tc.env, err, tc.want)
		}
	}
}
